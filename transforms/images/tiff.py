"""TIFF: bytes to frames with every band and bit (tifffile), their storage depth, GeoTIFF keys.

tifffile + imagecodecs is the one decoder: it reads every layout the users bring (striped and
tiled; none, LZW, deflate, PackBits, JPEG with YCbCr subsampling, CCITT G3/G4; 1 to 32-bit
integers and floats; planar; BigTIFF; any band count), where Pillow stops at 4 bands of up to
16 bits and at one sample format per mode. What tifffile leaves as stored samples (white-is-zero,
palette indices, CMYK, CIELAB, associated alpha, the Orientation tag) is turned into pixels here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import struct
from typing import NamedTuple

import numpy as np

from core import schema
from core.rejects import Rejected
from transforms.images.array_contract import ArrayImage, ArrayRequest, check_declared
from transforms.images.tiff_window import (
    mask_page,
    shifted_transform,
    valid_fraction,
    window_samples,
)

__all__ = ["TiffWindow", "decode_arrays", "decode_window", "looks_like_tiff"]

# Little- and big-endian classic TIFF, then BigTIFF.
_SIGNATURES = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")

# Decoded bytes one page may take, per --max_pixels pixel: a 4-band 16-bit image at the pixel
# limit. A hyperspectral cube of 200 bands trades pixels for bands within the same memory.
_BYTES_PER_PIXEL = 8

# --frames all: pages stored from one file at most (a microscopy time series has hundreds); a
# crafted IFD chain may declare millions.
_MAX_PAGES = 10_000

# Band counts a PNG holds (gray, gray + alpha, RGB, RGBA); more are stored as raw samples.
_PNG_BANDS = 4

# Raw sample types the reader's tf.io.decode_raw reads, and how other decoded types map to them
# without losing a value (uint32 into int64, half floats into float32, 1-bit into uint8).
_RAW_DTYPES = {
    "bool": "uint8",
    "uint8": "uint8",
    "int8": "int8",
    "uint16": "uint16",
    "int16": "int16",
    "uint32": "int64",
    "int32": "int32",
    "float16": "float32",
    "float32": "float32",
    "float64": "float64",
}

# What tifffile and imagecodecs raise for damaged or unsupported data (imagecodecs' errors are
# RuntimeErrors; tifffile's TiffFileError is a ValueError; a tag of a crafted type makes tifffile
# raise TypeError); anything else is a bug here.
_DECODE_ERRORS = (
    ValueError,
    TypeError,
    RuntimeError,
    NotImplementedError,
    KeyError,
    IndexError,
    EOFError,
    OverflowError,
    ZeroDivisionError,
    struct.error,
)

# TIFF tags read here by number (TIFF 6.0 and the GeoTIFF 1.1 specification).
_ORIENTATION, _SMIN, _SMAX, _INKSET = 274, 340, 341, 332
_GEO_KEY_DIRECTORY = 34735
# GDAL's nodata tag (ASCII: one value for every band, "nan" included).
_GDAL_NODATA = 42113
# SubfileType bits of pages that are no image of their own: reduced resolution (an overview of
# a cloud-optimized GeoTIFF, a thumbnail) and transparency masks.
_REDUCED, _MASK = 1, 4
# Compressions tifffile decodes to RGB itself when the photometric is YCbCr (JPEG flavours).
_JPEG_COMPRESSIONS = (6, 7, 33007, 34892)


def looks_like_tiff(data: bytes) -> bool:
    """Whether `data` starts with a TIFF or BigTIFF header."""
    return data[:4] in _SIGNATURES


@dataclasses.dataclass(frozen=True)
class _Page:
    """One page turned into pixels (colour applied, upright), before the depth rule."""

    pixels: np.ndarray  # [H, W, C]
    bits: int  # significant bits per sample
    value_range: tuple[float, float]  # what the samples are declared to span
    oriented: bool  # the Orientation tag turned the pixels


def decode_arrays(data: bytes, request: ArrayRequest) -> ArrayImage:
    """A TIFF's first page (every full-resolution page with --frames all) as stored frames.

    Up to 4 bands: uint8 (8-bit sources as they are, others scaled from their declared range),
    uint16 with --bit_depth 16 (up to 16-bit unsigned samples as they are, others scaled), and
    floats kept as float32 with --bit_depth 16. More bands: every band, in its own type.
    value_scale/value_offset map stored values back to the source's (source = stored * scale +
    offset); GeoTIFF georeferencing comes as geo/... features.

    Raises:
        Rejected: corrupt, truncated, too_many_pixels, too_small or unsupported_format, naming
            the page and what was missing.
    """
    import tifffile  # Deferred: only the decoder processes that meet a TIFF pay for it.

    try:
        with tifffile.TiffFile(io.BytesIO(data)) as tif:
            pages = _main_pages(tif, refuse_more=request.frames == "all")
            chosen = pages if request.frames == "all" else pages[:1]
            decoded = [_page(page, i, len(data), request) for i, page in enumerate(chosen)]
            geo = _geo_keys(pages[0], request.apply_exif_orientation)
    except Rejected:
        raise
    except MemoryError as e:
        raise Rejected("too_many_pixels", f"TIFF: out of memory decoding ({e})") from e
    except _DECODE_ERRORS as e:
        raise Rejected("corrupt", f"TIFF: {_message(e)}") from e
    frames, scale, offset = _stored(decoded, request.bit_depth)
    reasons = ["exif_orientation"] if decoded[0].oriented else []
    return ArrayImage(frames, len(pages), geo, scale, offset, reasons)


class TiffWindow(NamedTuple):
    """One window of a TIFF's first page, as decode_window returns it."""

    image: ArrayImage  # the window's stored frame and its features (geo/transform its own)
    sides: tuple[int, int]  # the page's (height, width)
    valid: float  # the window's fraction of valid pixels (GDAL's dataset mask)


