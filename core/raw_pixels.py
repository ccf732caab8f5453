"""Raw-pixel records (`--store pixels|smart`, image/format "raw"): bytes -> uint8 [H, W, 3].

The reader's side of transforms/images/store_modes.py. No Beam, no decoder: `decode_raw` is a copy and
the reshape is free, so a raw record costs its read, its parse and the crop + resize.
"""

from __future__ import annotations

import tensorflow as tf

from core import schema

__all__ = [
    "RAW_CHANNELS",
    "RAW_DTYPES",
    "as_photo",
    "three_bands",
    "decode_raw_array",
    "decode_raw_image",
    "is_raw",
    "store_mode",
]

# The writer stores RGB (gray replicated, alpha dropped), like decode_image(channels=3) yields.
RAW_CHANNELS = 3


def store_mode(info: dict) -> str:
    """How the dataset stores images, from dataset_info.json ("encoded" when it does not say)."""
    # Datasets written before --store existed hold encoded images only.
    mode = info.get("store") or "encoded"
    if mode not in schema.STORE_MODES:
        raise ValueError(
            f"dataset_info.json says store={mode!r}; this imgrec reads "
            f"{', '.join(schema.STORE_MODES)}: upgrade imgrec"
        )
    return mode


def is_raw(image_format: tf.Tensor) -> tf.Tensor:
    """bool, per record: image/format says raw pixels."""
    return tf.equal(image_format, schema.RAW_FORMAT)


def decode_raw_image(encoded: tf.Tensor, height: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """One raw record's pixels as uint8 [height, width, 3]; a size mismatch fails naming it."""
    pixels = tf.io.decode_raw(encoded, tf.uint8)
    shape = tf.stack([tf.cast(height, tf.int32), tf.cast(width, tf.int32), RAW_CHANNELS])
    return tf.reshape(pixels, shape)


# image/dtype of raw records of images decoded to arrays (transforms/images/arrays.py) -> the
# TensorFlow dtype decode_raw reads them as ("" is the uint8 of --store pixels records).
RAW_DTYPES = {
    "": tf.uint8,
    "uint8": tf.uint8,
    "uint16": tf.uint16,
    "int8": tf.int8,
    "int16": tf.int16,
    "int32": tf.int32,
    "uint32": tf.uint32,
    "int64": tf.int64,
    "uint64": tf.uint64,
    "float16": tf.float16,
    "float32": tf.float32,
    "float64": tf.float64,
}


# Sample types tf.io.decode_raw has no out_type for (DICOM's 32-bit RT dose and secondary
# captures under --bit_depth 16; 64-bit ones pydicom also decodes) -> the signed type of the
# same width, whose bytes are read and reinterpreted (tf.bitcast keeps every value).
_BITCAST = {"uint32": tf.int32, "uint64": tf.int64}


def decode_raw_array(
    encoded: tf.Tensor, height: tf.Tensor, width: tf.Tensor, channels: tf.Tensor, dtype: str
) -> tf.Tensor:
    """One raw record of an image decoded to arrays as `dtype` [height, width, channels]
    (samples little-endian, as the writer stores them); a size mismatch fails naming it.

    Raises:
        ValueError: `dtype` is no image/dtype this reader knows.
    """
    if dtype not in RAW_DTYPES:
        raise ValueError(f"image/dtype {dtype!r} is unknown here; known: {sorted(RAW_DTYPES)}")
    if dtype in _BITCAST:
        same_width = tf.io.decode_raw(encoded, _BITCAST[dtype], little_endian=True)
        pixels = tf.bitcast(same_width, RAW_DTYPES[dtype])
    else:
        pixels = tf.io.decode_raw(encoded, RAW_DTYPES[dtype], little_endian=True)
    shape = tf.stack(
        [tf.cast(height, tf.int32), tf.cast(width, tf.int32), tf.cast(channels, tf.int32)]
    )
    return tf.reshape(pixels, shape)


def three_bands(image: tf.Tensor) -> tf.Tensor:
    """The 3 bands the reader returns by default from [..., C] bands: gray repeated (C < 3:
    gray, gray + alpha), else the first three (RGB of RGBA, a multi-band image's first three)."""
    have = tf.shape(image)[-1]
    return tf.gather(image, tf.where(have < 3, [0, 0, 0], [0, 1, 2]), axis=-1)


def as_photo(pixels: tf.Tensor) -> tf.Tensor:
    """An array image of any dtype and band count as the reader's default output shows it:
    uint8 (converted as tf.image.convert_image_dtype converts) and `three_bands`."""
    # Unsigned samples scale into uint8 as they are; saturating them would clip uint32 and
    # uint64, which have no clip kernel.
    saturate = not tf.as_dtype(pixels.dtype).is_unsigned
    return three_bands(tf.image.convert_image_dtype(pixels, tf.uint8, saturate=saturate))
