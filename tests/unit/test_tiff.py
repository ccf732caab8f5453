"""transforms/images/tiff.py: TIFFs of every layout, written by tifffile and Pillow, decode to the
samples tifffile itself reads (or Pillow's / scikit-image's colour conversion of them), stored at
the depth the rules say; GeoTIFF keys; refusals; a fuzz of crafted headers that only ever
raises Rejected."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import struct
import time
import warnings

import numpy as np
import pytest
import tifffile
from PIL import Image

from core.rejects import Rejected
from tests.runs import fuzz_seed
from transforms.images import tiff
from transforms.images.array_contract import ArrayImage, ArrayRequest
from transforms.images.headers import ORIENTATION_TRANSPOSE

_RNG = np.random.default_rng(59)
_H, _W = 20, 30
_RGB = _RNG.integers(0, 256, (_H, _W, 3), dtype=np.uint8)
# A smooth image for lossy JPEG-in-TIFF: chroma subsampling keeps it close to the source.
_SMOOTH = np.dstack(
    [*np.meshgrid(np.linspace(0, 255, _W), np.linspace(0, 255, _H)), np.full((_H, _W), 90.0)]
).astype(np.uint8)


def _tifffile(array: np.ndarray, **kwargs) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, array, **kwargs)
    return buf.getvalue()


def _pillow(image: Image.Image, **kwargs) -> bytes:
    buf = io.BytesIO()
    image.save(buf, "TIFF", **kwargs)
    return buf.getvalue()


def _reference(data: bytes) -> np.ndarray:
    """tifffile's own read of the first page, as [H, W, S]."""
    with tifffile.TiffFile(io.BytesIO(data)) as tif:
        page = tif.pages.first
        array, axes = page.asarray(), page.axes
    if "S" not in axes:
        return array[..., None]
    return np.moveaxis(array, [axes.index(a) for a in "YXS"], [0, 1, 2])


def decode_tiff(data: bytes, request: ArrayRequest | None = None) -> ArrayImage:
    return tiff.decode_arrays(data, request or ArrayRequest())


@dataclasses.dataclass(frozen=True)
class _Frame:
    """The first stored frame and how its values map back to the source's."""

    pixels: np.ndarray
    scale: float
    offset: float

    @property
    def scaled(self) -> bool:
        return (self.scale, self.offset) != (1.0, 0.0)

    @property
    def raw(self) -> bool:
        return self.pixels.shape[2] > 4 or self.pixels.dtype.kind == "f"

    @property
    def value_range(self):
        """(low, high) of the source values the stored range spans, to float precision."""
        top = np.iinfo(self.pixels.dtype).max
        return pytest.approx((self.offset, self.offset + self.scale * top), rel=1e-12)


def _frame(data: bytes, **request) -> _Frame:
    image = decode_tiff(data, ArrayRequest(**request))
    return _Frame(image.frames[0], image.value_scale, image.value_offset)


def _scaled(ref: np.ndarray, lo: float, hi: float, top: int) -> np.ndarray:
    return np.rint((ref.astype(np.float64) - lo) * (top / (hi - lo))).astype(
        np.uint8 if top == 255 else np.uint16
    )


