"""TIFF end to end through the real command line and back through imgrec's reader: a 13-band 16-bit
tiled GeoTIFF with DEFAULT options keeps every band, its values and its georeferencing
(`channels=None, dtype=tf.uint16` returns them exactly); a 16-bit gray TIFF written by Pillow and
by tifffile round-trips exactly with --bit_depth 16 (converted in process); crops, flips and resizing in training work on
13 bands and every dtype."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tifffile
from PIL import Image

from core import schema
from tests.runs import cli, in_process, read_records

pytestmark = pytest.mark.e2e

tf = pytest.importorskip("tensorflow")

HEIGHT, WIDTH, BANDS = 40, 56, 13
# UTM zone 33N, one tie point and the pixel scale, as GDAL writes a GeoTIFF.
_GEOKEYS = [1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633]
_GEOTAGS = [
    (33550, "d", 3, (10.0, 10.0, 0.0), True),  # ModelPixelScale
    (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4649780.0, 0.0), True),  # ModelTiepoint
    (34735, "H", len(_GEOKEYS), _GEOKEYS, True),  # GeoKeyDirectory
]


def _read_all(out: str, split: str, **kwargs) -> dict[str, np.ndarray]:
    """{file name: image} of a split through make_dataset's evaluation path at the images' own
    size (crop_fraction 1.0: a no-op crop)."""
    from pipeline.reader import make_dataset

    ds = make_dataset(
        out, split, 1, image_size=(HEIGHT, WIDTH), crop_fraction=1.0,
        extra_features=[schema.FILENAME], **kwargs,
    )  # fmt: skip
    return {
        os.path.basename(extra[schema.FILENAME][0].numpy().decode()): images[0].numpy()
        for images, _, extra in ds
    }


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> tuple[str, str, dict[str, np.ndarray]]:
    """(source folder, output converted with default options, {name: H x W x 13 samples})."""
    root = tmp_path_factory.mktemp("tiff")
    src, out = root / "src", str(root / "out")
    cubes = {}
    rng = np.random.default_rng(59)
    for label in ("forest", "water"):
        os.makedirs(src / label)
        for k in range(3):
            cube = rng.integers(0, 65536, (BANDS, HEIGHT, WIDTH), dtype=np.uint16)
            name = f"{label}{k}.tif"
            tifffile.imwrite(
                src / label / name, cube, photometric="minisblack", planarconfig="separate",
                tile=(16, 16), compression="deflate", extratags=_GEOTAGS,
            )  # fmt: skip
            cubes[name] = np.moveaxis(cube, 0, -1)
    cli("convert", "--input", f"{src}/**", "--output", out)
    return str(src), out, cubes


def test_a_13_band_geotiff_keeps_every_band_and_value_with_defaults(scenes):
    _, out, cubes = scenes
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    assert info["num_written"] == len(cubes) and info["num_rejected"] == 0
    seen = {}
    for split, entry in info["splits"].items():
        assert entry["pixel_layouts"] == {f"uint16x{BANDS}": entry["num_examples"]}
        seen.update(_read_all(out, split, channels=None, dtype=tf.uint16))
    assert sorted(seen) == sorted(cubes)
    for name, image in seen.items():
        assert image.dtype == np.uint16 and image.shape == (HEIGHT, WIDTH, BANDS)
        np.testing.assert_array_equal(image, cubes[name], err_msg=name)


def test_the_georeferencing_is_in_every_record(scenes):
    _, out, cubes = scenes
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    epsg, transform = schema.GEO_KEYS["epsg"][0], schema.GEO_KEYS["transform"][0]
    spec = {
        epsg: tf.io.FixedLenFeature([], tf.int64),
        transform: tf.io.FixedLenFeature([], tf.string),
    }
    records = [
        tf.io.parse_single_example(rec, spec)
        for entry in info["splits"].values()
        for shard in entry["shards"]
        for rec in read_records(os.path.join(out, shard["file"]))
    ]
    assert len(records) == len(cubes)
    for record in records:
        assert int(record[epsg]) == 32633
        # GDAL's geotransform: origin, 10 m pixels, north up.
        geotransform = json.loads(record[transform].numpy().decode())
        assert geotransform == [500000.0, 10.0, 0.0, 4649780.0, 0.0, -10.0]


def test_defaults_return_the_first_three_bands_and_bands_picks_others(scenes):
    _, out, cubes = scenes
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    for split in info["splits"]:
        for name, image in _read_all(out, split).items():  # uint8, 3 channels
            # uint16 -> uint8 as tf.image.convert_image_dtype converts: the high byte.
            np.testing.assert_array_equal(image, (cubes[name][..., :3] >> 8).astype(np.uint8))
        picked = _read_all(out, split, bands=[3, 2, 1], dtype=tf.float32)
        for name, image in picked.items():
            np.testing.assert_array_equal(image, cubes[name][..., [3, 2, 1]].astype(np.float32))


@pytest.mark.parametrize("dtype", [tf.uint8, tf.uint16, tf.float32])
def test_training_crops_flips_and_resizes_every_band(scenes, dtype):
    from pipeline.reader import make_dataset

    _, out, cubes = scenes
    ds = make_dataset(
        out, "train", 2, training=True, seed=1, image_size=(24, 24), channels=None, dtype=dtype
    )
    images, labels = next(iter(ds))
    assert images.shape == (2, 24, 24, BANDS) and images.dtype == dtype
    assert labels.shape == (2,)
    # Bilinear resizing of random 16-bit samples stays inside their range and is not constant.
    values = images.numpy().astype(np.float64)
    top = {tf.uint8: 255, tf.uint16: 65535, tf.float32: 65535}[dtype]
    assert values.min() >= 0 and values.max() <= top and values.std() > 0


@pytest.mark.parametrize("writer", ["pillow", "tifffile"])
def test_a_16_bit_gray_tiff_round_trips_with_bit_depth_16(tmp_path, writer):
    src, out = tmp_path / "src" / "cells", str(tmp_path / "out")
    os.makedirs(src)
    samples = np.random.default_rng(16).integers(0, 65536, (HEIGHT, WIDTH), dtype=np.uint16)
    samples[0, 0], samples[-1, -1] = 0, 65535  # the full range: nothing may be clipped
    path = src / "gray.tif"
    if writer == "pillow":
        Image.fromarray(samples).save(path)  # mode I;16
    else:
        tifffile.imwrite(path, samples, compression="lzw")
    # In process: the bytes stored are the subject (the command line ran above, with defaults).
    in_process("convert", "--input", f"{src}/*", "--output", out, "--bit_depth", "16",
               "--splits", "train=1.0")  # fmt: skip
    image = _read_all(out, "train", channels=None, dtype=tf.uint16)["gray.tif"]
    assert image.shape == (HEIGHT, WIDTH, 1)
    np.testing.assert_array_equal(image[..., 0], samples)
