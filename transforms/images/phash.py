"""Perceptual hash of decoded pixels: a 64-bit DCT pHash that survives resizing, re-encoding,
small crops and brightness changes, so near-copies of one photo land a few bits apart."""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__ = ["HASH_BITS", "phash", "reduction", "to_signed", "to_unsigned"]

HASH_BITS = 64
# The common pHash recipe (as imagehash.phash): a 32x32 grey thumbnail, whose 8x8 lowest DCT
# frequencies, compared to their median, give the 64 bits. 32 keeps the detail a 5 % crop or a
# re-encode moves out of the hash; 8x8 is what fits 64 bits.
_THUMB = 32
_LOW = 8


def _dct_rows() -> np.ndarray:
    """The first _LOW rows of the DCT-II matrix of size _THUMB (scale does not matter: the bits
    compare coefficients with their median)."""
    k = np.arange(_LOW)[:, None]
    n = np.arange(_THUMB)[None, :]
    return np.cos(np.pi * (2 * n + 1) * k / (2 * _THUMB))


_DCT = _dct_rows()
# The hash is of the image reduced by 8 (libjpeg's 1/8 DCT scaling, which inspection's default
# JPEG check decodes at; a box average otherwise), or less where that would leave a short side
# under _THUMB: one definition whichever way the check decoded the pixels.
_REDUCTIONS = (8, 4, 2)
_WEIGHTS = np.left_shift(np.uint64(1), np.arange(HASH_BITS - 1, -1, -1, dtype=np.uint64))


def reduction(height: int, width: int) -> int:
    """How much an image of these sides is reduced before hashing: 8, 4, 2 or 1."""
    side = min(height, width)
    return next((r for r in _REDUCTIONS if side >= r * _THUMB), 1)


def phash(pixels: np.ndarray, height: int, width: int) -> int:
    """The pHash of uint8 pixels [H, W], [H, W, 1], [H, W, 3] or [H, W, 4] (alpha ignored), as a
    signed int64 (the Example's int64; `to_unsigned` gives the 64 bits).

    Args:
        pixels: the image at full size, or already reduced (a JPEG decoded at 1/8 DCT scale);
            what is left of `reduction(height, width)` is done here by box averages.
        height: the full image's height.
        width: the full image's width.

    Returns:
        Bit 63 is the DCT's (0, 0) term; bits run row-major over the 8x8 block, most significant
        first.
    """
    pixels = np.ascontiguousarray(pixels)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    if pixels.ndim == 2:
        grey = Image.fromarray(pixels, "L")
    else:
        grey = Image.fromarray(pixels[:, :, :3], "RGB")
    reduced = max(1, round(height / max(1, pixels.shape[0])))
    rest = max(1, reduction(height, width) // reduced)
    if rest > 1:
        grey = grey.reduce(rest)
    grey = grey.convert("L")
    thumb = np.asarray(grey.resize((_THUMB, _THUMB), Image.LANCZOS), dtype=np.float64)
    low = _DCT @ thumb @ _DCT.T
    bits = (low > np.median(low)).ravel()
    return to_signed(int(_WEIGHTS[bits].sum(dtype=np.uint64)))


def to_signed(value: int) -> int:
    """64 bits as the int64 an Example holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned(value: int) -> int:
    """An int64 pHash back to its 64 bits."""
    return value & 0xFFFF_FFFF_FFFF_FFFF