# (name, bytes) of 8-bit layouts that must decode to exactly tifffile's samples.
_EIGHT_BIT = {
    "striped_none": _tifffile(_RGB),
    "striped_lzw": _tifffile(_RGB, compression="lzw"),
    "striped_deflate": _tifffile(_RGB, compression="zlib"),
    "striped_packbits": _tifffile(_RGB, compression="packbits"),
    "tiled_lzw": _tifffile(_RGB, tile=(16, 16), compression="lzw"),
    "tiled_deflate_planar": _tifffile(
        np.moveaxis(_RGB, 2, 0), tile=(16, 16), compression="zlib", planarconfig="separate"
    ),
    "planar_striped": _tifffile(np.moveaxis(_RGB, 2, 0), planarconfig="separate"),
    "big_endian": _tifffile(_RGB, byteorder=">", compression="lzw"),
    "bigtiff": _tifffile(_RGB, bigtiff=True, compression="zlib"),
    "bigtiff_big_endian_tiled": _tifffile(_RGB, bigtiff=True, byteorder=">", tile=(16, 16)),
    "rgba": _tifffile(
        np.dstack([_RGB, _RGB[..., :1]]), photometric="rgb", extrasamples=["unassalpha"]
    ),
    "gray": _tifffile(_RGB[..., 0]),
    "pillow_none": _pillow(Image.fromarray(_RGB)),
    "pillow_lzw": _pillow(Image.fromarray(_RGB), compression="tiff_lzw"),
    "pillow_deflate": _pillow(Image.fromarray(_RGB), compression="tiff_adobe_deflate"),
    "pillow_packbits": _pillow(Image.fromarray(_RGB), compression="packbits"),
    "pillow_rgba": _pillow(Image.fromarray(_RGB).convert("RGBA")),
    "pillow_gray_lzw": _pillow(Image.fromarray(_RGB).convert("L"), compression="tiff_lzw"),
}


@pytest.mark.parametrize("name", sorted(_EIGHT_BIT))
def test_eight_bit_layouts_keep_tifffiles_samples(name):
    data = _EIGHT_BIT[name]
    frame = _frame(data)
    assert frame.pixels.dtype == np.uint8 and not frame.scaled and not frame.raw
    np.testing.assert_array_equal(frame.pixels, _reference(data))


@pytest.mark.parametrize(
    "data",
    [
        _tifffile(_SMOOTH, compression="jpeg", photometric="rgb", subsampling=(2, 2)),
        _tifffile(_SMOOTH, compression="jpeg", photometric="rgb", subsampling=(2, 1)),
        _tifffile(_SMOOTH, compression="jpeg", photometric="rgb", subsampling=(1, 1)),
        _tifffile(_SMOOTH, compression="jpeg", tile=(16, 16)),
        _pillow(Image.fromarray(_SMOOTH), compression="jpeg"),
    ],
    ids=["ycbcr_22", "ycbcr_21", "rgb", "tiled", "pillow"],
)
def test_jpeg_in_tiff_is_rgb_as_tifffile_and_pillow_decode_it(data):
    frame = _frame(data)
    np.testing.assert_array_equal(frame.pixels, _reference(data))
    assert frame.pixels.shape == (_H, _W, 3)
    # Pillow (libtiff + libjpeg) decodes the same file within JPEG's rounding.
    pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
    assert np.abs(frame.pixels.astype(int) - pillow).max() <= 3
    # Lossy, but the image: near the source.
    assert np.abs(frame.pixels.astype(int) - _SMOOTH).mean() < 4


@pytest.mark.parametrize("compression", ["tiff_ccitt", "group3", "group4", "packbits", "raw"])
def test_bilevel_is_black_and_white_8_bit(compression):
    bilevel = Image.fromarray(_RGB).convert("1")
    data = _pillow(bilevel, compression=compression)
    frame = _frame(data)
    want = np.asarray(bilevel.convert("L"))[..., None]
    np.testing.assert_array_equal(frame.pixels, want)
    assert frame.scaled and frame.value_range == (0.0, 1.0)


def test_white_is_zero_is_inverted():
    gray = _RGB[..., 0]
    data = _tifffile(gray, photometric="miniswhite")
    np.testing.assert_array_equal(_frame(data).pixels[..., 0], 255 - gray)
    # A G4 fax as scanners write it: 1 is black. (Pillow writes 1 as white: the tag changed.)
    bilevel = Image.fromarray(_RGB).convert("1")
    data = _with_tag(_pillow(bilevel, compression="group4"), 262, 0)
    np.testing.assert_array_equal(
        _frame(data).pixels[..., 0], 255 - np.asarray(bilevel.convert("L"))
    )


