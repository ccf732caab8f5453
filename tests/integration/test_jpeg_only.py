"""Shards for training code we did not write: --transcode jpeg (JPEG-only readers), the summary's
non-JPEG warning, and --dali_index files across --resume, --versioned and no-change reruns."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import dali_index, schema, versions
from pipeline.options import ConvertConfig, OptionError
from pipeline.verify import verify_dataset
from tests.mixed_folder import NON_JPEG, encode, write_mixed_folder
from tests.runs import in_process
from transforms.images.check import check_image, encode_for_storage
from transforms.images.limits import CheckOptions

COMMON = ("--no_analyze", "--target_shard_mb", "0.02")


def _convert(src: str, out: str, *flags: str) -> subprocess.CompletedProcess:
    return in_process("convert", "--input", f"{src}/*/*", "--output", out, *COMMON, *flags)


def _info(data_dir: str) -> dict:
    with open(os.path.join(data_dir, schema.DATASET_INFO)) as f:
        return json.load(f)


def _records(data_dir: str) -> dict[str, dict]:
    """{source path: parsed Example} of every record of every shard."""
    out = {}
    for entry in _info(data_dir)["splits"].values():
        for shard in entry["shards"]:
            for record in tf.data.TFRecordDataset(os.path.join(data_dir, shard["file"])):
                ex = tf.io.parse_single_example(record, schema.feature_spec())
                ex = {k: v.numpy() for k, v in ex.items()}
                out[ex[schema.FILENAME].decode()] = ex
    return out


def _shards(data_dir: str) -> list[dict]:
    return [s for e in _info(data_dir)["splits"].values() for s in e["shards"]]


def _jpeg_only_reader(data_dir: str) -> tf.data.Dataset:
    """What TF Model Garden's classification input (decode_jpeg_only: True) and the TPU ResNet
    preprocessing do: parse image/encoded + image/class/label, extract_jpeg_shape, then
    decode_and_crop_jpeg a window (here the centre half)."""
    files = [os.path.join(data_dir, s["file"]) for s in _shards(data_dir)]
    spec = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string),
        "image/class/label": tf.io.FixedLenFeature((), tf.int64),
    }

    def decode(record):
        ex = tf.io.parse_single_example(record, spec)
        shape = tf.image.extract_jpeg_shape(ex["image/encoded"])
        h, w = shape[0], shape[1]
        window = tf.stack([h // 4, w // 4, tf.maximum(h // 2, 1), tf.maximum(w // 2, 1)])
        image = tf.image.decode_and_crop_jpeg(ex["image/encoded"], window, channels=3)
        return tf.image.resize(image, (32, 32)), ex["image/class/label"]

    return tf.data.TFRecordDataset(files).map(decode).batch(4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> dict[str, str]:
    return write_mixed_folder(str(tmp_path_factory.mktemp("photos")))


@pytest.fixture(scope="module")
def src(folder) -> str:
    return os.path.dirname(os.path.dirname(next(iter(folder))))


@pytest.fixture(scope="module")
def default_run(src, tmp_path_factory) -> tuple[str, str]:
    out = str(tmp_path_factory.mktemp("default") / "ds")
    return out, _convert(src, out).stdout


@pytest.fixture(scope="module")
def jpeg_run(src, tmp_path_factory) -> tuple[str, str]:
    out = str(tmp_path_factory.mktemp("jpeg") / "ds")
    return out, _convert(src, out, "--transcode", "jpeg", "--dali_index").stdout


# ----------------------------------------------------------------------------- --transcode jpeg
def test_transcode_jpeg_writes_the_same_files_every_one_a_jpeg(folder, default_run, jpeg_run):
    default, jpeg = _records(default_run[0]), _records(jpeg_run[0])
    assert sorted(jpeg) == sorted(default) == sorted(folder)  # nothing lost, nothing added
    assert _info(jpeg_run[0])["num_written"] == _info(default_run[0])["num_written"] == len(folder)
    assert _info(jpeg_run[0])["formats_written"] == {"jpeg": len(folder)}
    assert _info(jpeg_run[0])["transcode"] == "jpeg"
    for path, ex in jpeg.items():
        name = os.path.basename(path)
        assert ex[schema.FORMAT] == b"jpeg", name
        assert ex[schema.ENCODED][:3] == b"\xff\xd8\xff", name
        assert ex[schema.CHANNELS] in (1, 3), name
        if folder[path] == "jpeg":  # kept byte for byte: the same record as the default run's
            assert ex[schema.ENCODED] == default[path][schema.ENCODED], name
            assert ex[schema.TRANSCODE_REASON] == b"", name
        else:
            assert ex[schema.CHANNELS] == 3, name  # gray and palette sources become RGB
            want = {"png": "png_to_jpeg", "gif": "gif_to_jpeg"}.get(
                folder[path], "unsupported_format"
            )
            if name == "animated.gif":
                want += ",animated_first_frame"
            assert ex[schema.TRANSCODE_REASON].decode() == want, name
            assert ex[schema.TRANSCODED_FROM].decode() == folder[path], name
    assert verify_dataset(jpeg_run[0]).ok


def test_a_jpeg_only_reader_reads_every_record_of_transcode_jpeg_only(default_run, jpeg_run):
    labels = [int(x) for _, batch in _jpeg_only_reader(jpeg_run[0]) for x in batch.numpy()]
    assert len(labels) == len(_records(jpeg_run[0]))
    assert sorted(labels) == sorted(int(ex[schema.LABEL]) for ex in _records(jpeg_run[0]).values())
    # The crash, on the default conversion of the same folder.
    with pytest.raises(tf.errors.InvalidArgumentError):
        for _ in _jpeg_only_reader(default_run[0]):
            pass


def test_transparency_is_composited_onto_white_and_jpegs_keep_their_bytes(folder):
    path = next(p for p in folder if p.endswith("transparent.png"))
    with open(path, "rb") as f:
        data = f.read()
    opts = CheckOptions(transcode="jpeg")
    info = check_image(data, opts)
    assert (info.format, info.transcode, info.channels) == ("jpeg", "png_to_jpeg", 3)
    stored = encode_for_storage(data, info, opts)
    pixels = tf.io.decode_jpeg(stored).numpy()
    left, right = pixels[:, : info.width // 2 - 2], pixels[:, info.width // 2 + 2 :]
    assert left.min() >= 240  # transparent -> white (TensorFlow's channels=3 would show black)
    assert right.mean() < 200  # the opaque photo is still there
    assert encode_for_storage(data, info, opts) == stored  # deterministic
    # The quality option reaches the encoder.
    low = CheckOptions(transcode="jpeg", jpeg_quality=20)
    assert len(encode_for_storage(data, check_image(data, low), low)) < len(stored)
    for p, fmt in folder.items():
        if fmt == "jpeg":
            with open(p, "rb") as f:
                jpeg = f.read()
            kept = check_image(jpeg, opts)
            assert (kept.transcode, encode_for_storage(jpeg, kept, opts)) == ("", jpeg), p


def test_option_combinations_that_cannot_work_are_refused():
    from apache_beam.options.pipeline_options import PipelineOptions

    def config(*flags):
        return ConvertConfig.from_options(
            PipelineOptions(["--input", "x", "--output", "y", *flags])
        )

    assert config("--dali_index").dali_index and not config().dali_index
    with pytest.raises(OptionError, match="DALI's fn.readers.tfrecord reads uncompressed"):
        config("--dali_index", "--compression", "gzip")
    with pytest.raises(OptionError, match="--transcode jpeg with --store pixels"):
        config("--transcode", "jpeg", "--store", "pixels", "--max_side", "64")


# ----------------------------------------------------------------------------- the warning
def test_the_default_run_names_transcode_jpeg_in_summary_inspect_and_report(default_run, jpeg_run):
    data_dir, stdout = default_run
    # png: 5 PNGs (one named .jpg), the BMP, the WebP with alpha, the animated GIF's frame.
    counted = "10 records are not JPEG (png 8, gif 1, webp 1)"
    assert _info(data_dir)["formats_written"] == {"gif": 1, "jpeg": 14, "png": 8, "webp": 1}
    for text in (stdout, in_process("inspect", data_dir).stdout):
        line = next(x for x in text.splitlines() if "not JPEG" in x)
        assert counted in line and "--transcode jpeg" in line and "decode_jpeg" in line
    with open(os.path.join(data_dir, "report.html")) as f:
        report = f.read()
    assert counted in report and "--transcode jpeg" in report
    assert (
        "not JPEG" not in jpeg_run[1]
        and "not JPEG" not in in_process("inspect", jpeg_run[0]).stdout
    )


def test_verify_refuses_a_non_jpeg_record_in_a_transcode_jpeg_dataset(default_run, tmp_path):
    copy = str(tmp_path / "ds")
    shutil.copytree(default_run[0], copy)
    info = _info(copy)
    info["transcode"] = "jpeg"  # as if the run had asked for JPEG only
    with open(os.path.join(copy, schema.DATASET_INFO), "w") as f:
        json.dump(info, f)
    report = verify_dataset(copy)
    assert not report.ok
    assert sum("'png' record in a --transcode jpeg dataset" in p for p in report.problems) == 8


# ----------------------------------------------------------------------------- --dali_index
def test_dali_index_files_are_what_dalis_tfrecord2idx_writes(jpeg_run, tmp_path):
    data_dir = jpeg_run[0]
    script = os.path.join(os.path.dirname(sys.executable), "tfrecord2idx")
    assert os.path.exists(script), "DALI's tfrecord2idx (nvidia-dali-cuda120) is not installed"
    shards = _shards(data_dir)
    assert {s["dali_index"]["file"] for s in shards} == {s["file"] + ".idx" for s in shards}
    nonempty = [s for s in shards if s["num_examples"]]
    assert len(nonempty) >= 2
    for shard in shards:
        path = os.path.join(data_dir, shard["file"])
        with open(path + ".idx", "rb") as f:
            ours = f.read()
        assert len(ours.splitlines()) == shard["num_examples"]
        assert hashlib.sha256(ours).hexdigest() == shard["dali_index"]["sha256"]
        with open(path, "rb") as f:
            assert dali_index.index_of_shard(f.read()) == ours
    # DALI's own script (without TensorFlow, as its ImportError branch reads plain files).
    for shard in nonempty[:2]:
        path = os.path.join(data_dir, shard["file"])
        theirs = str(tmp_path / "theirs.idx")
        env = dict(os.environ, PYTHONPATH=str(tmp_path))  # a stub `tensorflow` that fails import
        with open(tmp_path / "tensorflow.py", "w") as f:
            f.write("raise ImportError('no TensorFlow for tfrecord2idx')\n")
        subprocess.run([sys.executable, script, path, theirs], check=True, env=env)
        with open(theirs, "rb") as f, open(path + ".idx", "rb") as g:
            assert f.read() == g.read()


def test_verify_notices_a_damaged_dali_index(jpeg_run, tmp_path):
    copy = str(tmp_path / "ds")
    shutil.copytree(jpeg_run[0], copy)
    shard = next(s for s in _shards(copy) if s["num_examples"] > 1)
    idx = os.path.join(copy, shard["dali_index"]["file"])
    with open(idx, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    with open(idx, "wb") as f:
        f.writelines(lines[:-1])
    problems = verify_dataset(copy).problems
    assert any(shard["dali_index"]["file"] in p and "does not index" in p for p in problems)


def _index_files(data_dir: str) -> dict[str, bytes]:
    found = {}
    for path in sorted(glob.glob(os.path.join(data_dir, "*", "*.idx"))):
        with open(path, "rb") as f:
            found[os.path.relpath(path, data_dir)] = f.read()
    return found


def _assert_indexes_match(data_dir: str) -> None:
    shards = _shards(data_dir)
    assert sorted(_index_files(data_dir)) == sorted(s["dali_index"]["file"] for s in shards)
    for shard in shards:
        with open(os.path.join(data_dir, shard["file"]), "rb") as f:
            want = dali_index.index_of_shard(f.read())
        assert _index_files(data_dir)[shard["dali_index"]["file"]] == want
    assert verify_dataset(data_dir, decode=False).ok


def test_dali_index_survives_resume(src, jpeg_run, tmp_path):
    out = str(tmp_path / "ds")
    _convert(src, out)  # without indexes first: --resume --dali_index must add them all
    assert _index_files(out) == {}
    _convert(src, out, "--resume", "--dali_index")
    _assert_indexes_match(out)
    # A shard whose index is gone is written again (with its index) on --resume; the rest stay.
    first = _index_files(out)
    lost = sorted(first)[0]
    os.remove(os.path.join(out, lost))
    _convert(src, out, "--resume", "--dali_index")
    assert _index_files(out) == first
    _assert_indexes_match(out)
    # Without --dali_index again: the indexes (no longer listed) are removed with the old shards.
    _convert(src, out, "--resume")
    assert _index_files(out) == {} and all("dali_index" not in s for s in _shards(out))


def test_dali_index_survives_versioned_and_no_change_reruns(src, folder, tmp_path):
    root = str(tmp_path / "root")
    own = str(tmp_path / "photos")
    shutil.copytree(src, own)

    def run(*flags):
        proc = _convert(own, root, "--versioned", *flags)
        return os.path.join(root, versions.read_latest(root)), proc.stdout

    first, _ = run("--dali_index")
    _assert_indexes_match(first)
    second, stdout = run("--dali_index")  # nothing changed: made from the first version
    assert "nothing changed" in stdout
    assert _index_files(second) == _index_files(first)
    _assert_indexes_match(second)
    # One new file: an incremental version; unchanged shards are copied (hard links here) with
    # their indexes, checked against the sizes and sha256 the first version recorded.
    with open(os.path.join(own, "cat", "new.jpg"), "wb") as f:
        f.write(encode(Image.new("RGB", (33, 22), (200, 30, 60)), "JPEG"))
    third, stdout = run("--dali_index")
    assert "nothing changed" not in stdout
    _assert_indexes_match(third)
    assert sum(s["num_examples"] for s in _shards(third)) == len(folder) + 1
    before = {s["file"]: s["sha256"] for s in _shards(second) if s["num_bytes"]}
    same = [s for s in _shards(third) if s["num_bytes"] and before.get(s["file"]) == s["sha256"]]
    assert same and len(same) < len(before)
    for shard in same:
        for rel in (shard["file"], shard["dali_index"]["file"]):
            a, b = (os.stat(os.path.join(d, rel)).st_ino for d in (second, third))
            assert a == b, rel
    # Another command line is not "unchanged": without --dali_index, no index is listed or left.
    fourth, stdout = run()
    assert "nothing changed" not in stdout
    assert _index_files(fourth) == {} and all("dali_index" not in s for s in _shards(fourth))
    assert _info(fourth)["dali_index"] is False


@pytest.mark.parametrize("name", sorted(NON_JPEG))
def test_every_non_jpeg_source_is_stored_as_rgb_jpeg(folder, name):
    path = next(p for p in folder if p.endswith(os.sep + name))
    with open(path, "rb") as f:
        data = f.read()
    opts = CheckOptions(transcode="jpeg")
    info = check_image(data, opts)
    stored = encode_for_storage(data, info, opts)
    assert (info.format, info.source_format, info.channels) == ("jpeg", NON_JPEG[name], 3)
    pixels = tf.image.decode_and_crop_jpeg(stored, [0, 0, info.height, info.width], channels=0)
    assert pixels.shape == (info.height, info.width, 3)
    assert np.asarray(pixels).dtype == np.uint8


def test_the_warning_counts_encoded_non_jpeg_records_only():
    from pipeline.report.summary import non_jpeg_warning

    assert non_jpeg_warning({}) == ""  # a dataset_info.json of an older run: no counts, no claim
    assert non_jpeg_warning({"formats_written": {"jpeg": 9}}) == ""
    # Raw pixels (--store pixels|smart) are a choice made for imgrec's reader: not warned about.
    assert non_jpeg_warning({"formats_written": {"jpeg": 9, schema.RAW_FORMAT: 4}}) == ""
    one = non_jpeg_warning({"formats_written": {"jpeg": 9, "png": 1}})
    assert one.startswith("1 record is not JPEG (png 1): ") and "fails on it" in one
    many = non_jpeg_warning({"formats_written": {"gif": 2, "png": 3, "webp": 2, "jpeg": 1}})
    assert many.startswith("7 records are not JPEG (png 3, gif 2, webp 2): ")
    assert "--transcode jpeg" in many
