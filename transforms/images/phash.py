"""Perceptual hash of decoded pixels: a 64-bit DCT pHash that survives resizing, re-encoding,
small crops and brightness changes, so near-copies of one photo land a few bits apart."""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["HASH_BITS", "phash", "reduction", "to_signed", "to_unsigned"]

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


def reduction(height: int, width: int) -> int:
    """The DCT scale denominator a JPEG of these sides is hashed at: 8, 4, 2 or 1."""
    side = min(height, width)
    return next((r for r in _REDUCTIONS if side >= r * _MIN_SIDE), 1)


@functools.lru_cache(maxsize=1024)
def _projection(n: int) -> np.ndarray:
    """[_LOW, n]: an axis of n pixels area-averaged into _THUMB cells, then the first _LOW rows
    of the DCT-II over those cells (its scale does not matter: bits compare with the median)."""
    edges = np.arange(_THUMB + 1) * (n / _THUMB)
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


@functools.lru_cache(maxsize=1024)
def _columns(width: int, channels: int) -> np.ndarray:
    """[width * channels, _LOW]: a row's samples to grey (RGB(A): luma; grey + alpha: the grey;
    other bands: their mean), then _projection(width): one product does both."""
    if channels in (3, 4):
        grey = np.concatenate([_LUMA, np.zeros(channels - 3, np.float32)])
    elif channels == 2:
        grey = np.array([1, 0], dtype=np.float32)
    else:
        grey = np.full(channels, 1 / channels, dtype=np.float32)
    columns = _projection(width).T[:, None, :] * grey[None, :, None]
    return columns.reshape(width * channels, _LOW)


def phash(pixels: np.ndarray) -> int:
    """The pHash of pixels [H, W] or [H, W, C] of any dtype (RGB(A) as luma, other bands
    averaged; NaN as 0), as a signed int64 (the Example's int64; `to_unsigned` gives the 64
    bits). The thumbnail's cells are area averages, so an image and its downscale (a JPEG's 1/8
    DCT-scale decode among them) hash alike. Bit 63 is the DCT's (0, 0) term; bits run
    row-major over the 8x8 block, most significant first."""
    height, width = pixels.shape[:2]
    channels = pixels.shape[2] if pixels.ndim == 3 else 1
    if pixels.dtype.kind == "f":
        pixels = np.nan_to_num(pixels)
    rows = pixels.reshape(height, width * channels).astype(np.float32, copy=False)
    low = (_projection(height) @ (rows @ _columns(width, channels))).ravel()
    # A bit is set where its value lies above the middle of the 64: halfway between the
    # 32nd and 33rd in order, so ties at the middle stay unset.
    middle = np.partition(low, (_HALF - 1, _HALF))
    bits = low > (middle[_HALF - 1] + middle[_HALF]) / 2
    return to_signed(int.from_bytes(np.packbits(bits).tobytes(), "big"))


def to_signed(value: int) -> int:
    """64 bits as the int64 an Example holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned(value: int) -> int:
    """An int64 pHash back to its 64 bits."""
    return value & 0xFFFF_FFFF_FFFF_FFFF
