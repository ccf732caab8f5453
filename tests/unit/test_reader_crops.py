"""The reader's crop-window math and DCT-scaled crop decode (pipeline/reader/crops.py), exactly:
window arithmetic for the evaluation centre crop, the training window's bounds, and the scale
libjpeg decodes each crop at (mutants bench/MUTATION.md found alive)."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from pipeline.reader.crops import DEFAULT_CROP_FRACTION, crop_window, decode_and_crop_scaled


@dataclass
class _Settings:
    training: bool = False
    image_size: tuple[int, int] = (224, 224)
    crop_fraction: float = DEFAULT_CROP_FRACTION


def _window(settings, h, w, seed=None):
    return tuple(int(v) for v in crop_window(settings, tf.constant(h), tf.constant(w), seed))


@pytest.mark.parametrize(
    "size, image_size, fraction, expected",
    [
        ((256, 256), (224, 224), 0.875, (16, 16, 224, 224)),  # the 224-of-256 convention
        ((256, 384), (224, 224), 0.875, (16, 80, 224, 224)),  # landscape: the square's centre
        ((400, 300), (224, 224), 0.875, (69, 19, 262, 262)),  # round(262.5) = 262 (half to even)
        ((300, 400), (100, 200), 1.0, (50, 0, 200, 400)),  # the output's 1:2 aspect, whole width
        ((300, 400), (200, 100), 1.0, (0, 125, 300, 150)),  # 2:1, whole height
        ((100, 100), (224, 224), 0.5, (25, 25, 50, 50)),
        ((1, 1), (224, 224), 0.875, (0, 0, 1, 1)),  # never an empty window
        ((5, 3), (224, 224), 0.1, (2, 1, 1, 1)),  # at least one pixel: 0.3 rounds to 0
    ],
)
def test_centre_crop_window_is_the_centred_fraction_of_the_output_aspect(
    size, image_size, fraction, expected
):
    settings = _Settings(image_size=image_size, crop_fraction=fraction)
    assert _window(settings, *size) == expected


def test_training_windows_lie_inside_the_image_and_cover_the_area_range():
    settings = _Settings(training=True)
    areas, tops, lefts = [], [], []
    for i in range(200):
        top, left, h, w = _window(settings, 300, 400, tf.constant([i, 7]))
        assert 0 <= top and 0 <= left and h >= 1 and w >= 1
        assert top + h <= 300 and left + w <= 400
        if h * w < 300 * 400:  # a sampled window (not the whole-image fallback)
            assert 3 / 4 - 0.02 <= w / h <= 4 / 3 + 0.02, (h, w)
        areas.append(h * w / (300 * 400))
        tops.append(top)
        lefts.append(left)
    assert max(tops) > 0 and max(lefts) > 0 and lefts != tops  # both offsets vary, independently
    # Inception crop: 8 %-100 % of the area; 200 draws reach both ends of the range.
    assert min(areas) < 0.2 and max(areas) > 0.8 and min(areas) >= 0.05
    assert _window(settings, 300, 400, tf.constant([3, 7])) == _window(
        settings, 300, 400, tf.constant([3, 7])
    )  # stateless: the seed decides


def _jpeg(height: int, width: int, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(height * 1000 + width)
    shape = (height, width, 3) if mode == "RGB" else (height, width)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode).save(buf, "JPEG")
    return buf.getvalue()


@pytest.mark.parametrize(
    "window, expected_shape",
    [
        ((0, 0, 448, 448), (224, 224, 3)),  # exactly 2x on both sides: 1/2 scale
        ((0, 0, 447, 448), (447, 448, 3)),  # one row short of 2x: full scale
        ((0, 0, 300, 300), (300, 300, 3)),  # under 2x: full scale
        ((0, 0, 896, 1000), (224, 250, 3)),  # 4x on both: 1/4 scale
        ((0, 0, 1800, 1800), (225, 225, 3)),  # 8x: 1/8, the smallest scale libjpeg has
        ((16, 32, 448, 900), (224, 450, 3)),  # the shorter side decides
    ],
)
def test_a_crop_is_decoded_at_the_largest_scale_that_keeps_the_output_size(window, expected_shape):
    data = tf.constant(_jpeg(1900, 1900))
    image = decode_and_crop_scaled(data, tuple(tf.constant(v) for v in window), (224, 224))
    assert tuple(image.shape) == expected_shape


def test_the_scaled_crop_is_the_scaled_image_s_crop_in_rgb():
    data = _jpeg(900, 900, "L")  # a grayscale JPEG still comes out with 3 channels
    window = tuple(tf.constant(v) for v in (100, 200, 448, 448))
    image = decode_and_crop_scaled(tf.constant(data), window, (224, 224)).numpy()
    assert image.shape == (224, 224, 3)
    half = tf.io.decode_jpeg(data, channels=3, ratio=2).numpy()
    np.testing.assert_array_equal(image, half[50 : 50 + 224, 100 : 100 + 224])
