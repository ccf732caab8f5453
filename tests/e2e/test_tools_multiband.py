"""`imgrec verify`, `inspect` and `preview` on every stored form: a folder of a 13-band 16-bit tiled
GeoTIFF, a 16-bit gray TIFF, a float32 TIFF, a DICOM CT and an RGB JPEG, converted with defaults
(8-bit PNGs, raw uint16 x 13, JPEG) from the command line, and in process (tests.runs.in_process:
the same commands, what they write is the subject) with --bit_depth 16 (16-bit PNGs, raw float32)
and with --store pixels (raw uint8 RGB). The contact sheet's thumbnails are decoded and compared
with what they must show: the first three bands, wider samples stretched min-max."""

from __future__ import annotations

import base64
import io
import json
import os
import re

import numpy as np
import pytest
import tifffile
from PIL import Image

from tests.dicom_files import make_ct
from tests.runs import cli, in_process

_H, _W = 40, 48
_Y, _X = np.mgrid[0:_H, 0:_W].astype(np.float64)
# Smooth bands (JPEG thumbnails keep them close), each its own pattern: a thumbnail of other
# bands than the first three, or of the wrong range, differs from the expected one by far.
_CUBE = np.stack(
    [
        1000 + 150 * _X,  # 1000..8050
        2000 + 100 * _Y,  # 2000..5900
        1500 + 60 * (_X + _Y),  # 1500..6720
        *[9000 - 100 * ((b + 1) * _X % _W) for b in range(10)],
    ]
).astype(np.uint16)  # bands first, as a GeoTIFF's planes
_GRAY16 = (3000 + 100 * _Y + 20 * _X).astype(np.uint16)[:30, :20]
_FLOAT = (np.sin(_X / 8) * np.cos(_Y / 9) * 2.5).astype(np.float32)[:25, :35]
_FILES = ("a/geo13.tif", "a/gray16.tif", "b/float.tif", "b/photo.jpg", "c/ct.dcm")


def _geotiff(path: str) -> None:
    """13 bands, 16-bit, tiled, with GDAL's GeoTIFF tags: UTM 33N, a tie point and a scale."""
    keys = [1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633]
    tags = [
        (33550, "d", 3, (10.0, 10.0, 0.0), True),  # ModelPixelScale
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0, 4649776.0, 0.0), True),  # ModelTiepoint
        (34735, "H", len(keys), keys, True),  # GeoKeyDirectory
    ]
    tifffile.imwrite(
        path, _CUBE, photometric="minisblack", planarconfig="separate", tile=(16, 16),
        compression="zlib", extratags=tags,
    )  # fmt: skip


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("multiband")
    for folder in ("a", "b", "c"):
        (root / folder).mkdir()
    _geotiff(str(root / "a/geo13.tif"))
    tifffile.imwrite(root / "a/gray16.tif", _GRAY16)
    tifffile.imwrite(root / "b/float.tif", _FLOAT)
    rgb = np.dstack([_X * 5, _Y * 6, 255 - _X * 5]).astype(np.uint8)
    Image.fromarray(rgb).save(root / "b/photo.jpg", quality=95)
    make_ct(str(root / "c/ct.dcm"))
    return str(root)


def _convert(src: str, out: str, *options: str, run=cli) -> dict:
    run("convert", "--input", f"{src}/*/*", "--output", out, *options)
    with open(os.path.join(out, "dataset_info.json")) as f:
        return json.load(f)


def _figures(out: str) -> dict[str, dict]:
    """Source file name -> {"original": array or None, "eval": array or None} of the contact
    sheet in report.html."""
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        page = f.read()
    found = {}
    for figure in re.findall(r"<figure>.*?</figure>", page, re.S):
        name = re.search(r"· ([^<]*)</figcaption>", figure).group(1)
        images = {}
        for alt in ("original", "eval crop"):
            uri = re.search(rf'alt="{alt}" src="data:image/jpeg;base64,([^"]+)"', figure)
            images[alt] = (
                np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.group(1)))), np.float64)
                if uri
                else None
            )
        found[os.path.relpath(name, os.path.dirname(os.path.dirname(name)))] = images
    return found


