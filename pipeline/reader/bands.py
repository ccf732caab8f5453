"""Images of any depth and band count (TIFF, DICOM, 16-bit PNG, raw arrays) to what `make_dataset`
asks for: `dtype=`, `channels=None` (every band) and `bands=[...]`. TensorFlow + core only.

Photo datasets never come here: `PixelOutput.general` is False for them (uint8, 3 channels,
records TensorFlow's decode_image reads), and pipeline/reader/decode.py keeps its fused JPEG path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

import tensorflow as tf

from core import raw_pixels, schema
from pipeline.reader.crops import CropSettings, crop_window

__all__ = [
    "GENERAL_KEYS",
    "PixelOutput",
    "decode_any",
    "pixel_output",
    "pixel_output_of_info",
]

# The dtypes make_dataset returns: photos' uint8, and the stored depth of 16-bit and float data.
_OUTPUT_DTYPES = (tf.uint8, tf.uint16, tf.float32)
# Layout key of records that hold 8-bit samples TensorFlow decodes (JPEG, PNG, GIF, BMP, WebP).
_PHOTO_DTYPES = ("uint8", "uint16")  # uint16: 16-bit PNG, which decode_image also reads
_PHOTO_MAX_CHANNELS = 4
# A PNG's first bytes, and where its IHDR chunk's bit depth sits (after the signature, the
# chunk's length and type, width and height).
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_DEPTH_AT = 24
_PADDING = b"\0" * (_PNG_DEPTH_AT + 1)
# 8-bit samples as 16-bit: 0..255 onto the whole 0..65535 (257 = 65535 / 255).
_UINT8_TO_UINT16 = 257.0
# Features the general path parses besides image/encoded.
GENERAL_KEYS = (schema.FORMAT, schema.HEIGHT, schema.WIDTH, schema.CHANNELS, schema.DTYPE)


@dataclasses.dataclass(frozen=True)
class PixelOutput:
    """What each image becomes, resolved once from the arguments and the split's layouts."""

    dtype: tf.DType = tf.uint8
    channels: int = 3  # the output's band count (static)
    bands: tuple[int, ...] | None = None  # the bands picked, in order
    every_band: bool = False  # channels=None: every band as stored
    general: bool = False  # records need this module's path (else the photo path)
    raw_dtypes: tuple[str, ...] = ("uint8",)  # image/dtype values raw records may have


def _layouts(split_info: dict) -> list[tuple[str, int]] | None:
    """dataset_info.json's pixel_layouts as (dtype, channels); None when not recorded."""
    layouts = split_info.get("pixel_layouts")
    if layouts is None:
        return None
    return [schema.pixel_layout_parts(key) for key in layouts]


def pixel_output(
    split_info: dict,
    where: str,
    dtype: tf.DType | str = tf.uint8,
    channels: int | None = 3,
    bands: Sequence[int] | None = None,
) -> PixelOutput:
    """Resolve make_dataset's dtype/channels/bands against a split's pixel layouts.

    `where` names the split in errors. `bands` decides the band count when given.

    Raises:
        ValueError: an unsupported dtype or channels value, bands the images do not have, or
            channels=None on a split whose images differ in band count.
    """
    dtype = tf.as_dtype(dtype)
    if dtype not in _OUTPUT_DTYPES:
        raise ValueError(f"dtype must be tf.uint8, tf.uint16 or tf.float32, got {dtype.name}")
    if channels not in (3, None):
        raise ValueError(
            f"channels must be 3 or None (every band), got {channels!r}; "
            "pick other bands with bands=[...]"
        )
    layouts = _layouts(split_info)
    counts = sorted({c for _, c in layouts or ()})
    if bands is not None:
        bands = _checked_bands(bands, counts, where)
    out_channels = len(bands) if bands else 3
    if channels is None and bands is None:
        out_channels = _one_band_count(counts, layouts is None, where)
    # Unrecorded layouts: a dataset from before TIFF and DICOM were converted, photos only.
    photo = layouts is None or all(
        d in _PHOTO_DTYPES and c <= _PHOTO_MAX_CHANNELS for d, c in layouts
    )
    general = dtype != tf.uint8 or channels is None or bands is not None or not photo
    return PixelOutput(
        dtype=dtype,
        channels=out_channels,
        bands=bands,
        every_band=channels is None and bands is None,
        general=general,
        raw_dtypes=_raw_dtypes(layouts),
    )


