"""Stored pixels back to the source's units (DICOM modality values) for `--bit_depth 16` records.

A 16-bit record (or a raw record of another depth) stores `image/value_scale` and
`image/value_offset` (core/schema.py): value = stored * scale + offset. For a DICOM these are the
modality LUT's rescale slope and intercept (Hounsfield units for CT), with signed samples shifted
into uint16 (int64 when deeper) by the writer and the offset adjusted for it.
"""

from __future__ import annotations

import tensorflow as tf

from core import raw_pixels, schema

__all__ = ["VALUE_KEYS", "decode_values", "to_values"]

# The features a parse must ask for to map pixels back to values.
VALUE_KEYS = (schema.VALUE_SCALE, schema.VALUE_OFFSET)
# Samples float32 cannot hold exactly (more than 24 bits: a signed 32-bit DICOM is shifted into
# int64 by ~2**31): mapped in float64, so the values, back in range, keep their low bits.
_WIDE = (tf.int32, tf.uint32, tf.int64, tf.uint64, tf.float64)


def to_values(pixels: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
    """float32 values in the source's units from stored pixels [..., H, W, C] and the record's
    (or the batch's [B]) scale and offset."""
    work = tf.float64 if pixels.dtype in _WIDE else tf.float32
    scale = tf.cast(scale, work)
    offset = tf.cast(offset, work)
    rank = tf.rank(pixels)
    # A batch's [B] scale/offset broadcast over each image's H, W, C.
    shape = tf.concat([tf.shape(scale), tf.ones([rank - tf.rank(scale)], tf.int32)], axis=0)
    values = tf.cast(pixels, work) * tf.reshape(scale, shape) + tf.reshape(offset, shape)
    return tf.cast(values, tf.float32)


def decode_values(
    encoded: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor, raw: tuple | None = None
) -> tf.Tensor:
    """One record's pixels as float32 values [H, W, C], mapped by `to_values`.

    Args:
        encoded: image/encoded: a PNG, decoded at its full depth (uint16 for a 16-bit PNG).
        scale, offset: the record's image/value_scale and image/value_offset.
        raw: for a raw record (image/format "raw": samples deeper than 16 bits, e.g. a DICOM's
            uint32 RT dose under --bit_depth 16), its (image/height, image/width,
            image/channels, image/dtype), the dtype a str or bytes (eager: as parsed).
    """
    if raw is None:
        pixels = tf.io.decode_image(encoded, dtype=tf.uint16, expand_animations=False)
    else:
        height, width, channels, dtype = raw
        pixels = raw_pixels.decode_raw_array(encoded, height, width, channels, _dtype_name(dtype))
    return to_values(pixels, scale, offset)


def _dtype_name(dtype) -> str:
    """image/dtype as a str: decode_raw's type is fixed when the op is built."""
    if isinstance(dtype, tf.Tensor):
        dtype = dtype.numpy()
    return dtype.decode() if isinstance(dtype, bytes) else str(dtype)
