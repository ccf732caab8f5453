"""Conversions through `imgrec convert` in process: accounting, decodability, determinism, splits,
shards, errors (tests/e2e/test_cli.py runs the same command line in fresh processes)."""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
from apache_beam.internal import cloudpickle_pickler

from core import schema
from pipeline.demo import build_corpus
from tests.runs import cli_env, read_records, tf_script
from tests.runs import in_process as run_cli
from tests.servers import ProxyTrap
from tests.unit.test_decoder_isolation import _encode, _photo
from transforms.images import decoder_pool


def shard_digests(out: str) -> dict[str, str]:
    files = sorted(glob.glob(os.path.join(out, "*", "*.tfrecord")))
    return {
        os.path.relpath(f, out): hashlib.sha256(open(f, "rb").read()).hexdigest() for f in files
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("corpus"))
    summary = build_corpus(d, num_images=60, seed=1, long_side=(96, 160))
    return d, summary


@pytest.fixture(scope="module")
def converted(corpus, tmp_path_factory):
    src, summary = corpus
    out = str(tmp_path_factory.mktemp("out") / "ds")
    pickler_bz2 = cloudpickle_pickler.bz2
    proc = run_cli(
        "convert",
        "--input",
        f"{src}/*/*.jpg",
        "--output",
        out,
        "--no_analyze",
        "--splits",
        "train=0.7,validation=0.2,test=0.1",
        "--target_shard_mb",
        "0.05",
    )
    # A library caller's in-process run leaves Beam's pickler as it found it (the bz2 shim is
    # only in place while the run runs: pipeline/launch/patches.py).
    assert cloudpickle_pickler.bz2 is pickler_bz2
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    return out, info, summary, proc


def test_accounting_invariant_and_summary(converted):
    out, info, summary, proc = converted
    n_files = summary["images"] + len(summary["broken"]) + 2  # + png-as-jpg + duplicate
    assert info["num_listed"] == n_files
    assert info["num_listed"] == info["num_written"] + info["num_rejected"] + info["num_duplicates"]
    assert info["num_rejected"] == len(summary["broken"])
    assert info["num_duplicates"] == 1
    assert info["num_written"] == summary["images"] + 1
    assert sum(s["num_examples"] for s in info["splits"].values()) == info["num_written"]
    assert "written" in proc.stdout and "rejected" in proc.stdout and "shards" in proc.stdout


def test_rejects_carry_reasons(converted, corpus):
    out, info, summary, _ = converted
    src = corpus[0]
    with open(os.path.join(out, schema.REJECTED)) as f:
        rows = [json.loads(line) for line in f]
    got = {os.path.relpath(r["path"], src): r["reason"] for r in rows}
    assert set(got) == set(summary["broken"])
    assert got["astronaut/broken_empty.jpg"] == "empty_file"
    assert got["astronaut/broken_text.jpg"] == "not_an_image"
    assert got["astronaut/broken_truncated.jpg"] in ("truncated", "corrupt")
    assert all(r["detail"] for r in rows)
    with open(os.path.join(out, schema.DUPLICATES)) as f:
        dups = [json.loads(line) for line in f]
    assert [os.path.relpath(d["path"], src) for d in dups] == [summary["duplicate"]]
    assert dups[0]["sha256"] and dups[0]["duplicate_of"] != dups[0]["path"]


