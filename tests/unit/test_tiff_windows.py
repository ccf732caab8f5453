"""TIFF chips read by window (tiff.decode_window) against GDAL's reads of the same windows
(rasterio): samples, dtype, transform and nodata, on files GDAL itself wrote."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
import tifffile

from core.rejects import Rejected
from core.tile_grid import chip_windows
from transforms.images import tiff
from transforms.images.array_contract import ArrayRequest
from transforms.images.tiff_window import segment_indices

rasterio = pytest.importorskip("rasterio")
from rasterio.transform import Affine  # noqa: E402
from rasterio.windows import Window  # noqa: E402

pytestmark = pytest.mark.unit

_RNG = np.random.default_rng(69)
_FULL = ArrayRequest(bit_depth=16)


def _gdal_file(path, bands: np.ndarray, transform: Affine, **profile) -> str:
    """`bands` [C, H, W] written by GDAL (rasterio) to `path` with `profile`'s creation options."""
    count, height, width = bands.shape
    with rasterio.open(
        path, "w", driver="GTiff", height=height, width=width, count=count,
        dtype=bands.dtype, crs="EPSG:32633", transform=transform, **profile,
    ) as dst:  # fmt: skip
        dst.write(bands)
    return str(path)


_NORTH_UP = Affine(10.0, 0.0, 500000.0, 0.0, -10.0, 4650000.0)
# Rotated and sheared: GDAL writes it as a ModelTransformationTag.
_ROTATED = Affine(8.0, 3.0, 400000.0, -2.0, -9.0, 5000000.0)

_LAYOUTS = {
    "tiled uint16 x4, deflate, band-interleaved": (
        lambda: _RNG.integers(0, 65536, (4, 150, 170), dtype=np.uint16),
        _NORTH_UP,
        {"tiled": True, "blockxsize": 32, "blockysize": 48, "compress": "deflate",
         "interleave": "band", "nodata": 0},
    ),
    "striped uint16 x4, lzw, pixel-interleaved": (
        lambda: _RNG.integers(0, 65536, (4, 97, 131), dtype=np.uint16),
        _NORTH_UP,
        {"blockysize": 7, "compress": "lzw", "interleave": "pixel"},
    ),
    "striped float32 x1, nan nodata": (
        lambda: _RNG.normal(size=(1, 90, 110)).astype(np.float32),
        _NORTH_UP,
        {"blockysize": 16, "nodata": float("nan")},
    ),
    "tiled float64 x3, rotated (ModelTransformationTag)": (
        lambda: _RNG.normal(size=(3, 80, 96)),
        _ROTATED,
        {"tiled": True, "blockxsize": 16, "blockysize": 16, "compress": "zstd",
         "predictor": 3},
    ),
    "tiled uint8 x13": (
        lambda: _RNG.integers(0, 256, (13, 64, 80), dtype=np.uint8),
        _NORTH_UP,
        {"tiled": True, "blockxsize": 16, "blockysize": 16, "nodata": 255},
    ),
}  # fmt: skip


def _bordered(bands: np.ndarray, nodata) -> np.ndarray:
    """`bands` with a nodata border in every band and a stripe of nodata in one band only (a
    pixel is invalid only where every band holds nodata)."""
    bands[:, :, :21] = nodata
    bands[0, 40:60, :] = nodata
    return bands