@pytest.mark.parametrize("bits", [2, 4, 12])
def test_packed_depths_scale_from_their_declared_range(bits):
    top = 2**bits - 1
    samples = _RNG.integers(0, top + 1, (_H, _W), dtype=np.uint8 if bits < 8 else np.uint16)
    data = _tifffile(samples, bitspersample=bits, photometric="minisblack")
    np.testing.assert_array_equal(_reference(data)[..., 0], samples)  # tifffile reads them
    frame = _frame(data)
    assert frame.value_range == (0.0, float(top)) and frame.scaled
    np.testing.assert_array_equal(frame.pixels[..., 0], _scaled(samples, 0, top, 255))
    kept = _frame(data, bit_depth=16)
    if bits > 8:  # 12 bits stay as they are in 16
        assert kept.pixels.dtype == np.uint16 and not kept.scaled
        np.testing.assert_array_equal(kept.pixels[..., 0], samples)
    else:  # 2 and 4 bits are held by 8
        np.testing.assert_array_equal(kept.pixels, frame.pixels)


@pytest.mark.parametrize("planar", [False, True])
@pytest.mark.parametrize("byteorder", ["<", ">"])
def test_sixteen_bit_kept_or_scaled(planar, byteorder):
    rgb16 = _RNG.integers(0, 65536, (_H, _W, 3), dtype=np.uint16)
    array = np.moveaxis(rgb16, 2, 0) if planar else rgb16
    data = _tifffile(
        array,
        byteorder=byteorder,
        compression="zlib",
        photometric="rgb",
        planarconfig="separate" if planar else "contig",
        tile=(16, 16),
    )
    kept = _frame(data, bit_depth=16)
    assert kept.pixels.dtype == np.uint16 and not kept.scaled
    np.testing.assert_array_equal(kept.pixels, rgb16)
    default = _frame(data)
    assert default.pixels.dtype == np.uint8 and default.value_range == (0.0, 65535.0)
    np.testing.assert_array_equal(default.pixels, _scaled(rgb16, 0, 65535, 255))


def test_pillow_16_bit_gray_round_trips_with_bit_depth_16():
    gray = _RNG.integers(0, 65536, (_H, _W), dtype=np.uint16)
    data = _pillow(Image.fromarray(gray))
    np.testing.assert_array_equal(_frame(data, bit_depth=16).pixels[..., 0], gray)


@pytest.mark.parametrize("dtype", [np.int16, np.uint32, np.int32, np.int8])
def test_other_integers_scale_from_their_type_range(dtype):
    info = np.iinfo(dtype)
    samples = _RNG.integers(info.min, info.max, (_H, _W), dtype=dtype, endpoint=True)
    data = _tifffile(samples, compression="lzw")
    frame = _frame(data)
    lo, hi = float(info.min), float(info.max)
    assert frame.value_range == (lo, hi) and frame.scaled
    np.testing.assert_array_equal(frame.pixels[..., 0], _scaled(samples, lo, hi, 255))
    if info.bits > 8:
        wide = _frame(data, bit_depth=16)
        np.testing.assert_array_equal(wide.pixels[..., 0], _scaled(samples, lo, hi, 65535))