def decode_window(
    source, y: int, x: int, height: int, width: int, request: ArrayRequest
) -> TiffWindow:
    """One window of a TIFF's first page from `source`, a seekable binary file never read
    whole (only the tiles or strips under the window are decoded). The window is in the file's
    pixel grid, as GDAL reads it (no Orientation tag applied); decode_arrays' depth rule over
    its samples. Raises Rejected as decode_arrays does."""
    import tifffile

    source.seek(0)  # tifffile takes an open file's position as the TIFF's start
    try:
        with tifffile.TiffFile(source) as tif:
            page = _main_pages(tif, refuse_more=False)[0]
            sides = int(page.imagelength), int(page.imagewidth)
            _check_layout(page, "TIFF page 0", tif.filehandle.size)
            samples = window_samples(page, y, x, height, width)
            geo = _geo_keys(page, apply_orientation=False)
            nodata, mask = geo.get(schema.GEO_KEYS["nodata"][0]), mask_page(tif, page)
            valid = valid_fraction(page, mask, samples, nodata, (y, x, height, width))
            decoded = _pixels(page, samples, orientation=1)
    except Rejected:
        raise
    except MemoryError as e:
        raise Rejected("too_many_pixels", f"TIFF: out of memory decoding a window ({e})") from e
    except _DECODE_ERRORS as e:
        raise Rejected("corrupt", f"TIFF: {_message(e)}") from e
    key = schema.GEO_KEYS["transform"][0]
    if key in geo:
        geo[key] = json.dumps(shifted_transform(json.loads(geo[key]), y, x))
    frames, scale, offset = _stored([decoded], request.bit_depth)
    return TiffWindow(ArrayImage(frames, 1, geo, scale, offset, []), sides, valid)


