"""Every stored form of a record's image (JPEG, PNG of 8 or 16 bits, raw pixels of any dtype and
band count) as an 8-bit gray or RGB Pillow image the report can thumbnail."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from core import schema

__all__ = ["as_8bit_image", "open_stored", "stored_array"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IHDR_AT = 12  # after the signature and the chunk's length
_BIT_DEPTH_AT = 24  # after IHDR's width and height
_MAX_8BIT = 255
# Pillow reads 16-bit PNGs of more than one channel as 8 bits (each sample's high byte);
# TensorFlow's decoder keeps all 16.
_WIDE_PNG_DEPTH = 16
# The image's first bands shown: one is gray, three are RGB.
_RGB = 3


def open_stored(encoded: bytes, fields: dict, draft_px: int = 0):
    """One record's stored image as a Pillow image of 8 bits per sample.

    8-bit encoded images (JPEG, PNG, ...) are Pillow's own read; a JPEG is decoded at the
    smallest DCT scale still `draft_px` on a side (libjpeg's draft mode), since large photos
    decode several times faster. 16-bit PNGs and raw pixels of any dtype go through
    `as_8bit_image`.

    Args:
        encoded: the record's image/encoded.
        fields: its parsed Example (scan.parse_example): image/format, height, width,
            channels and image/dtype of a raw record.
        draft_px: the smallest side a JPEG may be decoded at; 0 decodes it whole.
    """
    if fields.get(schema.FORMAT) == schema.RAW_FORMAT.encode() or _is_wide_png(encoded):
        return as_8bit_image(stored_array(encoded, fields))
    image = Image.open(io.BytesIO(encoded))
    image.seek(0)
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):  # 16- or 32-bit gray, e.g. a TIFF
        return as_8bit_image(np.asarray(image))
    if draft_px:
        image.draft(None, (draft_px, draft_px))
    return image


def stored_array(encoded: bytes, fields: dict) -> np.ndarray:
    """The samples of a raw record (little-endian, H x W x C of image/dtype; "" is the uint8 of
    --store pixels) or of a 16-bit PNG, as H x W x C at their own depth.

    Raises:
        ValueError: the byte count does not match the record's shape, or its dtype is unknown
            (`imgrec verify` names the record).
    """
    if fields.get(schema.FORMAT) != schema.RAW_FORMAT.encode():
        import tensorflow as tf

        return tf.io.decode_png(encoded, dtype=tf.uint16).numpy()
    height, width = int(fields[schema.HEIGHT]), int(fields[schema.WIDTH])
    channels = int(fields.get(schema.CHANNELS) or 0) or _RGB
    name = (fields.get(schema.DTYPE) or b"uint8").decode()
    try:
        dtype = np.dtype(name).newbyteorder("<")
    except TypeError as e:
        raise ValueError(f"raw pixels of unknown image/dtype {name!r}") from e
    samples = np.frombuffer(encoded, dtype=dtype)
    return samples.reshape(height, width, channels)


def as_8bit_image(array: np.ndarray):
    """An H x W (x C) array as an 8-bit Pillow image: its first three bands as RGB (one or two
    bands: the first as gray, a second being alpha or another band).

    uint8 samples are shown as they are. Any other dtype (16-bit, float, signed) is stretched
    from the minimum to the maximum of the shown bands' finite values to 0..255, one range for
    all three so colours keep their balance: a 12-bit satellite scene or a float map in 0..1
    shows its content instead of a black square, as a viewer's "min-max" stretch does. NaN and
    -inf show as 0, +inf as 255.
    """
    if array.ndim == 2:
        array = array[:, :, None]
    shown = array[:, :, :_RGB] if array.shape[2] >= _RGB else array[:, :, :1]
    if shown.dtype != np.uint8:
        values = shown.astype(np.float64)
        finite = np.isfinite(values)
        low, high = (values[finite].min(), values[finite].max()) if finite.any() else (0.0, 1.0)
        values = np.where(finite, values, np.where(values > 0, high, low))
        span = high - low if high > low else 1.0
        shown = np.clip(np.rint((values - low) * (_MAX_8BIT / span)), 0, _MAX_8BIT).astype(np.uint8)
    if shown.shape[2] == 1:
        return Image.fromarray(np.ascontiguousarray(shown[:, :, 0]))  # L
    return Image.fromarray(np.ascontiguousarray(shown))  # RGB


def _is_wide_png(encoded: bytes) -> bool:
    """A PNG of 16-bit samples (its IHDR says), which Pillow would cut to 8 bits."""
    # The PNG header as transforms/images/headers.py's probe_png reads it (the report's room
    # does not import the converter's): the signature, IHDR first, its bit depth byte.
    return (
        encoded.startswith(_PNG_SIGNATURE)
        and encoded[_IHDR_AT : _IHDR_AT + 4] == b"IHDR"
        and len(encoded) > _BIT_DEPTH_AT
        and encoded[_BIT_DEPTH_AT] == _WIDE_PNG_DEPTH
    )