def _min_max(values: np.ndarray) -> np.ndarray:
    """What the contact sheet shows of samples wider than 8 bits: min..max -> 0..255."""
    values = values.astype(np.float64)
    return np.rint((values - values.min()) * 255 / (values.max() - values.min()))


def _close(shown: np.ndarray, want: np.ndarray, what: str) -> None:
    """A JPEG thumbnail of a smooth image: within a few levels of `want` on average."""
    if want.ndim == 2:  # a gray image's JPEG thumbnail is RGB with three equal channels
        want = np.repeat(want[:, :, None], 3, axis=2)
    assert shown.shape == want.shape, what
    error = float(np.abs(shown - want).mean())
    assert error < 4, f"{what}: mean error {error:.1f} levels"


def test_defaults_verify_inspect_and_preview(src, tmp_path):
    out = str(tmp_path / "out")
    info = _convert(src, out)
    assert info["num_written"] == len(_FILES), info["num_rejected"]
    verified = cli("verify", out)
    assert f"OK: {len(_FILES)} records" in verified.stdout
    shown = cli("inspect", out).stdout
    formats = next(line for line in shown.splitlines() if line.startswith("  formats "))
    assert formats.split()[1:] == ["jpeg", "1,", "png", "3,", "raw", "1"]
    layouts = next(line for line in shown.splitlines() if line.startswith("  layouts "))
    assert "uint16x13 1" in layouts and "uint8x1" in layouts and "uint8x3" in layouts
    assert "imgrec: report" in cli("preview", out).stdout
    # The contact sheet shows one split: every record of it has both thumbnails.
    split = "train" if info["splits"]["train"]["num_examples"] else "validation"
    figures = _figures(out)
    assert len(figures) == info["splits"][split]["num_examples"]
    for name, images in figures.items():
        assert images["original"] is not None and images["eval crop"] is not None, name
    if "a/geo13.tif" in figures:  # by the path's hash it may be in validation
        want = _min_max(np.moveaxis(_CUBE[:3], 0, 2))
        _close(figures["a/geo13.tif"]["original"], want, "13 bands")


def test_sixteen_bits_and_floats_render_stretched(src, tmp_path):
    out = str(tmp_path / "out16")
    info = _convert(src, out, "--bit_depth", "16", "--splits", "train=1", run=in_process)
    assert info["formats_written"] == {"jpeg": 1, "png": 2, "raw": 2}
    layouts = info["splits"]["train"]["pixel_layouts"]
    assert layouts["uint16x13"] == 1 and layouts["float32x1"] == 1 and layouts["uint16x1"] == 2
    assert f"OK: {len(_FILES)} records" in in_process("verify", out).stdout
    in_process("preview", out)
    figures = _figures(out)
    assert sorted(figures) == sorted(_FILES)
    for name, images in figures.items():
        assert images["original"] is not None and images["eval crop"] is not None, name
    cube = np.moveaxis(_CUBE, 0, 2)
    _close(figures["a/geo13.tif"]["original"], _min_max(cube[:, :, :3]), "13 bands")
    # Not any three bands, nor the first three at their declared range 0..65535.
    assert np.abs(figures["a/geo13.tif"]["original"] - _min_max(cube[:, :, 3:6])).mean() > 30
    assert np.abs(figures["a/geo13.tif"]["original"] - cube[:, :, :3] / 257).mean() > 30
    _close(figures["a/gray16.tif"]["original"], _min_max(_GRAY16), "16-bit gray")
    _close(figures["b/float.tif"]["original"], _min_max(_FLOAT), "float32")
    assert figures["c/ct.dcm"]["original"].std() > 10  # a picture, not a flat square


def test_store_pixels_raw_rgb_and_bands(src, tmp_path):
    out = str(tmp_path / "pixels")
    options = ("--store", "pixels", "--max_side", "64", "--splits", "train=1")
    info = _convert(src, out, *options, run=in_process)
    assert info["formats_written"] == {"raw": len(_FILES)}
    assert f"OK: {len(_FILES)} records" in in_process("verify", out).stdout
    in_process("preview", out)
    figures = _figures(out)
    assert sorted(figures) == sorted(_FILES)
    assert all(images["original"] is not None for images in figures.values())
    _close(figures["a/geo13.tif"]["original"], _min_max(np.moveaxis(_CUBE[:3], 0, 2)), "13 bands")