def test_every_record_parses_and_decodes(converted, corpus):
    import tensorflow as tf

    out, info, summary, _ = converted
    spec = schema.feature_spec()
    seen_png = False
    for entry in info["splits"].values():
        count = 0
        for shard in entry["shards"]:
            path = os.path.join(out, shard["file"])
            data = open(path, "rb").read()
            assert len(data) == shard["num_bytes"]
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
            records = read_records(path)
            assert len(records) == shard["num_examples"]
            for rec in records:
                ex = tf.io.parse_single_example(rec, spec)
                encoded = ex[schema.ENCODED].numpy()
                img = tf.io.decode_image(encoded, channels=3, expand_animations=False)
                assert img.shape[0] == ex[schema.HEIGHT].numpy()
                assert img.shape[1] == ex[schema.WIDTH].numpy()
                assert hashlib.sha256(encoded).hexdigest() == ex[schema.SHA256].numpy().decode()
                label = int(ex[schema.LABEL].numpy())
                assert info["label_names"][label] == ex[schema.LABEL_TEXT].numpy().decode()
                assert ex[schema.VERSION].numpy() == schema.SCHEMA_VERSION
                fmt = ex[schema.FORMAT].numpy().decode()
                if ex[schema.FILENAME].numpy().decode().endswith(summary["png_as_jpg"]):
                    assert fmt == "png"
                    seen_png = True
                else:
                    assert fmt == "jpeg"
                    tf.io.decode_jpeg(encoded)
                count += 1
        assert count == entry["num_examples"]
    assert seen_png, "the PNG named .jpg must be accepted as PNG"


def test_label_map_is_sorted_set_of_folders(converted):
    _, info, _, _ = converted
    assert info["label_names"] == ["astronaut", "cat", "coffee", "motorcycle", "rocket"]


def test_shard_count_follows_byte_target(converted):
    _, info, _, _ = converted
    for split, entry in info["splits"].items():
        expected = max(1, min(entry["num_examples"], math.ceil(entry["num_bytes"] / 0.05e6)))
        # Planned from source sizes; TFRecord framing adds a little, so allow one shard of slack.
        assert entry["num_shards"] in (expected, expected - 1), (split, entry["num_shards"])
        names = [s["file"] for s in entry["shards"]]
        assert names == [
            schema.shard_name(split, i, entry["num_shards"]) for i in range(entry["num_shards"])
        ]
    assert info["splits"]["train"]["num_shards"] >= 2


def test_two_runs_give_byte_identical_shards(converted, corpus, tmp_path):
    out, _, _, _ = converted
    src = corpus[0]
    out2 = str(tmp_path / "again")
    run_cli(
        "convert",
        "--input",
        f"{src}/*/*.jpg",
        "--output",
        out2,
        "--no_analyze",
        "--splits",
        "train=0.7,validation=0.2,test=0.1",
        "--target_shard_mb",
        "0.05",
        "--workers",
        "1",
    )
    assert shard_digests(out) == shard_digests(out2)
    a = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    b = json.load(open(os.path.join(out2, schema.DATASET_INFO)))
    assert a["splits"] == b["splits"]


def test_adding_files_moves_no_file_between_splits(corpus, tmp_path):
    import tensorflow as tf

    src, _ = corpus
    grown = str(tmp_path / "grown")
    shutil.copytree(src, grown)
    build_corpus(str(tmp_path / "extra"), num_images=25, seed=99, long_side=(64, 96), broken=False)
    for label in os.listdir(tmp_path / "extra"):
        for name in os.listdir(tmp_path / "extra" / label):
            shutil.copy(
                tmp_path / "extra" / label / name, os.path.join(grown, label, "new_" + name)
            )

    def split_of(out: str, root: str) -> dict[str, str]:
        info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
        result = {}
        for split, entry in info["splits"].items():
            for shard in entry["shards"]:
                for rec in read_records(os.path.join(out, shard["file"])):
                    ex = tf.io.parse_single_example(rec, schema.feature_spec((schema.FILENAME,)))
                    result[os.path.relpath(ex[schema.FILENAME].numpy().decode(), root)] = split
        return result

    common = ("--no_analyze", "--splits", "train=0.5,validation=0.25,test=0.25")
    run_cli("convert", "--input", f"{src}/*/*.jpg", "--output", str(tmp_path / "a"), *common)
    run_cli("convert", "--input", f"{grown}/*/*.jpg", "--output", str(tmp_path / "b"), *common)
    before = split_of(str(tmp_path / "a"), src)
    after = split_of(str(tmp_path / "b"), grown)
    assert len(after) > len(before)
    assert {k: after[k] for k in before} == before


