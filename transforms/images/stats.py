"""Exact per-channel pixel sums of a decoded image (the inputs of the dataset's mean/std)."""

from __future__ import annotations

import numpy as np
from PIL import Image

__all__: list[str] = []  # package-private: transforms.images.check is the public entry point


def _channel_stats(pixels: np.ndarray) -> tuple:
    """(sum_r, sum_g, sum_b, sumsq_r, sumsq_g, sumsq_b, num_pixels), exact, of uint8 [H, W, 3].

    Pillow's C histogram is much faster than float64 sums on numpy; sums of value and value^2
    follow exactly from the 3x256 counts.
    """
    height, width = pixels.shape[:2]
    pixels = np.ascontiguousarray(pixels)
    hist = Image.frombuffer("RGB", (width, height), pixels, "raw", "RGB", 0, 1).histogram()
    counts = np.asarray(hist, dtype=np.int64).reshape(3, 256)
    values = np.arange(256, dtype=np.int64)
    sums = counts @ values
    sumsq = counts @ (values * values)
    return (*map(float, sums), *map(float, sumsq), int(height * width))