def pixel_output_of_info(info: dict) -> PixelOutput:
    """The default output (uint8, 3 channels) for records of any split of `info`."""
    layouts: dict = {}
    for split_info in (info.get("splits") or {}).values():
        if split_info.get("pixel_layouts") is None:
            return pixel_output({}, "the dataset")
        layouts.update(split_info["pixel_layouts"])
    return pixel_output({"pixel_layouts": layouts}, "the dataset")


def _checked_bands(bands: Sequence[int], counts: list[int], where: str) -> tuple[int, ...]:
    bands = tuple(int(b) for b in bands)
    if not bands or min(bands) < 0:
        raise ValueError(f"bands must be a non-empty list of band indices >= 0, got {list(bands)}")
    if counts and max(bands) >= counts[0]:
        raise ValueError(
            f"bands={list(bands)} picks band {max(bands)}, but {where} has images of "
            f"{counts[0]} band(s) (indices start at 0); pick bands below {counts[0]}"
        )
    return bands


def _one_band_count(counts: list[int], unknown: bool, where: str) -> int:
    """channels=None: the split's one band count."""
    if unknown:
        raise ValueError(
            f"channels=None: {where} does not record its images' band counts (converted by an "
            "older imgrec); convert it again, or pass channels=3 or bands=[...]"
        )
    if len(counts) != 1:
        raise ValueError(
            f"channels=None: {where} has images of {counts} bands, and a batch needs one count; "
            "pass channels=3 or bands=[...] to pick the same bands from every image"
        )
    return counts[0]


def _raw_dtypes(layouts: list[tuple[str, int]] | None) -> tuple[str, ...]:
    """image/dtype values a raw record of the split may have (every known one if unrecorded)."""
    if layouts is None:
        return tuple(name for name in raw_pixels.RAW_DTYPES if name)
    return tuple(sorted({"uint8"} | {d for d, _ in layouts}))


class AnySettings(CropSettings, Protocol):
    """What the general path reads from the reader's config."""

    pixels: PixelOutput


def decode_any(config: AnySettings, encoded: tf.Tensor, seed, window, parts, resize=True):
    """One record -> cropped, resized [H, W, C] of `config.pixels.dtype` (augmented in training).

    `parts` is (image/format, height, width, channels, image/dtype) of the record. Samples are
    converted to the output dtype as tf.image.convert_image_dtype converts them (wider integers
    keep their high bits: uint16 -> uint8 its high byte; floats are fractions of the range),
    except uint8 -> uint16, scaled by 257; tf.float32 returns the stored values unscaled.
    Crop, flip and bilinear resize run in float32 on every band.
    """
    out = config.pixels
    image = _source_pixels(out, encoded, parts)
    image.set_shape((None, None, None))  # the band count is known per record only
    crop = window
    if crop is None:
        shape = tf.shape(image)
        crop = crop_window(config, shape[0], shape[1], seed)
    top, left, h, w = crop
    image = tf.slice(image, tf.stack([top, left, 0]), tf.stack([h, w, -1]))
    image = _pick_bands(out, image)
    if config.training:
        flip = tf.random.stateless_uniform([], seed=seed) < 0.5
        image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    if resize:
        image = tf.image.resize(image, config.image_size, method="bilinear")
    if out.dtype != tf.float32:
        image = tf.saturate_cast(tf.round(image), out.dtype)
    image.set_shape((*config.image_size, out.channels) if resize else (None, None, out.channels))
    return image