_VALIDITY = {
    "nodata 0 in every band": (
        lambda: _bordered(_RNG.integers(1, 65536, (3, 100, 120), dtype=np.uint16), 0),
        {"nodata": 0, "tiled": True, "blockxsize": 32, "blockysize": 32},
        {},
    ),
    "nan nodata": (
        lambda: _bordered(_RNG.normal(size=(2, 100, 120)).astype(np.float32), np.nan),
        {"nodata": float("nan")},
        {},
    ),
    "alpha": (
        lambda: _bordered(_RNG.integers(1, 256, (4, 100, 120), dtype=np.uint8), 0),
        {"photometric": "RGB", "alpha": "YES", "tiled": True, "blockxsize": 16,
         "blockysize": 16},
        {},
    ),
    "internal mask": (
        lambda: _RNG.integers(0, 256, (3, 100, 120), dtype=np.uint8),
        {"tiled": True, "blockxsize": 32, "blockysize": 32, "compress": "deflate"},
        {"GDAL_TIFF_INTERNAL_MASK": True},
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", _VALIDITY)
def test_valid_fraction_is_gdals_dataset_mask(kind, tmp_path):
    make, profile, env = _VALIDITY[kind]
    path = str(tmp_path / "scene.tif")
    with rasterio.Env(**env):
        _gdal_file(path, make(), _NORTH_UP, **profile)
        if kind == "internal mask":
            with rasterio.open(path, "r+") as dst:
                mask = np.zeros((100, 120), np.uint8)
                mask[10:70, 30:100] = 255
                dst.write_mask(mask)
    with rasterio.open(path) as src, open(path, "rb") as f:
        fractions = set()
        for w in chip_windows(src.height, src.width, (40, 48), 0):
            valid = tiff.decode_window(f, w.y, w.x, w.height, w.width, _FULL).valid
            mask = src.dataset_mask(window=Window(w.x, w.y, w.width, w.height))
            assert valid == pytest.approx(np.count_nonzero(mask) / mask.size), (kind, w)
            fractions.add(round(valid, 6))
        assert len(fractions) >= 2 and min(fractions) < 1  # the rule did something


@pytest.mark.parametrize("layout", _LAYOUTS)
def test_every_chip_equals_gdals_window(layout, tmp_path):
    make, transform, profile = _LAYOUTS[layout]
    path = _gdal_file(tmp_path / "scene.tif", make(), transform, **profile)
    with rasterio.open(path) as src, open(path, "rb") as f:
        for w in chip_windows(src.height, src.width, (40, 56), 8):
            image, sides, valid = tiff.decode_window(f, w.y, w.x, w.height, w.width, _FULL)
            window = Window(w.x, w.y, w.width, w.height)
            mask = src.dataset_mask(window=window)  # GDAL's valid pixels: 255
            assert valid == pytest.approx(np.count_nonzero(mask) / mask.size)
            expected = np.moveaxis(src.read(window=window), 0, 2)
            (frame,) = image.frames
            assert sides == (src.height, src.width)
            assert frame.dtype == expected.dtype  # float64 stays float64
            np.testing.assert_array_equal(frame, expected)
            got = json.loads(image.features["geo/transform"])
            np.testing.assert_allclose(got, src.window_transform(window).to_gdal(), rtol=1e-12)
            assert image.features["geo/epsg"] == 32633
            if src.nodata is not None:
                assert float(image.features["geo/nodata"]) == pytest.approx(src.nodata, nan_ok=True)
            else:
                assert "geo/nodata" not in image.features


def test_a_window_decodes_only_the_segments_under_it(tmp_path):
    bands = _RNG.integers(0, 65536, (2, 256, 256), dtype=np.uint16)
    path = _gdal_file(
        tmp_path / "s.tif", bands, _NORTH_UP, tiled=True, blockxsize=64, blockysize=64,
        interleave="band",
    )  # fmt: skip
    with tifffile.TiffFile(path) as tif:
        page = tif.pages.first
        # 2 x 2 tiles of each of the 2 band planes (16 tiles per plane)
        assert segment_indices(page, 60, 60, 10, 10) == [0, 1, 4, 5, 16, 17, 20, 21]
        assert segment_indices(page, 130, 200, 10, 10) == [11, 27]
        assert segment_indices(page, 0, 0, 64, 64) == [0, 16]


def test_a_chip_at_8_bits_follows_the_whole_images_rule(tmp_path):
    bands = _RNG.integers(0, 65536, (3, 40, 50), dtype=np.uint16)
    path = _gdal_file(tmp_path / "s.tif", bands, _NORTH_UP, tiled=True, blockxsize=16,
                      blockysize=16)  # fmt: skip
    data = open(path, "rb").read()
    whole = tiff.decode_arrays(data, ArrayRequest()).frames[0]
    chip = tiff.decode_window(io.BytesIO(data), 10, 20, 16, 24, ArrayRequest()).image
    assert chip.frames[0].dtype == np.uint8
    np.testing.assert_array_equal(chip.frames[0], whole[10:26, 20:44])


def test_a_window_outside_the_page_is_refused(tmp_path):
    path = _gdal_file(tmp_path / "s.tif", np.zeros((1, 20, 30), np.uint8), _NORTH_UP)
    with open(path, "rb") as f, pytest.raises(Rejected, match="leaves the 30x20 page"):
        tiff.decode_window(f, 10, 0, 11, 30, _FULL)


def test_damaged_scenes_are_rejected_never_raised(tmp_path):
    """Seeded byte mutations of a tiled GeoTIFF (header, tile offsets, tile data): every window
    of every mutant decodes or is Rejected; no other exception leaves decode_window."""
    bands = _RNG.integers(0, 65536, (3, 64, 80), dtype=np.uint16)
    path = _gdal_file(
        tmp_path / "s.tif", bands, _NORTH_UP, tiled=True, blockxsize=16, blockysize=16,
        compress="deflate",
    )  # fmt: skip
    data = open(path, "rb").read()
    rng = np.random.default_rng(0)
    outcomes = set()
    for _ in range(60):
        mutant = bytearray(data)
        for at in rng.integers(0, len(data), int(rng.integers(1, 8))):
            mutant[at] = int(rng.integers(0, 256))
        for w in chip_windows(64, 80, (32, 32), 0):
            try:
                tiff.decode_window(io.BytesIO(bytes(mutant)), w.y, w.x, w.height, w.width, _FULL)
                outcomes.add("decoded")
            except Rejected as e:
                outcomes.add(e.reason)
    assert "decoded" in outcomes and outcomes - {"decoded"}  # both happened


def test_a_chips_decoder_crash_is_a_decoder_error_and_the_next_window_decodes(
    tmp_path, monkeypatch
):
    from transforms.images import decoder_pool
    from transforms.tiles.scenes import read_window

    bands = _RNG.integers(0, 65536, (2, 40, 50), dtype=np.uint16)
    good = _gdal_file(tmp_path / "good.tif", bands, _NORTH_UP, tiled=True, blockxsize=16,
                      blockysize=16)  # fmt: skip
    bad = str(tmp_path / "IMGREC-ABORT-MARKER.tif")
    os.link(good, bad)
    monkeypatch.setattr(decoder_pool, "test_abort_marker", "IMGREC-ABORT-MARKER")
    with pytest.raises(Rejected) as e:
        read_window(bad, 0, 0, 16, 16, _FULL)  # the worker opening it aborts
    assert e.value.reason == "decoder_error"
    assert "decoder process died (signal 6)" in e.value.detail
    window = read_window(good, 8, 10, 20, 30, _FULL)  # a fresh worker takes over
    np.testing.assert_array_equal(window.image.frames[0], np.moveaxis(bands, 0, 2)[8:28, 10:40])