def test_smin_smax_tags_set_the_range_but_never_clip():
    samples = _RNG.integers(100, 1001, (_H, _W), dtype=np.uint16)
    tags = [(340, "H", 1, 100, True), (341, "H", 1, 1000, True)]
    frame = _frame(_tifffile(samples, extratags=tags))
    assert frame.value_range == (100.0, 1000.0)
    np.testing.assert_array_equal(frame.pixels[..., 0], _scaled(samples, 100, 1000, 255))
    # A range the data leaves is widened to the data: nothing clipped.
    tags = [(340, "H", 1, 200, True), (341, "H", 1, 300, True)]
    frame = _frame(_tifffile(samples, extratags=tags))
    assert frame.value_range == (float(samples.min()), float(samples.max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_floats_scale_from_the_data_or_stay_float(dtype):
    samples = (_RNG.random((_H, _W, 3)) * 1000 - 200).astype(dtype)
    data = _tifffile(samples, photometric="rgb", compression="zlib")
    frame = _frame(data)
    lo, hi = float(samples.min()), float(samples.max())
    assert frame.value_range == (lo, hi) and frame.pixels.dtype == np.uint8
    np.testing.assert_array_equal(frame.pixels, _scaled(samples, lo, hi, 255))
    kept = _frame(data, bit_depth=16)
    stored = np.float32 if dtype == np.float16 else dtype  # float64 is never narrowed
    assert kept.pixels.dtype == stored and kept.raw and not kept.scaled
    np.testing.assert_array_equal(kept.pixels, samples.astype(stored))


def test_a_range_too_wide_to_scale_back_is_rejected_naming_the_fix():
    """A float64 nodata sentinel near the type's limit: no float32 value_scale maps 8-bit
    values back to that range, so the file is refused (not written flat with an inf scale)."""
    samples = np.linspace(0, 3000, _H * _W).reshape(_H, _W)
    samples[0, 0] = -1.79e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no overflow on the way
        with pytest.raises(Rejected, match="--bit_depth 16") as caught:
            _frame(_tifffile(samples))
    assert caught.value.reason == "unsupported_format"
    kept = _frame(_tifffile(samples), bit_depth=16)
    np.testing.assert_array_equal(kept.pixels[..., 0], samples)


def test_nan_and_infinities_do_not_set_the_range():
    samples = np.linspace(0, 1, _H * _W, dtype=np.float32).reshape(_H, _W)
    samples[0, :3] = (np.nan, np.inf, -np.inf)
    frame = _frame(_tifffile(samples))
    assert frame.value_range == (float(samples[0, 3]), 1.0)
    assert list(frame.pixels[0, :3, 0]) == [0, 255, 0]
    samples[0, :3] = np.array([0x7FA00000] * 3, dtype=np.uint32).view(np.float32)  # signalling
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(_frame(_tifffile(samples)).pixels[0, :3, 0]) == [0, 0, 0]


@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.float32, np.uint8, np.uint32])
def test_more_than_four_bands_are_kept_whole(dtype):
    cube = (_RNG.random((_H, _W, 13)) * 3000).astype(dtype)
    data = _tifffile(
        np.moveaxis(cube, 2, 0), photometric="minisblack", planarconfig="separate", tile=(16, 16)
    )
    frame = _frame(data)
    assert frame.raw and frame.pixels.shape == (_H, _W, 13) and not frame.scaled
    assert frame.pixels.dtype == (np.int64 if dtype == np.uint32 else dtype)
    np.testing.assert_array_equal(frame.pixels, cube)


def test_palette_is_expanded_as_pillow_reads_it():
    for bits, image in ((8, Image.fromarray(_RGB).convert("P")),):
        data = _pillow(image)
        want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        np.testing.assert_array_equal(_frame(data).pixels, want), bits
    # A 4-bit palette written by tifffile with a 16-bit colour map.
    indices = _RNG.integers(0, 16, (_H, _W), dtype=np.uint8)
    # tifffile writes 256 entries whatever the depth (readers use the first 16).
    colormap = _RNG.integers(0, 256, (3, 256), dtype=np.uint16) << 8
    data = _tifffile(indices, photometric="palette", colormap=colormap, bitspersample=4)
    np.testing.assert_array_equal(_frame(data).pixels, (colormap >> 8).T[indices])


def test_cmyk_is_converted_as_pillow_converts_it():
    cmyk = Image.fromarray(_RGB).convert("CMYK")
    data = _pillow(cmyk, compression="tiff_lzw")
    np.testing.assert_array_equal(_frame(data).pixels, np.asarray(cmyk.convert("RGB")))
    ink16 = _RNG.integers(0, 65536, (_H, _W, 4), dtype=np.uint16)
    frame = _frame(_tifffile(ink16, photometric="separated"), bit_depth=16)
    top = 65535.0
    want = np.rint((top - ink16[..., :3]) * (top - ink16[..., 3:]) / top).astype(np.uint16)
    np.testing.assert_array_equal(frame.pixels, want)