def _message(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def _main_pages(tif, refuse_more: bool) -> list:
    """The full-resolution pages, in file order (overviews, thumbnails and masks left out), up
    to _MAX_PAGES; with `refuse_more`, a file with more is refused."""
    pages, offsets = [], set()
    for page in tif.pages:
        if page.offset in offsets:  # a crafted IFD chain that points back: the chain ends
            break
        offsets.add(page.offset)
        if not int(page.subfiletype) & (_REDUCED | _MASK):
            pages.append(page)
        if len(pages) > _MAX_PAGES:
            break
    if not pages:
        raise Rejected("corrupt", "the TIFF has no image page (no IFD with image data)")
    if len(pages) > _MAX_PAGES and refuse_more:
        raise Rejected(
            "too_many_pixels",
            f"the TIFF has more than {_MAX_PAGES} pages; --frames all stores at most that many",
        )
    return pages[:_MAX_PAGES]


def _page(page, index: int, size: int, request: ArrayRequest) -> _Page:
    """One page decoded, its colour turned into pixels, upright."""
    _check_page(page, index, size, request)
    orientation = _tag_int(page, _ORIENTATION, 1) if request.apply_exif_orientation else 1
    return _pixels(page, _samples(page, index), orientation)


def _pixels(page, samples: np.ndarray, orientation: int) -> _Page:
    """Samples (a whole page's or a window's) turned into pixels, upright by `orientation`."""
    pixels, bits = _colour(page, samples)
    if pixels.dtype == np.float16:
        pixels = pixels.astype(np.float32)
    if pixels.dtype.kind == "b":
        pixels, bits = pixels.astype(np.uint8), 1
    value_range = _declared_range(page, pixels, bits)
    oriented = _orient(pixels, orientation)
    return _Page(oriented, bits, value_range, oriented is not pixels)


def _tag_int(page, code: int, default: int) -> int:
    """A SHORT/LONG tag's value, or `default` where it is absent or of another type."""
    value = page.tags.valueof(code, default)
    return int(value) if isinstance(value, (int, np.integer)) else default


def _tag_numbers(page, code: int) -> tuple[float, ...]:
    """A numeric tag's values (one per sample, or one), or () where absent or not numbers."""
    value = page.tags.valueof(code)
    values = value if isinstance(value, (tuple, list)) else (value,)
    if value is None or not all(isinstance(v, (int, float, np.number)) for v in values):
        return ()
    return tuple(float(v) for v in values)


def _check_page(page, index: int, size: int, request: ArrayRequest) -> None:
    """Refuse what cannot be decoded, before any pixel buffer exists."""
    what = f"TIFF page {index}"
    height, width = int(page.imagelength), int(page.imagewidth)
    check_declared(width, height, request, f"{what} header")
    if page.dtype is None:
        _check_layout(page, what, size)
    decoded = int(np.prod(page.shape, dtype=np.int64)) * np.dtype(page.dtype).itemsize
    if decoded > request.max_pixels * _BYTES_PER_PIXEL:
        raise Rejected(
            "too_many_pixels",
            f"{what} ({width}x{height}, {page.samplesperpixel} bands) decodes to {decoded} "
            f"bytes > {_BYTES_PER_PIXEL} bytes per --max_pixels pixel "
            f"({request.max_pixels * _BYTES_PER_PIXEL}); raise --max_pixels to keep it "
            "whole, or cut it into chips with --tile 1024 (docs/tiles.md)",
        )
    _check_layout(page, what, size)


def _check_layout(page, what: str, size: int) -> None:
    """Refuse a page whose samples no installed decoder reads, or whose data leaves the file."""
    import tifffile

    if page.dtype is None:
        raise Rejected(
            "unsupported_format",
            f"{what}: {page.bitspersample}-bit samples of format "
            f"{int(page.sampleformat)} have no numpy type",
        )
    offsets, counts = page.dataoffsets, page.databytecounts
    if not offsets or not any(counts):
        raise Rejected("corrupt", f"{what} has no image data (no strip or tile offsets)")
    end = max(o + c for o, c in zip(offsets, counts, strict=False))
    if end > size:
        raise Rejected(
            "truncated", f"{what}'s image data ends at byte {end}; the file has {size} bytes"
        )
    if page.compression not in tifffile.TIFF.DECOMPRESSORS:
        name = getattr(page.compression, "name", "unknown")
        raise Rejected(
            "unsupported_format",
            f"{what}: TIFF compression {int(page.compression)} ({name}) has no decoder "
            "installed (tifffile with imagecodecs); convert the file before the run",
        )
    if int(page.imagedepth) > 1:
        raise Rejected("unsupported_format", f"{what}: volumetric tiles (ImageDepth > 1)")
    if page.is_subsampled and page.compression not in _JPEG_COMPRESSIONS:
        raise Rejected(
            "unsupported_format",
            f"{what}: YCbCr chroma subsampling without JPEG compression "
            "(no installed decoder converts it)",
        )


def _samples(page, index: int) -> np.ndarray:
    """The page's samples as [H, W, S], the stored sample type kept."""
    array = page.asarray()
    axes = page.axes
    if set(axes) - set("SYX") or array.ndim != len(axes):
        raise Rejected("unsupported_format", f"TIFF page {index}: sample axes {axes!r}")
    if "S" not in axes:
        array, axes = array[..., None], axes + "S"
    array = np.moveaxis(array, [axes.index(a) for a in "YXS"], [0, 1, 2])
    return array.astype(array.dtype.newbyteorder("="), copy=False)  # big-endian files too


def _stored(pages: list[_Page], bit_depth: int) -> tuple[list[np.ndarray], float, float]:
    """(frames, value_scale, value_offset): the pages at their stored depth, one rule for all
    pages of a file (a multi-page file shares one range: the union of its pages')."""
    first = pages[0]
    pixels, bits = first.pixels, first.bits
    lo = min(p.value_range[0] for p in pages)
    hi = max(p.value_range[1] for p in pages)
    kind = pixels.dtype.kind
    if pixels.shape[2] > _PNG_BANDS:  # every band and bit kept, as a type the reader reads
        name = _RAW_DTYPES.get(pixels.dtype.name)
        if name is None:
            raise Rejected(
                "unsupported_format",
                f"TIFF: {pixels.shape[2]} bands of {pixels.dtype.name} samples (the reader "
                f"reads {', '.join(sorted(set(_RAW_DTYPES.values())))})",
            )
        return [p.pixels.astype(name, copy=False) for p in pages], 1.0, 0.0
    if kind == "f" and bit_depth == 16:  # float32 and float64 as they are (half: float32)
        return [p.pixels for p in pages], 1.0, 0.0
    if kind == "u" and bits == 8 and pixels.dtype == np.uint8:
        return [p.pixels for p in pages], 1.0, 0.0
    if kind == "u" and 8 < bits <= 16 and bit_depth == 16 and pixels.dtype.itemsize <= 2:
        return [p.pixels.astype(np.uint16, copy=False) for p in pages], 1.0, 0.0
    target = np.uint16 if bit_depth == 16 and bits > 8 else np.uint8
    scale = (hi - lo) / np.iinfo(target).max
    if not scale <= float(np.finfo(np.float32).max):  # image/value_scale is a float32
        span = f"TIFF: samples span {lo:g} to {hi:g}, too wide to map to {target.__name__} and back"
        raise Rejected("unsupported_format", f"{span}; --bit_depth 16 keeps float samples")
    frames = [_scale(p.pixels, (lo, hi), target) for p in pages]
    return frames, scale, lo


def _declared_range(page, pixels: np.ndarray, bits: int) -> tuple[float, float]:
    """The range the samples are declared to span: SMin/SMaxSampleValue where present, else
    the bit depth's (integers) or the data's own (floats), widened to the data so that
    nothing is clipped."""
    finite = pixels if pixels.dtype.kind != "f" else pixels[np.isfinite(pixels)]
    data_lo = float(finite.min()) if finite.size else 0.0
    data_hi = float(finite.max()) if finite.size else 0.0
    if pixels.dtype.kind == "u":
        lo, hi = 0.0, float(2**bits - 1)
    elif pixels.dtype.kind == "i":
        lo, hi = float(-(2 ** (bits - 1))), float(2 ** (bits - 1) - 1)
    else:
        lo, hi = data_lo, data_hi
    smin, smax = _tag_numbers(page, _SMIN), _tag_numbers(page, _SMAX)
    if smin and smax and np.isfinite(min(smin)) and np.isfinite(max(smax)):
        if min(smin) < max(smax):
            lo, hi = float(min(smin)), float(max(smax))
    lo, hi = min(lo, data_lo), max(hi, data_hi)
    return (lo, hi) if hi > lo else (lo, lo + 1.0)


def _scale(pixels: np.ndarray, value_range: tuple[float, float], dtype) -> np.ndarray:
    """Linear map of value_range onto dtype's whole range, rounded; NaN becomes 0."""
    lo, hi = value_range
    top = np.iinfo(dtype).max
    # float32 holds every integer of up to 24 bits exactly; wider samples need float64.
    wide = pixels.dtype.itemsize > 2 or pixels.dtype.kind == "f"
    with np.errstate(invalid="ignore"):  # a signalling NaN: a quiet one, 0 below
        work = pixels.astype(np.float64 if wide else np.float32)
    work = (work - lo) * (top / (hi - lo))
    # The range covers the data, so the clip only absorbs rounding (and infinities).
    np.clip(np.nan_to_num(work, nan=0.0), 0, top, out=work)
    return np.rint(work).astype(dtype)


# ----------------------------------------------------------------------------- colour
def _colour(page, samples: np.ndarray) -> tuple[np.ndarray, int]:
    """Samples to pixels by the page's photometric; (pixels, bits per sample of the result)."""
    photometric = int(page.photometric)
    bits = int(page.bitspersample)
    if photometric == 0:  # WhiteIsZero
        return _invert(samples, bits), bits
    if photometric == 3:
        return _palette(page, samples), 8
    if photometric == 5 and samples.shape[2] - len(page.extrasamples) == 4:
        if _tag_int(page, _INKSET, 1) == 1:  # CMYK; other ink sets stay separate bands
            return _cmyk_to_rgb(samples, bits), bits
    if photometric == 6 and page.compression not in _JPEG_COMPRESSIONS:
        raise Rejected(
            "unsupported_format", "TIFF: YCbCr samples without JPEG compression (not converted)"
        )
    if photometric in (8, 9):  # CIELab, ICCLab
        return _lab_to_rgb(samples, bits, icc=photometric == 9), 16 if bits > 8 else 8
    extras = [int(e) for e in page.extrasamples]
    if extras and extras[0] == 1 and samples.dtype.kind == "u":  # associated alpha
        return _unpremultiply(samples, samples.shape[2] - len(extras), bits), bits
    return samples, bits


def _invert(samples: np.ndarray, bits: int) -> np.ndarray:
    if samples.dtype.kind == "b":
        return ~samples
    if samples.dtype.kind == "u":
        return (2**bits - 1) - samples
    return -samples  # signed and float white-is-zero: the same order reversed


def _palette(page, samples: np.ndarray) -> np.ndarray:
    """Palette indices to 8-bit RGB (TIFF colour maps are 16-bit; 8-bit ones are taken as is)."""
    colormap = page.colormap
    usable = isinstance(colormap, np.ndarray) and colormap.ndim == 2 and len(colormap) == 3
    if not usable or samples.shape[2] != 1 or samples.dtype.kind not in "ub":
        raise Rejected("corrupt", "TIFF: palette image without a usable colour map")
    indices = samples[..., 0].astype(np.intp)
    if indices.size and int(indices.max()) >= colormap.shape[1]:
        raise Rejected(
            "corrupt",
            f"TIFF: palette index {int(indices.max())} beyond the "
            f"{colormap.shape[1]}-entry colour map",
        )
    # The top byte, as libtiff reads a 16-bit map (and Pillow writes one: value << 8).
    table = colormap if colormap.max() < 256 else colormap >> 8
    return table.astype(np.uint8).T[indices]


def _cmyk_to_rgb(samples: np.ndarray, bits: int) -> np.ndarray:
    """Ink to light, per channel: R = (1 - C)(1 - K); extra samples (alpha) kept after RGB."""
    top = 1.0 if samples.dtype.kind == "f" else float(2**bits - 1)
    ink = samples[..., :4].astype(np.float64)
    rgb = (top - ink[..., :3]) * (top - ink[..., 3:4]) / top
    if samples.dtype.kind != "f":
        rgb = np.rint(rgb)
    return np.concatenate([rgb.astype(samples.dtype), samples[..., 4:]], axis=2)


def _unpremultiply(samples: np.ndarray, alpha_at: int, bits: int) -> np.ndarray:
    """Associated (premultiplied) alpha, sample `alpha_at`, to the straight alpha a PNG holds."""
    top = 2**bits - 1
    colour = samples[..., :alpha_at].astype(np.float64)
    alpha = samples[..., alpha_at : alpha_at + 1].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        straight = np.where(alpha > 0, np.rint(colour * top / alpha), 0)
    straight = np.clip(straight, 0, top).astype(samples.dtype)
    return np.concatenate([straight, samples[..., alpha_at:]], axis=2)


# CIE XYZ of the D65 white point (TIFF's CIELab default) and XYZ -> linear sRGB (IEC 61966-2-1).
_D65 = np.array([0.95047, 1.0, 1.08883])
_XYZ_TO_SRGB = np.array(
    [
        [3.2404542, -1.5371385, -0.4985314],
        [-0.9692660, 1.8760108, 0.0415560],
        [0.0556434, -0.2040259, 1.0572252],
    ]
)


def _lab_to_rgb(samples: np.ndarray, bits: int, icc: bool) -> np.ndarray:
    """CIELab (signed a*, b*) or ICCLab (a*, b* offset by half the range) to sRGB in the same
    depth (8 or 16 bits); extra samples (alpha) kept after RGB."""
    if samples.shape[2] < 3 or samples.dtype.kind not in "ui":
        raise Rejected("unsupported_format", f"TIFF: Lab with {samples.shape[2]} samples")
    wide = bits > 8
    top = 65535 if wide else 255
    lab = samples[..., :3].astype(np.float64)
    lightness = lab[..., 0] * (100.0 / top)
    if icc:
        ab = lab[..., 1:] - (32768 if wide else 128)
    else:  # the a*, b* samples are two's complement, whatever SampleFormat says
        signed = np.int16 if wide else np.int8
        ab = samples[..., 1:3].astype(signed, copy=False).astype(np.float64)
    ab = ab / 256.0 if wide else ab
    fy = (lightness + 16.0) / 116.0
    f = np.stack([fy + ab[..., 0] / 500.0, fy, fy - ab[..., 1] / 200.0], axis=-1)
    xyz = np.where(f > 6.0 / 29.0, f**3, (f - 4.0 / 29.0) * 3.0 * (6.0 / 29.0) ** 2) * _D65
    linear = np.clip(xyz @ _XYZ_TO_SRGB.T, 0.0, 1.0)
    srgb = np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * np.power(linear, 1 / 2.4) - 0.055)
    rgb = np.rint(srgb * top).astype(np.uint16 if wide else np.uint8)
    extra = samples[..., 3:].astype(rgb.dtype)
    return np.concatenate([rgb, extra], axis=2)


