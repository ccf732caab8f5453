"""pipeline/report/thumbs.py: every stored form becomes the 8-bit image the contact sheet shows
(first three bands, one band as gray, wider samples stretched min-max)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import schema
from pipeline.report import thumbs

_RNG = np.random.default_rng(59)


def _fields(array: np.ndarray, fmt: bytes = b"raw", dtype: str | None = None) -> dict:
    h, w, c = array.shape
    return {
        schema.FORMAT: fmt,
        schema.HEIGHT: h,
        schema.WIDTH: w,
        schema.CHANNELS: c,
        schema.DTYPE: (array.dtype.name if dtype is None else dtype).encode(),
    }


def _min_max(array: np.ndarray) -> np.ndarray:
    low, high = float(array.min()), float(array.max())
    return np.rint((array.astype(np.float64) - low) * 255 / (high - low)).astype(np.uint8)


def test_a_multiband_raw_record_shows_its_first_three_bands_stretched():
    cube = _RNG.integers(100, 4000, (7, 9, 13), dtype=np.uint16)
    encoded = cube.astype("<u2").tobytes()
    image = thumbs.open_stored(encoded, _fields(cube))
    assert image.mode == "RGB" and image.size == (9, 7)
    np.testing.assert_array_equal(np.asarray(image), _min_max(cube[:, :, :3]))


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
def test_a_16_bit_png_is_read_at_16_bits(channels):
    # Pillow alone reads a 16-bit colour PNG as each sample's high byte: 0..15 here.
    pixels = _RNG.integers(0, 4096, (5, 6, channels), dtype=np.uint16)
    encoded = tf.io.encode_png(pixels).numpy()
    image = thumbs.open_stored(encoded, _fields(pixels, b"png"))
    shown = pixels[:, :, :3] if channels >= 3 else pixels[:, :, :1]
    assert image.mode == ("RGB" if channels >= 3 else "L")
    np.testing.assert_array_equal(np.asarray(image).reshape(shown.shape), _min_max(shown))


def test_float_samples_stretch_over_the_finite_values():
    values = np.linspace(-1, 3, 20, dtype=np.float32).reshape(4, 5, 1)
    values[0, :3, 0] = (np.nan, np.inf, -np.inf)
    encoded = values.astype("<f4").tobytes()
    shown = np.asarray(thumbs.open_stored(encoded, _fields(values)))
    assert list(shown[0, :3]) == [0, 255, 0]  # NaN, +inf, -inf
    low, high = float(values[0, 3, 0]), 3.0  # the finite values' range
    want = np.rint((values[1:, :, 0].astype(np.float64) - low) * 255 / (high - low))
    np.testing.assert_array_equal(shown[1:], want.astype(np.uint8))
    assert shown[0, 3] == 0 and shown[-1, -1] == 255


def test_uint8_samples_are_shown_as_they_are():
    rgb = _RNG.integers(0, 256, (4, 6, 3), dtype=np.uint8)
    # --store pixels of a photo: no image/dtype.
    image = thumbs.open_stored(rgb.tobytes(), _fields(rgb, dtype=""))
    np.testing.assert_array_equal(np.asarray(image), rgb)
    five = _RNG.integers(0, 256, (4, 6, 5), dtype=np.uint8)
    image = thumbs.open_stored(five.tobytes(), _fields(five))
    np.testing.assert_array_equal(np.asarray(image), five[:, :, :3])


def test_an_8_bit_png_or_jpeg_is_pillows_own_read():
    rgb = _RNG.integers(0, 256, (4, 6, 3), dtype=np.uint8)
    encoded = tf.io.encode_png(rgb).numpy()
    image = thumbs.open_stored(encoded, _fields(rgb, b"png"))
    np.testing.assert_array_equal(np.asarray(image), rgb)
    buf = io.BytesIO()
    Image.new("RGB", (640, 480), (10, 200, 30)).save(buf, "JPEG")
    image = thumbs.open_stored(buf.getvalue(), {schema.FORMAT: b"jpeg"}, draft_px=160)
    assert image.size == (320, 240)  # libjpeg's DCT scaling, not the whole photo


def test_a_raw_record_of_the_wrong_size_raises():
    cube = np.zeros((4, 4, 13), np.uint16)
    with pytest.raises(ValueError):
        thumbs.open_stored(cube.tobytes()[:-2], _fields(cube))
    with pytest.raises(ValueError, match="unknown image/dtype 'uint12'"):
        thumbs.open_stored(cube.tobytes(), _fields(cube, dtype="uint12"))