def test_lab_is_converted_to_srgb_as_scikit_image_does():
    color = pytest.importorskip("skimage.color")
    rgb = _RGB.astype(np.float64) / 255
    lab = color.rgb2lab(rgb)  # D65, in gamut by construction
    cielab = np.dstack(
        [np.rint(lab[..., 0] * 255 / 100), np.rint(lab[..., 1]), np.rint(lab[..., 2])]
    ).astype(np.int16)
    samples = cielab.astype(np.uint8)  # a*, b* as two's complement bytes
    data = _tifffile(samples, photometric="cielab")
    back = np.dstack([cielab[..., 0] * 100 / 255, cielab[..., 1], cielab[..., 2]])
    want = np.rint(np.clip(color.lab2rgb(back), 0, 1) * 255)
    frame = _frame(data)
    assert frame.pixels.dtype == np.uint8
    assert np.abs(frame.pixels - want).max() <= 1
    # Pillow reads the same file to within its own 8-bit conversion of Lab.
    assert Image.open(io.BytesIO(data)).mode == "LAB"


def test_associated_alpha_is_made_straight():
    alpha = np.full((_H, _W, 1), 128, np.uint8)
    premultiplied = np.rint(_RGB * (128 / 255)).astype(np.uint8)
    data = _tifffile(
        np.dstack([premultiplied, alpha]), photometric="rgb", extrasamples=["assocalpha"]
    )
    pixels = _frame(data).pixels
    assert np.abs(pixels[..., :3].astype(int) - _RGB).max() <= 2
    np.testing.assert_array_equal(pixels[..., 3:], alpha)


def _oriented(data_array: np.ndarray, orientation: int) -> bytes:
    return _tifffile(data_array, extratags=[(274, "H", 1, orientation, True)])


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_tag_is_applied_as_pillow_transposes(orientation):
    data = _oriented(_RGB, orientation)
    pixels = _frame(data).pixels
    want = Image.fromarray(_RGB)
    if orientation in ORIENTATION_TRANSPOSE:
        want = want.transpose(getattr(Image.Transpose, ORIENTATION_TRANSPOSE[orientation]))
    np.testing.assert_array_equal(pixels, np.asarray(want))
    # Pillow applies the tag itself on load: the same pixels.
    np.testing.assert_array_equal(pixels, np.asarray(Image.open(io.BytesIO(data))))


def test_multi_page_first_by_default_all_on_request():
    pages = [_RGB, _RGB[::-1], _RGB[:, ::-1]]
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf) as writer:
        for page in pages:
            writer.write(page, compression="lzw")
        # A reduced-resolution page (an overview) is no frame of its own.
        writer.write(_RGB[::2, ::2], subfiletype=1)
    data = buf.getvalue()
    first = decode_tiff(data)
    assert first.num_frames == 3 and len(first.frames) == 1
    np.testing.assert_array_equal(first.frames[0], pages[0])
    every = decode_tiff(data, ArrayRequest(frames="all"))
    assert len(every.frames) == 3
    for frame, page in zip(every.frames, pages, strict=True):
        np.testing.assert_array_equal(frame, page)


# ----------------------------------------------------------------------------- GeoTIFF
def _geotiff(array: np.ndarray, epsg: int = 32633, orientation: int = 1, **kwargs) -> bytes:
    """A GeoTIFF as GDAL writes one: UTM zone 33N, one tie point and the pixel scale."""
    keys = [1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, epsg]
    tags = [
        (33550, "d", 3, (10.0, 20.0, 0.0), True),  # ModelPixelScale
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.25, 4649776.75, 0.0), True),  # ModelTiepoint
        (34735, "H", len(keys), keys, True),  # GeoKeyDirectory
        (274, "H", 1, orientation, True),
    ]
    return _tifffile(array, extratags=tags, **kwargs)


