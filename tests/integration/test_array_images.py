"""16-bit PNGs and DICOM through whole conversions: defaults (8-bit), --bit_depth 16 (the PNG's
own bytes), --max_side and --store pixels; read back with TensorFlow's decoders, imgrec's reader
and `verify`."""

from __future__ import annotations

import hashlib
import json
import os

import imagecodecs
import numpy as np
import pytest
from PIL import Image

from core import schema
from pipeline.reader import dataset as reader
from pipeline.verify import verify_dataset
from tests.dicom_files import make_ct
from tests.runs import in_process, read_records

tf = pytest.importorskip("tensorflow")

HEIGHT, WIDTH = 24, 40
ONE_SPLIT = ("--splits", "train=1.0", "--no_analyze", "--no_report")


def _to_8bit(samples: np.ndarray) -> np.ndarray:
    """docs/options.md's rule for 16-bit PNGs: round(v * 255 / 65535)."""
    return ((samples.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, dict[str, np.ndarray]]:
    """(folder, {name of each 16-bit PNG: its samples}): gray, gray + alpha, RGB, RGBA 16-bit
    PNGs written by libpng, two CTs and an 8-bit photo, all HEIGHT x WIDTH."""
    root = str(tmp_path_factory.mktemp("arrays"))
    for folder in ("png16", "ct", "photo"):
        os.makedirs(os.path.join(root, folder))
    rng = np.random.default_rng(7)
    samples = {}
    for channels in (1, 2, 3, 4):
        pixels = rng.integers(0, 65536, (HEIGHT, WIDTH, channels), dtype=np.uint16)
        name = f"c{channels}.png"
        data = imagecodecs.png_encode(pixels if channels > 1 else pixels[:, :, 0])
        with open(os.path.join(root, "png16", name), "wb") as f:
            f.write(data)
        samples[name] = pixels
    for k in range(2):
        make_ct(os.path.join(root, "ct", f"ct{k}.dcm"), rows=HEIGHT, columns=WIDTH, seed=k)
    photo = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    Image.fromarray(photo).save(os.path.join(root, "photo", "p.jpg"))
    return root, samples


def _convert(src: str, out: str, *flags: str) -> dict:
    in_process("convert", "--input", f"{src}/**", "--output", out, *flags)
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        return json.load(f)


def _records(out: str, info: dict) -> dict[str, dict]:
    """{file name: parsed record} of every record."""
    found = {}
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for rec in read_records(os.path.join(out, shard["file"])):
                ex = tf.io.parse_single_example(rec, schema.feature_spec())
                ex = {k: v.numpy() for k, v in ex.items()}
                found[os.path.basename(ex[schema.FILENAME].decode())] = ex
    return found


def _reader_images(out: str, info: dict, size: tuple[int, int]) -> dict[str, np.ndarray]:
    """{file name: the reader's evaluation image}: the whole image (crop_fraction 1.0 at its
    own size: no resize)."""
    images = {}
    for split in info["splits"]:
        ds = reader.make_dataset(
            out, split, 1, image_size=size, crop_fraction=1.0, extra_features=[schema.FILENAME]
        )
        for batch, _, extras in ds:
            name = os.path.basename(extras[schema.FILENAME].numpy()[0].decode())
            images[name] = batch.numpy()[0]
    return images


def test_defaults_store_16bit_pngs_8bit_and_every_reader_agrees(corpus, tmp_path):
    src, samples = corpus
    out = str(tmp_path / "out")
    info = _convert(src, out)
    assert (info["num_written"], info["num_rejected"]) == (7, 0), info
    records = _records(out, info)
    for name, pixels in samples.items():
        ex = records[name]
        assert ex[schema.TRANSCODE_REASON] == b"decoded_pixels", name
        assert ex[schema.TRANSCODED_FROM] == b"png16" and ex[schema.DTYPE] == b"uint8"
        stored = tf.io.decode_png(ex[schema.ENCODED], channels=0).numpy()
        assert np.array_equal(stored, _to_8bit(pixels)), name
    shown = _reader_images(out, info, (HEIGHT, WIDTH))
    assert sorted(shown) == sorted(records)
    for name, ex in records.items():
        want = tf.io.decode_image(ex[schema.ENCODED], channels=3, expand_animations=False)
        assert np.array_equal(shown[name], want.numpy()), name
    assert verify_dataset(out).ok


def test_bit_depth_16_keeps_the_pngs_own_bytes(corpus, tmp_path):
    src, samples = corpus
    out = str(tmp_path / "out")
    info = _convert(src, out, "--bit_depth", "16", *ONE_SPLIT)
    records = _records(out, info)
    for name, pixels in samples.items():
        ex = records[name]
        with open(os.path.join(src, "png16", name), "rb") as f:
            source = f.read()
        assert ex[schema.ENCODED] == source and ex[schema.TRANSCODE_REASON] == b"", name
        assert ex[schema.SHA256].decode() == hashlib.sha256(source).hexdigest()
        decoded = tf.io.decode_png(ex[schema.ENCODED], dtype=tf.uint16).numpy()
        assert np.array_equal(decoded, pixels), name
    ct = records["ct0.dcm"]
    assert ct[schema.DTYPE] == b"uint16"
    assert tf.io.decode_png(ct[schema.ENCODED], dtype=tf.uint16).dtype == tf.uint16
    assert verify_dataset(out).ok


def test_max_side_and_store_pixels_apply_to_dicom_and_16bit_png(corpus, tmp_path):
    src, _ = corpus
    encoded, pixels = str(tmp_path / "encoded"), str(tmp_path / "pixels")
    info = _convert(src, encoded, "--max_side", "20", *ONE_SPLIT)
    raw_info = _convert(src, pixels, "--max_side", "20", "--store", "pixels", *ONE_SPLIT)
    assert raw_info["num_written"] == info["num_written"] == 7
    small = (HEIGHT // 2, WIDTH // 2)
    for name, ex in _records(encoded, info).items():
        assert (ex[schema.HEIGHT], ex[schema.WIDTH]) == small, name
        assert ex[schema.TRANSCODE_REASON].decode().endswith("max_side"), name
    raw = _records(pixels, raw_info)
    for name, ex in raw.items():
        assert (ex[schema.FORMAT], ex[schema.CHANNELS]) == (b"raw", 3), name
        assert ex[schema.TRANSCODE_REASON].decode().endswith("max_side,store_pixels"), name
    # The pixels records are the PNG records as the reader shows them (the photo's differ: its
    # encoded record went through a JPEG re-encode).
    from_raw = _reader_images(pixels, raw_info, small)
    from_png = _reader_images(encoded, info, small)
    assert from_raw.keys() == from_png.keys() == raw.keys()
    for name in set(raw) - {"p.jpg"}:
        assert np.array_equal(from_raw[name], from_png[name]), name
    assert verify_dataset(pixels).ok