def test_manifest_csv_and_jsonl_with_split_column(corpus, tmp_path):
    src, summary = corpus
    files = sorted(glob.glob(f"{src}/*/*_0000[0-9]*.jpg"))[:12]
    csv_path = tmp_path / "m.csv"
    with open(csv_path, "w") as f:
        f.write("path,label,split\n")
        for i, p in enumerate(files):
            f.write(f"{p},{'even' if i % 2 == 0 else 'odd'},{'train' if i < 8 else 'test'}\n")
    run_cli(
        "convert",
        "--manifest",
        str(csv_path),
        "--output",
        str(tmp_path / "csv"),
        "--split_from",
        "manifest",
        "--no_analyze",
    )
    info = json.load(open(tmp_path / "csv" / schema.DATASET_INFO))
    assert info["label_names"] == ["even", "odd"]
    assert {k: v["num_examples"] for k, v in info["splits"].items()} == {"train": 8, "test": 4}

    jsonl = tmp_path / "m.jsonl"
    with open(jsonl, "w") as f:
        for p in files[:5]:
            f.write(json.dumps({"path": os.path.relpath(p, tmp_path), "label": "x"}) + "\n")
        f.write(json.dumps({"path": "", "label": "x"}) + "\n")
    run_cli(
        "convert",
        "--manifest",
        str(jsonl),
        "--output",
        str(tmp_path / "jsonl"),
        "--no_analyze",
        "--max_bad_fraction",
        "0.5",
    )
    info = json.load(open(tmp_path / "jsonl" / schema.DATASET_INFO))
    assert info["num_listed"] == 6 and info["num_written"] == 5 and info["num_rejected"] == 1
    assert info["rejected_by_reason"] == {"bad_manifest_row": 1}


def test_split_from_path_layout(corpus, tmp_path):
    src, _ = corpus
    layout = tmp_path / "layout"
    for split, labels, picked in (
        ("train", ("cat", "rocket"), slice(0, 3)),
        ("validation", ("cat",), slice(3, 6)),
    ):
        for label in labels:
            os.makedirs(layout / split / label)
            for p in sorted(glob.glob(f"{src}/{label}/{label}_*.jpg"))[picked]:
                shutil.copy(p, layout / split / label)
    run_cli(
        "convert",
        "--input",
        f"{layout}/**/*.jpg",
        "--output",
        str(tmp_path / "o"),
        "--split_from",
        "path",
        "--no_analyze",
    )
    info = json.load(open(tmp_path / "o" / schema.DATASET_INFO))
    assert {k: v["num_examples"] for k, v in info["splits"].items()} == {
        "train": 6,
        "validation": 3,
    }
    assert info["label_names"] == ["cat", "rocket"]


def test_bad_input_fails_with_one_clear_line_and_writes_nothing(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "o"
    cases = [
        (["--input", str(tmp_path / "nothing" / "*.jpg")], "matched no files"),
        (["--manifest", str(tmp_path / "missing.csv")], "--manifest"),
        (["--input", f"{src}/*/*.jpg", "--no_such_option", "1"], "unknown option --no_such_option"),
        (["--input", f"{src}/*/*.jpg", "--splits", "train=0.5"], "sum to 0.5"),
    ]
    for args, message in cases:
        proc = run_cli("convert", *args, "--output", str(out), check=False)
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("imgrec:")]
        assert len(lines) == 1 and message in lines[0], proc.stderr
        assert not out.exists()


def test_existing_dataset_refused_unless_overwrite(converted, corpus):
    out, info, _, _ = converted
    src = corpus[0]
    before = shard_digests(out)
    proc = run_cli("convert", "--input", f"{src}/*/*.jpg", "--output", out, check=False)
    assert proc.returncode == 2 and "already holds a dataset" in proc.stderr
    assert "--overwrite" in proc.stderr
    assert shard_digests(out) == before