def _source_pixels(out: PixelOutput, encoded: tf.Tensor, parts) -> tf.Tensor:
    """A record's samples in their own dtype's range, as float32 [h, w, c] scaled to `out`."""
    image_format, height, width, channels, dtype_name = parts
    dtype_name = tf.where(tf.equal(dtype_name, ""), "uint8", dtype_name)

    def encoded_8bit():
        return _scaled(out, tf.io.decode_image(encoded, channels=0, expand_animations=False))

    def encoded_16bit():  # a 16-bit PNG (DICOM, microscopy, --bit_depth 16)
        return _scaled(out, tf.io.decode_png(encoded, channels=0, dtype=tf.uint16))

    def raw(name: str):
        return lambda: _scaled(
            out, raw_pixels.decode_raw_array(encoded, height, width, channels, name)
        )

    is_raw = raw_pixels.is_raw(image_format)
    matches = tf.equal(dtype_name, tf.constant(out.raw_dtypes))
    raw_index = tf.reduce_max(tf.where(matches, tf.range(len(out.raw_dtypes)), -1))
    known = tf.debugging.assert_greater_equal(
        tf.where(is_raw, raw_index, 0),
        0,
        message=f"a raw record's image/dtype is not one of {list(out.raw_dtypes)}",
    )
    deep = tf.logical_or(tf.equal(dtype_name, "uint16"), _is_16bit_png(encoded))
    index = tf.where(is_raw, 2 + raw_index, tf.cast(deep, tf.int32))
    branches = [encoded_8bit, encoded_16bit] + [raw(name) for name in out.raw_dtypes]
    with tf.control_dependencies([known]):
        return tf.switch_case(index, branches)


def _is_16bit_png(encoded: tf.Tensor) -> tf.Tensor:
    """bool: a PNG whose header (IHDR's bit depth, byte 24) says 16-bit samples. A 16-bit PNG
    kept as its own bytes (--bit_depth 16) records no image/dtype, so its header decides."""
    # 25 zero bytes after the head: the slices stay in range for a record of any length.
    head = tf.strings.join([tf.strings.substr(encoded, 0, _PNG_DEPTH_AT + 1), _PADDING])
    return tf.logical_and(
        tf.equal(tf.strings.substr(head, 0, len(_PNG_SIGNATURE)), _PNG_SIGNATURE),
        tf.equal(tf.strings.substr(head, _PNG_DEPTH_AT, 1), b"\x10"),
    )


def _scaled(out: PixelOutput, pixels: tf.Tensor) -> tf.Tensor:
    """Samples as float32 in the output dtype's units (see decode_any)."""
    if out.dtype == tf.float32 or pixels.dtype == out.dtype:
        return tf.cast(pixels, tf.float32)
    if pixels.dtype == tf.uint8 and out.dtype == tf.uint16:
        # 255 -> 65535, as documented: convert_image_dtype multiplies by 256 (255 -> 65280).
        return tf.cast(pixels, tf.float32) * _UINT8_TO_UINT16
    if pixels.dtype in (tf.uint32, tf.uint64):
        # convert_image_dtype's floordiv and saturate_cast have no uint32/uint64 kernels: the
        # same high bits by a shift.
        shift = tf.constant((pixels.dtype.size - out.dtype.size) * 8, pixels.dtype)
        return tf.cast(tf.bitwise.right_shift(pixels, shift), tf.float32)
    return tf.cast(tf.image.convert_image_dtype(pixels, out.dtype, saturate=True), tf.float32)


def _pick_bands(out: PixelOutput, image: tf.Tensor) -> tf.Tensor:
    """The output's bands: `bands`, every band, or three (gray repeated, alpha dropped, the
    first three of more)."""
    have = tf.shape(image)[2]
    if out.bands is not None:
        enough = tf.debugging.assert_less(
            max(out.bands), have, message=f"bands={list(out.bands)}: an image has fewer bands"
        )
        with tf.control_dependencies([enough]):
            return tf.gather(image, list(out.bands), axis=2)
    if out.every_band:
        same = tf.debugging.assert_equal(
            have, out.channels, message=f"channels=None: an image has not {out.channels} bands"
        )
        with tf.control_dependencies([same]):
            return tf.identity(image)
    return raw_pixels.three_bands(image)
