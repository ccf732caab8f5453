"""--store encoded|pixels|smart and --compression gzip: converter, reader and verify, end to end."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import schema
from pipeline.demo import build_corpus
from pipeline.options import ConvertConfig, OptionError
from pipeline.reader import crops as reader_crops
from pipeline.reader import dataset as reader
from pipeline.reader import decode as reader_decode
from pipeline.verify import verify_dataset
from tests.runs import ROOT as ROOT_PATH
from tests.runs import in_process, tf_script
from transforms.images import store_modes

ROOT = str(ROOT_PATH)
MAX_SIDE = 64
OUT_SIZE = (48, 48)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`imgrec ARGS` in this process (tests/runs.py), asserting exit 0."""
    return in_process(*args)


def records(data_dir: str) -> dict[str, dict]:
    """Every record of every shard, parsed: {source path: {feature: numpy value}}."""
    with open(os.path.join(data_dir, schema.DATASET_INFO)) as f:
        info = json.load(f)
    out = {}
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            compression = "GZIP" if shard["file"].endswith(".gz") else ""
            ds = tf.data.TFRecordDataset(os.path.join(data_dir, shard["file"]), compression)
            for record in ds:
                ex = tf.io.parse_single_example(record, schema.feature_spec())
                ex = {k: v.numpy() for k, v in ex.items()}
                ex["shard"] = shard["file"]
                out[ex[schema.FILENAME].decode()] = ex
    return out


def eval_images(
    data_dir: str, split: str, image_size: tuple[int, int] = OUT_SIZE, **kwargs
) -> dict[str, np.ndarray]:
    """The reader's evaluation output, keyed by source path."""
    ds = reader.make_dataset(
        data_dir, split, 8, image_size=image_size, extra_features=[schema.FILENAME], **kwargs
    )
    out = {}
    for images, _, extras in ds:
        for image, name in zip(images.numpy(), extras[schema.FILENAME].numpy(), strict=True):
            out[name.decode()] = image
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    d = str(tmp_path_factory.mktemp("photos"))
    build_corpus(d, num_images=40, seed=3, long_side=(96, 160), broken=False)
    return d


def convert(corpus: str, out: str, *flags: str) -> str:
    run_cli("convert", "--input", f"{corpus}/*/*.jpg", "--output", out, "--no_analyze", *flags)
    return out


@pytest.fixture(scope="module")
def pixels(corpus, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("pixels") / "ds")
    return convert(corpus, out, "--store", "pixels", "--max_side", str(MAX_SIDE))


@pytest.fixture(scope="module")
def encoded(corpus, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("encoded") / "ds")
    return convert(corpus, out, "--max_side", str(MAX_SIDE))


@pytest.fixture(scope="module")
def pixels_gzip(corpus, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("gzip") / "ds")
    flags = ("--store", "pixels", "--max_side", str(MAX_SIDE), "--compression", "gzip")
    return convert(corpus, out, *flags)


def test_store_pixels_needs_max_side():
    with pytest.raises(OptionError, match=r"--store pixels needs --max_side"):
        ConvertConfig(inputs=("x/*.jpg",), manifest=None, output="out", store="pixels")
    with pytest.raises(OptionError, match=r"--store must be one of encoded, pixels, smart"):
        ConvertConfig(inputs=("x/*.jpg",), manifest=None, output="out", store="raw")