# ----------------------------------------------------------------------------- orientation
def _orient(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """The Orientation tag (the EXIF values 1-8) applied: the upright pixels."""
    turns = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.swapaxes(0, 1),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: a.swapaxes(0, 1)[::-1, ::-1],
        8: lambda a: np.rot90(a, 1),
    }
    turn = turns.get(orientation)
    return pixels if turn is None else turn(pixels)


# Stored pixel (col', row') -> source pixel (col, row) in corner coordinates, per Orientation,
# as (a, b, c, d, e, f): col = a*col' + b*row' + c*W, row = d*col' + e*row' + f*H (W, H: the
# source's sides). Composed with the source's geotransform, so georeferencing follows _orient.
_ORIENT_AFFINE = {
    1: (1, 0, 0, 0, 1, 0),
    2: (-1, 0, 1, 0, 1, 0),
    3: (-1, 0, 1, 0, -1, 1),
    4: (1, 0, 0, 0, -1, 1),
    5: (0, 1, 0, 1, 0, 0),
    6: (0, 1, 0, -1, 0, 1),
    7: (0, -1, 1, -1, 0, 1),
    8: (0, -1, 1, 1, 0, 0),
}


# ----------------------------------------------------------------------------- GeoTIFF
def _geo_keys(page, apply_orientation: bool) -> dict[str, int | str]:
    """GeoTIFF georeferencing as Example values (empty for a TIFF without GeoTIFF tags).

    geo/crs ("EPSG:32633", or the citation), geo/epsg (0 when user-defined), geo/transform
    (GDAL's six geotransform numbers, JSON: x = t0 + col*t1 + row*t2, y = t3 + col*t4 + row*t5,
    corner coordinates of the stored pixels), geo/raster_type (area|point), geo/keys (every
    GeoKey and model tag, JSON). Strings keep the doubles exactly.
    """
    if not page.is_geotiff:
        return {}
    directory = page.tags.valueof(_GEO_KEY_DIRECTORY)
    if not isinstance(directory, tuple) or len(directory) < 4 + 4 * int(directory[3]):
        raise Rejected("corrupt", "TIFF: the GeoKeyDirectory is shorter than its key count")
    tags = page.geotiff_tags
    if not tags:
        return {}
    keys = {str(k): _plain(v) for k, v in tags.items()}
    epsg = _epsg(keys)
    citation = keys.get("PCSCitationGeoKey") or keys.get("GTCitationGeoKey") or ""
    raster_type = {1: "area", 2: "point"}.get(keys.get("GTRasterTypeGeoKey"), "")
    values: dict[str, int | str] = {
        "crs": f"EPSG:{epsg}" if epsg else str(citation),
        "epsg": epsg,
        "raster_type": raster_type,
        "keys": json.dumps(keys, sort_keys=True),
    }
    nodata = page.tags.valueof(_GDAL_NODATA)
    if isinstance(nodata, str) and nodata.strip():
        values["nodata"] = nodata.strip()
    transform = _geotransform(keys)
    if transform is not None:
        orientation = _tag_int(page, _ORIENTATION, 1) if apply_orientation else 1
        transform = _reoriented(transform, orientation, page.imagewidth, page.imagelength)
        values["transform"] = json.dumps(transform)
    return {schema.GEO_KEYS[name][0]: value for name, value in values.items()}