def test_resume_skips_finished_shards_and_overwrite_replaces(corpus, tmp_path):
    src, _ = corpus
    out = str(tmp_path / "o")
    args = (
        "convert",
        "--input",
        f"{src}/*/*.jpg",
        "--output",
        out,
        "--no_analyze",
        "--target_shard_mb",
        "0.1",
        "--splits",
        "train=1.0",
    )
    run_cli(*args)
    first = shard_digests(out)
    assert len(first) >= 3
    # Simulate an interrupted run: description gone, one shard missing, a temp file left over.
    os.remove(os.path.join(out, schema.DATASET_INFO))
    victim = sorted(first)[1]
    os.remove(os.path.join(out, victim))
    open(os.path.join(out, "train", ".tmp-leftover"), "wb").write(b"partial")
    proc = run_cli(*args, check=False)
    assert proc.returncode == 2 and "--resume" in proc.stderr
    mtimes = {f: os.path.getmtime(os.path.join(out, f)) for f in first if f != victim}
    run_cli(*args, "--resume")
    assert shard_digests(out) == first
    assert {f: os.path.getmtime(os.path.join(out, f)) for f in mtimes} == mtimes
    assert not os.path.exists(os.path.join(out, "train", ".tmp-leftover"))
    run_cli(*args, "--overwrite")
    assert shard_digests(out) == first


def test_a_full_disk_fails_the_run_and_leaves_no_partial_shard(corpus, tmp_path, monkeypatch):
    """ENOSPC in the middle of a shard: one `imgrec:` line naming it, exit 1, and the partial
    temp shard is deleted rather than left filling the disk; --resume then completes."""
    import errno

    from transforms import write_shards

    src, _ = corpus
    out = str(tmp_path / "o")
    args = ("convert", "--input", f"{src}/*/*.jpg", "--output", out, "--no_analyze")
    real, calls = write_shards.write_record, []

    def full_disk(sink, data):
        calls.append(1)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(sink, data)

    monkeypatch.setattr(write_shards, "write_record", full_disk)
    proc = run_cli(*args, check=False)
    assert proc.returncode == 1 and "No space left on device" in proc.stderr, proc.stderr
    assert "free space on the disk of --output" in proc.stderr and "--resume" in proc.stderr
    left = [n for _, _, names in os.walk(out) for n in names if n.startswith(".tmp-")]
    assert left == [] and not os.path.exists(os.path.join(out, schema.DATASET_INFO))
    monkeypatch.setattr(write_shards, "write_record", real)
    run_cli(*args, "--resume")
    assert shard_digests(out)


def test_too_many_rejects_fails_after_writing_report(tmp_path):
    src = tmp_path / "bad" / "x"
    os.makedirs(src)
    for i in range(4):
        (src / f"t{i}.jpg").write_bytes(b"not an image")
    build_corpus(str(tmp_path / "good"), num_images=3, seed=3, long_side=(64, 80), broken=False)
    for p in glob.glob(str(tmp_path / "good" / "*" / "*.jpg")):
        shutil.copy(p, src)
    out = tmp_path / "o"
    proc = run_cli(
        "convert",
        "--input",
        f"{tmp_path}/bad/*/*.jpg",
        "--output",
        str(out),
        "--no_analyze",
        check=False,
    )
    assert proc.returncode == 3  # EXIT_TOO_MANY_REJECTS
    assert "--resume" in proc.stderr and "--overwrite" in proc.stderr
    assert (
        "4 of 7 listed files were rejected" in proc.stderr and "--max_bad_fraction" in proc.stderr
    )
    assert (out / schema.REJECTED).exists() and not (out / schema.DATASET_INFO).exists()
    assert len((out / schema.REJECTED).read_text().splitlines()) == 4


def test_config_file_sets_options_and_cli_wins(corpus, tmp_path):
    src, _ = corpus
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"input: ['{src}/cat/*.jpg']\nsplits: train=0.5,test=0.5\nno_analyze: true\nmin_shards: 3\n"
    )
    out = tmp_path / "o"
    run_cli("convert", "--config", str(cfg), "--output", str(out), "--min_shards", "2")
    info = json.load(open(out / schema.DATASET_INFO))
    assert set(info["splits"]) == {"train", "test"}
    assert all(s["num_shards"] == 2 for s in info["splits"].values())
    assert info["label_names"] == ["cat"]