def test_geotiff_georeferencing_is_kept():
    cube = _RNG.integers(0, 10000, (13, _H, _W), dtype=np.uint16)
    data = _geotiff(cube, photometric="minisblack", planarconfig="separate", tile=(16, 16))
    image = decode_tiff(data)
    assert image.features["geo/epsg"] == 32633 and image.features["geo/crs"] == "EPSG:32633"
    assert image.features["geo/raster_type"] == "area"
    assert json.loads(image.features["geo/transform"]) == [
        500000.25,
        10.0,
        0.0,
        4649776.75,
        0.0,
        -20.0,
    ]
    keys = json.loads(image.features["geo/keys"])
    assert keys["ProjectedCSTypeGeoKey"] == 32633 and keys["ModelPixelScale"][:2] == [10, 20]
    np.testing.assert_array_equal(image.frames[0], np.moveaxis(cube, 0, 2))


def test_model_transformation_and_user_defined_crs():
    matrix = [2.0, 0.5, 0, 100.0, 0.25, -3.0, 0, 200.0, 0, 0, 1, 0, 0, 0, 0, 1]
    keys = [1, 1, 0, 2, 1024, 0, 1, 2, 2048, 0, 1, 32767]
    tags = [(34264, "d", 16, matrix, True), (34735, "H", len(keys), keys, True)]
    image = decode_tiff(_tifffile(_RGB, extratags=tags))
    assert image.features["geo/epsg"] == 0 and image.features["geo/crs"] == ""
    assert json.loads(image.features["geo/transform"]) == [100.0, 2.0, 0.5, 200.0, 0.25, -3.0]


@pytest.mark.parametrize("orientation", range(1, 9))
def test_geotransform_follows_the_orientation(orientation):
    """Every stored pixel keeps its ground position: the corner of stored pixel (col, row)
    through the new transform lands where the source pixel it came from did."""
    cols, rows = np.meshgrid(np.arange(_W), np.arange(_H))
    index = (rows * _W + cols).astype(np.uint16)
    image = decode_tiff(_geotiff(index, orientation=orientation), ArrayRequest(bit_depth=16))
    stored = image.frames[0][..., 0]
    t = json.loads(image.features["geo/transform"])
    source = [500000.25, 10.0, 0.0, 4649776.75, 0.0, -20.0]

    def centre(transform, col, row):
        x = transform[0] + (col + 0.5) * transform[1] + (row + 0.5) * transform[2]
        y = transform[3] + (col + 0.5) * transform[4] + (row + 0.5) * transform[5]
        return x, y

    for row in range(stored.shape[0]):
        for col in range(stored.shape[1]):
            src_row, src_col = divmod(int(stored[row, col]), _W)
            assert centre(t, col, row) == pytest.approx(centre(source, src_col, src_row))


def test_a_tiff_without_geokeys_has_no_geo_values():
    assert decode_tiff(_tifffile(_RGB)).features == {}


# ----------------------------------------------------------------------------- refusals
def _with_tag(data: bytes, tag: int, value: int) -> bytes:
    """`data` (little-endian classic TIFF) with the SHORT/LONG tag `tag` of IFD 0 set."""
    b = bytearray(data)
    ifd = struct.unpack_from("<I", b, 4)[0]
    for i in range(struct.unpack_from("<H", b, ifd)[0]):
        at = ifd + 2 + 12 * i
        code, kind = struct.unpack_from("<HH", b, at)
        if code == tag:
            struct.pack_into("<H" if kind == 3 else "<I", b, at + 8, value)
            return bytes(b)
    raise AssertionError(f"tag {tag} not in the first IFD")


