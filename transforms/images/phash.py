"""Perceptual hash of decoded pixels: a 64-bit DCT pHash that survives resizing, re-encoding,
small crops and brightness changes, so near-copies of one photo land a few bits apart; and the
hashes of an image's crop windows, which a copy cropped by up to ~5 % hashes close to."""

from __future__ import annotations

import base64
import functools

import numpy as np

__all__ = [
    "CROP_SPANS",
    "CROP_WINDOWS",
    "HASH_BITS",
    "SPANS",
    "pack",
    "phash",
    "phashes",
    "reduction",
    "to_signed",
    "to_unsigned",
    "unpack",
]

HASH_BITS = 64
# The common pHash recipe (as imagehash.phash): a 32x32 grey thumbnail, whose 8x8 lowest DCT
# frequencies, compared to their median, give the 64 bits. 32 keeps the detail a 5 % crop or a
# re-encode moves out of the hash; 8x8 is what fits 64 bits.
_THUMB = 32
_LOW = 8
# A JPEG is hashed from its decode at 1/8 DCT scale (inspection's default check decodes at it),
# or at the largest scale of 1/4, 1/2, 1 leaving a short side of _MIN_SIDE: 16 samples a side
# still hold the 8 lowest frequencies the bits come from (Nyquist), so only JPEGs under 128 px
# are decoded again.
_REDUCTIONS = (8, 4, 2)
_MIN_SIDE = 16
# ITU-R 601 luma, as Pillow's "L" conversion.
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)
_HALF = HASH_BITS // 2
# A copy cut by up to ~5 % of a side moves the 8 lowest frequencies enough to flip more bits than
# the threshold allows, often, in real photos. So each image also hashes windows of itself as
# such a copy would be cut, 3.5 % off a side at one end, the other or both halves: a copy's own
# hash then lies close to one of its original's windows. The cut, the number of spans and the
# margin (hamming.CROP_MARGIN) against other choices: bench/ablations/crop_windows.py.
_CUT = 0.035
CROP_SPANS = ((0.0, 1 - _CUT), (_CUT / 2, 1 - _CUT / 2), (_CUT, 1.0))
SPANS = ((0.0, 1.0), *CROP_SPANS)
CROP_WINDOWS = len(SPANS) ** 2 - 1  # every (rows span, columns span) but the whole image


def reduction(height: int, width: int) -> int:
    """The DCT scale denominator a JPEG of these sides is hashed at: 8, 4, 2 or 1."""
    side = min(height, width)
    return next((r for r in _REDUCTIONS if side >= r * _MIN_SIDE), 1)


@functools.lru_cache(maxsize=1024)
def _projection(n: int, span: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """[_LOW, n]: the `span` (fractions of the axis) of an axis of n pixels area-averaged into
    _THUMB cells, then the first _LOW rows of the DCT-II over those cells (its scale does not
    matter: bits compare with the median)."""
    start, stop = span
    edges = start * n + np.arange(_THUMB + 1) * ((stop - start) * n / _THUMB)
    pixel = np.arange(n)
    overlap = np.clip(
        np.minimum(edges[1:, None], pixel[None, :] + 1) - np.maximum(edges[:-1, None], pixel),
        0,
        None,
    )
    area = overlap / overlap.sum(axis=1, keepdims=True)
    k = np.arange(_LOW)[:, None]
    cell = np.arange(_THUMB)[None, :]
    dct = np.cos(np.pi * (2 * cell + 1) * k / (2 * _THUMB))
    return (dct @ area).astype(np.float32)


@functools.lru_cache(maxsize=256)  # an entry: [side, 32] floats (a large image's, megabytes)
def _columns(width: int, channels: int, spans: tuple) -> np.ndarray:
    """[width * channels, _LOW * len(spans)]: a row's samples to grey (RGB(A): luma; grey +
    alpha: the grey; other bands: their mean), then _projection(width, span) of each span: one
    product does both."""
    if channels in (3, 4):
        grey = np.concatenate([_LUMA, np.zeros(channels - 3, np.float32)])
    elif channels == 2:
        grey = np.array([1, 0], dtype=np.float32)
    else:
        grey = np.full(channels, 1 / channels, dtype=np.float32)
    columns = _stacked(width, spans).T[:, None, :] * grey[None, :, None]
    return columns.reshape(width * channels, _LOW * len(spans))


@functools.lru_cache(maxsize=256)  # an entry: [side, 32] floats (a large image's, megabytes)
def _stacked(n: int, spans: tuple) -> np.ndarray:
    """[_LOW * len(spans), n]: _projection(n, span) of every span, stacked."""
    return np.concatenate([_projection(n, span) for span in spans])


def _rows(pixels: np.ndarray) -> tuple[np.ndarray, int]:
    """(pixels as float32 rows [H, W * C], C): NaN as 0."""
    height, width = pixels.shape[:2]
    channels = pixels.shape[2] if pixels.ndim == 3 else 1
    if pixels.dtype.kind == "f":
        pixels = np.nan_to_num(pixels)
    return pixels.reshape(height, width * channels).astype(np.float32, copy=False), channels


def _bits(low: np.ndarray) -> np.ndarray:
    """[k, 64] DCT terms -> k signed int64 hashes. A bit is set where its value lies above the
    middle of the 64: halfway between the 32nd and 33rd in order, so ties stay unset."""
    # A sort rather than np.partition at the two middle ranks: the same middle, and the choice
    # between them is bench/ablations/phash_median.py's.
    ordered = np.sort(low, axis=1)
    middle = (ordered[:, _HALF - 1] + ordered[:, _HALF]) / 2
    return np.packbits(low > middle[:, None], axis=1).view(">i8").ravel()


def phashes(pixels: np.ndarray, spans: tuple = SPANS) -> tuple[int, tuple[int, ...]]:
    """(the pHash of pixels [H, W] or [H, W, C] of any dtype, the pHashes of its crop windows):
    RGB(A) as luma, other bands averaged, NaN as 0; each a signed int64 (the Example's int64;
    `to_unsigned` gives the 64 bits). The thumbnail's cells are area averages, so an image and
    its downscale (a JPEG's 1/8 DCT-scale decode among them) hash alike. Bit 63 is the DCT's
    (0, 0) term; bits run row-major over the 8x8 block, most significant first. The windows:
    every (rows span, columns span) of `spans` (the whole axis first) but the whole image,
    row-major; one product gives them all."""
    rows, channels = _rows(pixels)
    height, width = pixels.shape[:2]
    low = _stacked(height, spans) @ (rows @ _columns(width, channels, spans))
    n = len(spans)
    windows = low.reshape(n, _LOW, n, _LOW).transpose(0, 2, 1, 3).reshape(n * n, HASH_BITS)
    whole, *crops = _bits(windows).tolist()
    return whole, tuple(crops)


def phash(pixels: np.ndarray) -> int:
    """The pHash of pixels (`phashes`' first)."""
    return phashes(pixels)[0]


def pack(hashes: tuple[int, ...]) -> str:
    """Signed int64 hashes as one short JSON-friendly string (base64 of their big-endian bytes):
    a fifth of a list of ints in memory and in the inspection records."""
    return base64.b64encode(np.array(hashes, dtype=">i8").tobytes()).decode("ascii")


def unpack(packed: str) -> np.ndarray:
    """`pack`'s hashes, unsigned."""
    return np.frombuffer(base64.b64decode(packed), dtype=">u8").astype(np.uint64)


def to_signed(value: int) -> int:
    """64 bits as the int64 an Example holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned(value: int) -> int:
    """An int64 pHash back to its 64 bits."""
    return value & 0xFFFF_FFFF_FFFF_FFFF