def test_verify_passes_then_names_a_corrupted_shard_and_record(converted, tmp_path):
    out, info, _, _ = converted
    proc = run_cli("verify", out)
    assert "OK" in proc.stdout and f"{info['num_written']} records" in proc.stdout
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = info["splits"]["train"]["shards"][0]["file"]
    data = bytearray((copy / shard).read_bytes())
    data[len(data) // 2] ^= 0xFF  # One flipped bit inside some record's payload.
    (copy / shard).write_bytes(bytes(data))
    proc = run_cli("verify", str(copy), check=False)
    assert proc.returncode == 1
    assert f"{shard}: record" in proc.stderr and "sha256 differs" in proc.stderr
    proc = run_cli("inspect", out)
    assert "written" in proc.stdout and str(info["num_written"]) in proc.stdout


def test_analysis_adds_statistics_and_leaves_shards_unchanged(converted, corpus, tmp_path):
    import numpy as np
    import tensorflow as tf

    out_plain, info_plain, _, _ = converted
    src = corpus[0]
    out = str(tmp_path / "analyzed")
    run_cli(
        "convert",
        "--input",
        f"{src}/*/*.jpg",
        "--output",
        out,
        "--splits",
        "train=0.7,validation=0.2,test=0.1",
        "--target_shard_mb",
        "0.05",
    )
    assert shard_digests(out) == shard_digests(out_plain)  # --no_analyze changes nothing else.
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    stats = info["statistics"]
    assert os.path.isdir(os.path.join(out, "transform_fn"))
    assert os.path.isdir(os.path.join(out, "transformed_metadata"))
    counts, pixels = {}, []
    for shard in info["splits"]["train"]["shards"]:
        for rec in read_records(os.path.join(out, shard["file"])):
            ex = tf.io.parse_single_example(rec, schema.feature_spec())
            text = ex[schema.LABEL_TEXT].numpy().decode()
            counts[text] = counts.get(text, 0) + 1
            img = tf.io.decode_image(ex[schema.ENCODED], channels=3, expand_animations=False)
            pixels.append(img.numpy().reshape(-1, 3).astype(np.float64))
    assert stats["label_counts"] == counts
    assert sum(counts.values()) == info["splits"]["train"]["num_examples"]
    allpix = np.concatenate(pixels)
    np.testing.assert_allclose(stats["pixel_mean"], allpix.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats["pixel_std"], allpix.std(axis=0), rtol=1e-6)
    # The exported transform, applied by the reader in a fresh process, standardises the split.
    script = (
        "import sys, numpy as np\n"
        "from pipeline.reader.dataset import make_dataset\n"
        "ds = make_dataset(sys.argv[1], 'train', 8, training=False, image_size=(96, 96),"
        " normalize=True)\n"
        "x = np.concatenate([b[0].numpy().reshape(-1, 3) for b in ds])\n"
        "assert 'apache_beam' not in sys.modules, 'normalize must not import Beam'\n"
        "print(' '.join(f'{v:.4f}' for v in [*x.mean(0), *x.std(0)]))\n"
    )
    proc = subprocess.run(
        tf_script(script, out),
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    values = [float(v) for v in proc.stdout.split()]
    # Centre crop and resize shift the pixel distribution a little from the full images'.
    np.testing.assert_allclose(values[:3], 0.0, atol=0.1)
    np.testing.assert_allclose(values[3:], 1.0, atol=0.1)


def test_stats_max_images_samples_pixel_statistics_only(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "o"
    run_cli(
        "convert",
        "--input",
        f"{src}/*/*.jpg",
        "--output",
        str(out),
        "--splits",
        "train=1.0",
        "--stats_max_images",
        "20",
    )
    stats = json.load(open(out / schema.DATASET_INFO))["statistics"]
    n_train = sum(stats["label_counts"].values())
    assert n_train > 50  # Label counts cover every training image ...
    assert 5 <= stats["num_stats_images"] <= 40  # ... pixel statistics about 20 of them.


def test_max_side_downscales_and_analysis_does_not_change_the_shards(corpus, tmp_path):
    """--max_side: images whose long side is over the limit are stored downscaled, with sides
    that match their pixels; `verify` passes. Inspection transcodes only the images that feed
    the pixel statistics (the writer makes every re-encode), so a run with analysis writes the
    same bytes as one without."""
    import tensorflow as tf

    src, _ = corpus
    outs = {}
    for name, extra in (("plain", ["--no_analyze"]), ("analyzed", [])):
        out = str(tmp_path / name)
        run_cli(
            "convert",
            "--input",
            f"{src}/*/*.jpg",
            "--output",
            out,
            "--max_side",
            "100",
            "--splits",
            "train=0.8,validation=0.2",
            *extra,
        )
        outs[name] = out
    assert shard_digests(outs["plain"]) == shard_digests(outs["analyzed"])
    assert "OK" in run_cli("verify", outs["plain"]).stdout
    spec = schema.feature_spec()
    downscaled = 0
    for shard in glob.glob(os.path.join(outs["plain"], "*", "*.tfrecord")):
        for record in read_records(shard):
            f = tf.io.parse_single_example(record, spec)
            image = tf.io.decode_image(f[schema.ENCODED], channels=3, expand_animations=False)
            h, w = int(f[schema.HEIGHT]), int(f[schema.WIDTH])
            assert tuple(image.shape[:2]) == (h, w)
            assert max(h, w) <= 100
            if f[schema.TRANSCODE_REASON].numpy() == b"max_side":
                assert max(h, w) == 100
                downscaled += 1
    assert downscaled > 20


def test_jpeg_verify_strict_rejects_silently_repaired_jpegs(corpus, tmp_path):
    """--jpeg_verify strict end to end: a photo missing 200 bytes of compressed data (TF decodes
    it with grey blocks, so the default writes it) lands in rejected.jsonl as corrupt."""
    from core.rejects import Rejected
    from tests.hostile import tf_decodes
    from transforms.images.check import check_image
    from transforms.images.limits import CheckOptions

    src, _ = corpus
    work = tmp_path / "in"
    shutil.copytree(os.path.join(src, "cat"), work / "cat")
    healthy = sorted(glob.glob(str(work / "cat" / "*.jpg")))
    data = open(healthy[0], "rb").read()
    start = data.rfind(b"\xff\xda") + 14
    strict = CheckOptions(jpeg_verify="strict")
    for at in range(start + 50, len(data) - 300, 37):
        damaged = data[:at] + data[at + 200 :]
        if not tf_decodes(damaged):
            continue
        try:
            check_image(damaged, strict)
        except Rejected:
            break
    else:
        pytest.fail("no excision that TF decodes and libjpeg warns about")
    (work / "cat" / "damaged.jpg").write_bytes(damaged)

    out = tmp_path / "o"
    run_cli(
        "convert", "--input", f"{work}/*/*.jpg", "--output", str(out), "--no_analyze",
        "--jpeg_verify", "strict", "--max_bad_fraction", "0.5",
    )  # fmt: skip
    info = json.load(open(out / schema.DATASET_INFO))
    rejects = [json.loads(line) for line in open(out / "rejected.jsonl")]
    damaged_rejects = [r for r in rejects if r["path"].endswith("damaged.jpg")]
    assert len(damaged_rejects) == 1, rejects
    assert damaged_rejects[0]["reason"] == "corrupt"
    assert "libjpeg warned while decoding" in damaged_rejects[0]["detail"]
    assert info["num_written"] + info["num_duplicates"] + len(rejects) == len(healthy) + 1
    assert info["num_listed"] == len(healthy) + 1


# From tests/unit/test_decoder_isolation.py and tests/unit/test_runner_choice.py: whole conversions.
def test_a_decoder_that_aborts_costs_one_file_not_the_job(tmp_path, monkeypatch):
    """`imgrec convert --transcode png` (in process): one TIFF makes its decoder process call os.abort() (the
    test-only hook); the job finishes, that file is a decoder_error, every other file is kept,
    and `imgrec verify` passes."""
    src = tmp_path / "in"
    for label in ("a", "b"):
        (src / label).mkdir(parents=True)
        for i in range(6):
            data = _encode(_photo(100 + i + 10 * ord(label)), "JPEG")
            (src / label / f"{i}.jpg").write_bytes(data)
        (src / label / "page.tiff").write_bytes(_encode(_photo(7 + ord(label)), "TIFF"))
    marked = src / "a" / "crash.tiff"
    marked.write_bytes(_encode(_photo(9), "TIFF") + b"IMGREC-ABORT-MARKER")
    out = tmp_path / "out"
    # Sent by the parent with each call into its decoder process.
    monkeypatch.setattr(decoder_pool, "test_abort_marker", "IMGREC-ABORT-MARKER")
    run_cli(
        "convert", "--input", f"{src}/*/*", "--output", str(out), "--transcode", "png",
        "--no_analyze", "--max_bad_fraction", "0.2",
    )  # fmt: skip
    info = json.loads((out / schema.DATASET_INFO).read_text())
    assert info["num_listed"] == 15
    assert (info["num_written"], info["num_rejected"], info["num_duplicates"]) == (14, 1, 0)
    rejected = [json.loads(line) for line in (out / schema.REJECTED).read_text().splitlines()]
    assert [(r["path"], r["reason"]) for r in rejected] == [(str(marked), "decoder_error")]
    assert "decoder process died (signal 6)" in rejected[0]["detail"]
    assert info["rejected_by_reason"] == {"decoder_error": 1}
    formats = []
    for shard in glob.glob(str(out / "*" / "*.tfrecord")):
        for rec in read_records(shard):
            import tensorflow as tf

            ex = tf.io.parse_single_example(rec, schema.feature_spec())
            formats.append(ex[schema.TRANSCODED_FROM].numpy().decode())
    assert sorted(formats).count("tiff") == 2
    assert "OK" in run_cli("verify", str(out)).stdout


def test_a_default_conversion_reaches_for_no_network(tmp_path, monkeypatch):
    """Beam 2.77's DirectRunner downloads a Prism binary from github.com first: behind a proxy
    that never answers the job hung at "listed 0", and online it ran on Prism. A default
    conversion through a proxy that notes every caller: done, and nobody called out."""
    src = str(tmp_path / "corpus")
    build_corpus(src, num_images=6, seed=5, long_side=(32, 48), broken=False)
    with ProxyTrap() as trap:
        for name, value in trap.env.items():
            monkeypatch.setenv(name, value)
        proc = run_cli("convert", "--input", f"{src}/*/*.jpg", "--output", str(tmp_path / "o"))
    assert "imgrec: converted" in proc.stdout
    assert trap.calls == []


def test_ctrl_c_during_inspection_exits_130_with_the_resume_hint(corpus, tmp_path, monkeypatch):
    """Ctrl-C lands in a DoFn (inspection runs for most of a run); Beam re-raises it as a
    RuntimeError('KeyboardInterrupt [while running ...]'). The command still says interrupted,
    names --resume and exits 130, as --help promises, not 'failed' with status 1."""
    from transforms import inspect_images

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect_images, "inspect_bytes", interrupt)
    src, _ = corpus
    out = str(tmp_path / "ds")
    proc = run_cli("convert", "--input", f"{src}/*/*.jpg", "--output", out, "--no_analyze",
                   check=False)  # fmt: skip
    assert proc.returncode == 130, proc.stderr
    assert "imgrec: interrupted; rerun with --resume" in proc.stderr
    assert "failed" not in proc.stderr