def test_refusals_name_what_was_missing():
    data = _tifffile(_RGB, compression="lzw")
    with pytest.raises(Rejected) as e:
        decode_tiff(_with_tag(data, 259, 4242))
    assert e.value.reason == "unsupported_format" and "compression 4242" in e.value.detail
    with pytest.raises(Rejected) as e:
        decode_tiff(data[: len(data) // 2])
    assert e.value.reason == "truncated" and "image data ends at byte" in e.value.detail
    with pytest.raises(Rejected) as e:
        decode_tiff(_with_tag(_tifffile(_RGB), 279, 0))  # StripByteCounts 0: no image data
    assert e.value.reason == "corrupt" and "no image data" in e.value.detail
    with pytest.raises(Rejected) as e:
        decode_tiff(data, ArrayRequest(max_pixels=100))
    assert e.value.reason == "too_many_pixels" and "--max_pixels 100" in e.value.detail
    cube = np.zeros((200, 8, 8), np.float64)
    with pytest.raises(Rejected) as e:
        decode_tiff(_tifffile(cube, planarconfig="separate"), ArrayRequest(max_pixels=64))
    assert e.value.reason == "too_many_pixels" and "bands" in e.value.detail
    with pytest.raises(Rejected) as e:
        decode_tiff(_tifffile(_RGB, photometric="ycbcr", compression="none"))
    assert e.value.reason == "unsupported_format" and "YCbCr" in e.value.detail


# ----------------------------------------------------------------------------- fuzz
# Seconds of crafted-header mutations per run; IMGREC_FUZZ_SEED=N replays one (the seed is in
# every failure message).
_FUZZ_BUDGET_S = 3.0
_FUZZ_BASES = (
    _EIGHT_BIT["tiled_lzw"],
    _EIGHT_BIT["bigtiff_big_endian_tiled"],
    _EIGHT_BIT["pillow_packbits"],
    _EIGHT_BIT["tiled_deflate_planar"],
    _tifffile(_RGB, compression="jpeg", photometric="ycbcr", subsampling=(2, 2)),
    _pillow(Image.fromarray(_RGB).convert("1"), compression="group4"),
    _pillow(Image.fromarray(_RGB).convert("P")),
    _geotiff(_RNG.integers(0, 9, (6, 16, 16), dtype=np.uint16), planarconfig="separate"),
    _tifffile(_RNG.random((8, 8)).astype(np.float32), predictor=True, compression="zlib"),
)
# Values a crafted IFD entry takes: counts, offsets and codes at their edges.
_EDGES = (0, 1, 2, 3, 7, 8, 255, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)


def _craft(rng: random.Random, data: bytes) -> bytes:
    """Mutate the header and IFD (the first 512 bytes hold them in these files)."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 3))):
        i = rng.randrange(min(len(b), 512))
        kind = rng.random()
        if kind < 0.5:
            width = rng.choice((2, 4))
            value = rng.choice(_EDGES) & ((1 << (8 * width)) - 1)
            b[i : i + width] = value.to_bytes(width, rng.choice(("little", "big")))
        elif kind < 0.8:
            b[i] ^= 1 << rng.randrange(8)
        elif len(b) > 9:
            del b[rng.randrange(8, len(b)) :]
    return bytes(b)


def test_crafted_headers_only_raise_rejected():
    seed = fuzz_seed()
    rng = random.Random(seed)
    failures, cases, kept = [], 0, 0
    start = time.monotonic()
    while time.monotonic() - start < _FUZZ_BUDGET_S:
        mutant = _craft(rng, rng.choice(_FUZZ_BASES))
        cases += 1
        options = ArrayRequest(frames=rng.choice(("first", "all")), max_pixels=1 << 20)
        try:
            image = decode_tiff(mutant, options)
        except Rejected:
            continue
        except Exception as e:  # noqa: BLE001  (what the test looks for)
            failures.append(f"seed {seed} case {cases}: {type(e).__name__}: {e}")
            continue
        kept += 1
        for frame in image.frames:
            assert frame.ndim == 3
    print(f"tiff fuzz seed {seed}: {cases} cases, {kept} decoded")
    assert cases > 100 and kept > 0
    assert not failures, "\n".join(failures[:10])