def _plain(value):
    """A GeoKey value as JSON: enums as their code, arrays as lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (int, np.integer)):  # IntEnum codes included
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    return str(value)


def _epsg(keys: dict) -> int:
    """The EPSG code of the projected, else geographic, CRS; 0 if user-defined or absent."""
    for name in ("ProjectedCSTypeGeoKey", "GeographicTypeGeoKey"):
        code = keys.get(name)
        # 32767 is "user-defined"; 0 "undefined".
        if isinstance(code, int) and 0 < code < 32767:
            return code
    return 0


def _geotransform(keys: dict) -> list[float] | None:
    """GDAL's geotransform from ModelTransformation, or one tie point plus the pixel scale."""
    matrix = keys.get("ModelTransformation")
    if isinstance(matrix, list) and len(matrix) == 4 and all(len(r) == 4 for r in matrix):
        (a, b, _, d), (e, f, _, h) = matrix[0], matrix[1]
        return [float(d), float(a), float(b), float(h), float(e), float(f)]
    tie, scale = keys.get("ModelTiepoint"), keys.get("ModelPixelScale")
    if isinstance(tie, list) and tie and isinstance(tie[0], list):
        if len(tie) != 1:
            return None  # several tie points: a warp, left in geo/keys
        tie = tie[0]
    if isinstance(tie, list) and len(tie) == 6 and isinstance(scale, list) and len(scale) >= 2:
        i, j, _, x, y, _ = (float(v) for v in tie)
        sx, sy = float(scale[0]), float(scale[1])
        return [x - i * sx, sx, 0.0, y + j * sy, 0.0, -sy]
    return None


def _reoriented(transform: list[float], orientation: int, width: int, height: int) -> list[float]:
    """The geotransform of the stored (upright) pixels, from the source's."""
    a, b, c, d, e, f = _ORIENT_AFFINE.get(orientation, _ORIENT_AFFINE[1])
    t0, t1, t2, t3, t4, t5 = transform
    col0, row0 = c * width, f * height  # the source pixel of the stored origin
    return [
        t0 + col0 * t1 + row0 * t2,
        a * t1 + d * t2,
        b * t1 + e * t2,
        t3 + col0 * t4 + row0 * t5,
        a * t4 + d * t5,
        b * t4 + e * t5,
    ]