def test_raw_record_pixels_equal_the_converters_resized_decode(pixels):
    recs = records(pixels)
    assert len(recs) == 40
    path, ex = sorted(recs.items())[0]
    assert ex[schema.FORMAT] == b"raw"
    h, w, c = int(ex[schema.HEIGHT]), int(ex[schema.WIDTH]), int(ex[schema.CHANNELS])
    assert c == 3 and max(h, w) == MAX_SIDE
    stored = np.frombuffer(ex[schema.ENCODED], np.uint8).reshape(h, w, c)
    # What the converter's --max_side does to a JPEG, spelled out: libjpeg's DCT scaling while
    # the long side stays >= max_side (accurate IDCT), then Pillow's Lanczos to max_side.
    data = open(path, "rb").read()
    sh, sw = (int(v) for v in tf.io.extract_jpeg_shape(data)[:2])
    ratio = max(r for r in (1, 2, 4, 8) if -(-max(sh, sw) // r) >= MAX_SIDE)
    decoded = tf.io.decode_jpeg(data, channels=3, ratio=ratio, dct_method="INTEGER_ACCURATE")
    expected = np.asarray(
        Image.fromarray(decoded.numpy()).resize((w, h), Image.Resampling.LANCZOS), np.uint8
    )
    assert np.array_equal(stored, expected)
    assert ex[schema.SHA256].decode() == hashlib.sha256(ex[schema.ENCODED]).hexdigest()
    assert ex[schema.TRANSCODE_REASON] == b"max_side,store_pixels"
    assert ex[schema.TRANSCODED_FROM] == b"jpeg"


def test_reader_outputs_for_raw_and_encoded_shards_agree(pixels, encoded):
    with open(os.path.join(pixels, schema.DATASET_INFO)) as f:
        assert json.load(f)["store"] == "pixels"
    for split in ("train", "validation"):
        raw, enc = eval_images(pixels, split), eval_images(encoded, split)
        assert sorted(raw) == sorted(enc) and raw
        # Tolerance: the encoded shards hold the same resized pixels re-encoded as JPEG q95
        # (4:2:0 chroma at 64 px); that loss alone measured 30.1 dB at worst, median 36 dB, mean
        # |diff| 3.1 levels (1.6 in luma). One pixel of misalignment measured a 22 dB median.
        values = {name: psnr(raw[name], enc[name]) for name in raw}
        for name in raw:
            assert values[name] > 28.0, name
        assert np.median(list(values.values())) > 33.0
        diffs = [np.abs(raw[n].astype(int) - enc[n].astype(int)).mean() for n in raw]
        assert np.mean(diffs) < 4.0


def test_gzip_round_trip(pixels, pixels_gzip):
    shards = sorted(glob.glob(os.path.join(pixels_gzip, "*", "*")))
    assert shards and all(s.endswith(".tfrecord.gz") for s in shards)
    assert all(open(s, "rb").read(2) == b"\x1f\x8b" for s in shards)
    with open(os.path.join(pixels_gzip, schema.DATASET_INFO)) as f:
        info = json.load(f)
    assert info["compression"] == "gzip"
    assert all(s["file"].endswith(".tfrecord.gz") for s in info["splits"]["train"]["shards"])
    report = verify_dataset(pixels_gzip)
    assert report.ok, report.problems
    assert report.records == 40
    plain, zipped = records(pixels), records(pixels_gzip)
    assert sorted(plain) == sorted(zipped)
    for name in plain:
        assert plain[name][schema.ENCODED] == zipped[name][schema.ENCODED]
    a, b = eval_images(pixels, "train"), eval_images(pixels_gzip, "train")
    assert sorted(a) == sorted(b) and all(np.array_equal(a[n], b[n]) for n in a)
    with open(os.path.join(pixels, schema.DATASET_INFO)) as f:
        plain_bytes = json.load(f)["splits"]["train"]["num_bytes"]
    assert info["splits"]["train"]["num_bytes"] < plain_bytes


def test_verify_checks_raw_record_sizes(pixels, tmp_path):
    assert verify_dataset(pixels).ok
    # One raw record whose bytes do not match its stated shape.
    from pipeline.verify import _raw_problem

    ex = {
        schema.HEIGHT: tf.constant(4, tf.int64),
        schema.WIDTH: tf.constant(5, tf.int64),
        schema.CHANNELS: tf.constant(3, tf.int64),
        schema.DTYPE: tf.constant(b""),  # --store pixels records: uint8
    }
    assert _raw_problem(ex, 60) is None
    assert "59 bytes, height*width*channels*itemsize = 4*5*3*1 = 60" in _raw_problem(ex, 59)


@pytest.fixture(scope="module")
def smart(tmp_path_factory) -> tuple[str, str]:
    """Thumbnails (raw under smart) and photos (JPEG under smart), one shard per split."""
    src = str(tmp_path_factory.mktemp("mixed"))
    for name, n, seed, sides in (("small", 20, 4, (60, 120)), ("large", 10, 5, (300, 400))):
        folder = os.path.join(src, name)
        build_corpus(folder, num_images=n, seed=seed, long_side=sides, broken=False)
    out = str(tmp_path_factory.mktemp("smart") / "ds")
    run_cli("convert", "--input", f"{src}/*/*/*.jpg", "--output", out, "--no_analyze",
            "--store", "smart", "--splits", "train=1.0")  # fmt: skip
    return src, out


def test_smart_mode_mixes_raw_and_jpeg_in_one_shard(smart):
    _, out = smart
    recs = records(out)
    assert len(recs) == 30
    assert len({ex["shard"] for ex in recs.values()}) == 1
    for path, ex in recs.items():
        h, w = int(ex[schema.HEIGHT]), int(ex[schema.WIDTH])
        want_raw = h * w <= store_modes.SMART_MAX_RAW_PIXELS
        assert want_raw == ("/small/" in path), (path, h, w)
        if want_raw:
            assert ex[schema.FORMAT] == b"raw"
            # Stored as is otherwise: the raw pixels are TensorFlow's decode of the file.
            decoded = tf.io.decode_jpeg(open(path, "rb").read(), channels=3).numpy()
            assert np.frombuffer(ex[schema.ENCODED], np.uint8).tobytes() == decoded.tobytes()
        else:
            assert ex[schema.FORMAT] == b"jpeg"
            assert ex[schema.ENCODED] == open(path, "rb").read()
    assert verify_dataset(out).ok
    # Full-scale decodes, to compare with the source's decode (DCT scaling is tested below).
    images = eval_images(out, "train", jpeg_dct_scaling=False)
    assert sorted(images) == sorted(recs)
    for path, image in images.items():
        # The reader's own crop+resize of the source decode: raw records match it.
        decoded = tf.io.decode_jpeg(open(path, "rb").read(), channels=3)
        config = reader._Config(**{**_EVAL_CONFIG, "image_size": OUT_SIZE})
        window = reader_crops.crop_window(config, tf.shape(decoded)[0], tf.shape(decoded)[1], None)
        top, left, h, w = (int(v) for v in window)
        crop = tf.cast(decoded[top : top + h, left : left + w], tf.float32)
        want = tf.cast(tf.image.resize(crop, OUT_SIZE) + 0.5, tf.uint8).numpy()
        # Raw: bit-exact. JPEG: the reader decodes only the window (libjpeg's fused crop
        # decode), which can differ by a level or two at the window's edges.
        bound = 0 if "/small/" in path else 3
        assert np.abs(image.astype(int) - want.astype(int)).max() <= bound, path


_EVAL_CONFIG = dict(
    shards=(),
    num_examples=0,
    num_bytes=0,
    global_batch_size=1,
    training=False,
    image_size=OUT_SIZE,
    seed=None,
    repeat=False,
    deterministic=True,
    cache=False,
    shuffle_records=1,
    crop_fraction=0.875,
    dct_scaling=False,
    extra_features=(),
    postprocess=None,
)


def test_training_on_raw_shards_with_postprocess_and_augmentation(pixels):
    ds = reader.make_dataset(pixels, "train", 4, training=True, image_size=OUT_SIZE, seed=1)
    images, labels = next(iter(ds))
    assert images.shape == (4, *OUT_SIZE, 3) and images.dtype == tf.uint8
    ds = reader.make_dataset(
        pixels, "train", 4, training=True, image_size=OUT_SIZE, seed=1,
        postprocess=lambda image, label: (tf.cast(image, tf.float32), label),
    )  # fmt: skip
    images, _ = next(iter(ds))
    assert images.dtype == tf.float32 and images.shape == (4, *OUT_SIZE, 3)


def test_dct_scaled_decode_psnr_against_the_full_decode(tmp_path):
    """The reader's DCT-scaled crop decode vs full decode + crop, same resize: PSNR bound."""
    from pipeline.demo import PHOTOS, photo_dir

    values = []
    for name in PHOTOS.values():
        photo = Image.open(os.path.join(photo_dir(), name)).convert("RGB")
        photo = photo.resize((photo.width * 2, photo.height * 2), Image.Resampling.BICUBIC)
        path = tmp_path / "big.jpg"
        photo.save(path, quality=90)
        data = tf.constant(path.read_bytes())
        config = reader._Config(**{**_EVAL_CONFIG, "image_size": (224, 224)})
        window = reader_crops.crop_window(config, photo.height, photo.width, None)
        top, left, h, w = (int(v) for v in window)
        assert min(h, w) >= 2 * 224  # DCT scaling applies: at least 2x the output
        scaled = reader_crops.decode_and_crop_scaled(data, window, (224, 224))
        assert scaled.shape[0] < h  # decoded at a reduced scale
        full = tf.io.decode_jpeg(data, channels=3)[top : top + h, left : left + w]

        def resize(image):
            image = tf.image.resize(tf.cast(image, tf.float32), (224, 224))
            return tf.cast(image + 0.5, tf.uint8).numpy()

        smooth = tf.image.resize(tf.cast(full, tf.float32), (224, 224), antialias=True)
        smooth = tf.cast(smooth + 0.5, tf.uint8).numpy()
        values.append((psnr(resize(scaled), resize(full)), psnr(resize(scaled), smooth)))
    # Measured (dB, vs the reader's full-decode path / vs an antialiased resize of the full
    # decode): astronaut 39.9/38.0, cat 30.4/31.5, coffee 41.8/40.9, rocket 33.5/34.8,
    # motorcycle 25.4/26.7. The full-decode path's bilinear resize does not antialias, so on
    # fine detail (the motorcycle's spokes) it aliases where libjpeg's DCT downscale averages:
    # most of the difference is the full path's, not the scaled one's. Bounds: 24 dB each, 33 dB
    # median.
    assert min(v for pair in values for v in pair) > 24.0, values
    assert float(np.median([v for v, _ in values])) > 33.0, values


_MIRRORED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    from pipeline.reader import dataset as reader
    from core import schema

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {}
    for training in (False, True):
        ds = reader.make_dataset(sys.argv[1], "train", 4, strategy=strategy, training=training,
                                 repeat=False, image_size=(48, 48), seed=0,
                                 extra_features=[schema.FILENAME])
        names, shapes = [], set()
        for images, _, extras in ds:
            for part in strategy.experimental_local_results(images):
                shapes.add(tuple(part.shape))
            for part in strategy.experimental_local_results(extras[schema.FILENAME]):
                names += [n.decode() for n in part.numpy()]
        out[str(training)] = {"names": names, "shapes": sorted(shapes)}
    print("RESULT " + json.dumps(out))
    """
)


@pytest.mark.e2e  # a fresh TensorFlow process (MirroredStrategy or TF's own filesystem)
def test_mirrored_strategy_on_raw_shards_sees_every_example_once(pixels):
    with open(os.path.join(pixels, schema.DATASET_INFO)) as f:
        n = json.load(f)["splits"]["train"]["num_examples"]
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        tf_script(_MIRRORED_SCRIPT, pixels),
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    every = sorted(records(pixels))
    train_names = sorted(p for p in every if records(pixels)[p]["shard"].startswith("train/"))
    assert len(train_names) == n
    # Evaluation keeps the partial batch: every example exactly once.
    assert sorted(result["False"]["names"]) == train_names
    # Training drops the last partial global batch only: no example twice, all but < 4 seen.
    seen = result["True"]["names"]
    assert len(seen) == len(set(seen)) == n - n % 4
    assert set(seen) <= set(train_names)
    assert result["True"]["shapes"] == [[2, 48, 48, 3]]


@pytest.mark.parametrize("store", ["pixels", "encoded", "smart"])
@pytest.mark.parametrize("size", [OUT_SIZE, (64, 40)], ids=["square", "tall"])
def test_eager_evaluation_images_equal_the_readers_evaluation_output(store, size, request):
    """reader.evaluation_images (the report's eager, one-by-one decode) yields the pixels
    make_dataset(training=False) does, for raw, encoded and mixed (DCT-scaled) shards, square and
    tall outputs (crops that need a resize; the exact-size branch is the test below)."""
    data = request.getfixturevalue(store)
    out = data[1] if store == "smart" else data
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    split = "train"
    want, got = eval_images(out, split, size), {}
    recs = [bytes(r.numpy()) for s in info["splits"][split]["shards"]
            for r in tf.data.TFRecordDataset(os.path.join(out, s["file"]))]  # fmt: skip
    images = reader.evaluation_images(recs, info, size).numpy()
    for record, image in zip(recs, images, strict=True):
        name = tf.train.Example.FromString(record).features.feature[schema.FILENAME]
        got[name.bytes_list.value[0].decode()] = image
    assert sorted(got) == sorted(want) and len(got) > 0
    for name, image in want.items():
        assert np.array_equal(got[name], image), name


@pytest.mark.parametrize("store", ["pixels", "encoded"])
def test_eager_evaluation_images_skip_the_resize_of_an_exact_crop_with_the_same_pixels(
    store, request, monkeypatch
):
    """The eager decode's other branch: a record whose centre crop already has the output's
    size is decoded without a resize, and still equals make_dataset's output for it."""
    out = request.getfixturevalue(store)
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    recs = {name: ex for name, ex in records(out).items() if ex["shard"].startswith("train/")}
    # The largest shorter side: no DCT scaling for either reader (it needs 2x the output).
    name = max(recs, key=lambda n: min(recs[n][schema.HEIGHT], recs[n][schema.WIDTH]))
    ex = recs[name]
    side = round(
        min(int(ex[schema.HEIGHT]), int(ex[schema.WIDTH])) * reader_crops.DEFAULT_CROP_FRACTION
    )
    shard = os.path.join(out, ex["shard"])
    compression = "GZIP" if shard.endswith(".gz") else ""
    (record,) = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(shard, compression)
                 if tf.train.Example.FromString(r.numpy()).features.feature[
                     schema.FILENAME].bytes_list.value[0].decode() == name]  # fmt: skip
    resizes = []
    decode = reader_decode.decode_image

    def spy(*args, **kwargs):
        resizes.append(kwargs.get("resize", True))
        return decode(*args, **kwargs)

    monkeypatch.setattr(reader_decode, "decode_image", spy)
    got = reader.evaluation_images([record], info, (side, side)).numpy()[0]
    monkeypatch.undo()
    assert resizes == [False]
    assert np.array_equal(got, eval_images(out, "train", (side, side))[name])
