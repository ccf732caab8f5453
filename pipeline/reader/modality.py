"""Stored pixels back to the source's units (DICOM modality values) for `--bit_depth 16` records.

A 16-bit record (or a raw record of another depth) stores `image/value_scale` and
`image/value_offset` (core/schema.py): value = stored * scale + offset. For a DICOM these are the
modality LUT's rescale slope and intercept (Hounsfield units for CT), with signed samples shifted
into uint16 by the writer and the offset adjusted for it.
"""

from __future__ import annotations

import tensorflow as tf

from core import schema

__all__ = ["VALUE_KEYS", "decode_values", "to_values"]

# The features a parse must ask for to map pixels back to values.
VALUE_KEYS = (schema.VALUE_SCALE, schema.VALUE_OFFSET)


def to_values(pixels: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
    """float32 values in the source's units from stored pixels [..., H, W, C] and the record's
    (or the batch's [B]) scale and offset."""
    scale = tf.cast(scale, tf.float32)
    offset = tf.cast(offset, tf.float32)
    rank = tf.rank(pixels)
    # A batch's [B] scale/offset broadcast over each image's H, W, C.
    shape = tf.concat([tf.shape(scale), tf.ones([rank - tf.rank(scale)], tf.int32)], axis=0)
    return tf.cast(pixels, tf.float32) * tf.reshape(scale, shape) + tf.reshape(offset, shape)


def decode_values(encoded: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
    """One encoded (PNG) record's pixels as float32 values [H, W, C]: decoded at its full depth
    (uint16 for a 16-bit PNG), then mapped by `to_values`."""
    pixels = tf.io.decode_image(encoded, dtype=tf.uint16, expand_animations=False)
    return to_values(pixels, scale, offset)
