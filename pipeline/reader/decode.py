"""Serialized records to images for the reader: parse, decode (JPEG, PNG/GIF, raw pixels), crop,
resize, flip; a whole batch per call or one example. TensorFlow + core only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import tensorflow as tf

from core import raw_pixels, schema
from pipeline.reader.bands import GENERAL_KEYS, PixelOutput, decode_any
from pipeline.reader.crops import crop_window, decode_and_crop_scaled

__all__ = [
    "DECODE_PARALLEL_ITERATIONS",
    "DecodeSettings",
    "decode_batch",
    "decode_batch_eagerly",
    "decode_example",
    "decode_image",
    "postprocess_fn",
    "raw_features",
    "raw_keys",
    "resize_to_output",
]


class DecodeSettings(Protocol):
    """What decoding reads from the reader's config (pipeline.reader.dataset._Config has it all)."""

    training: bool
    image_size: tuple[int, int]
    crop_fraction: float
    dct_scaling: bool
    extra_features: tuple[str, ...]
    postprocess: Callable | None
    store: str
    pixels: PixelOutput


# Images of one batch decoded at once inside the batch's map call (tf.map_fn iterations).
DECODE_PARALLEL_ITERATIONS = 4


def _parse_batch(config: DecodeSettings, records: tf.Tensor) -> dict:
    keys = (schema.ENCODED, schema.LABEL) + config.extra_features + raw_keys(config)
    if not config.training:
        keys += (schema.HEIGHT, schema.WIDTH)
    return tf.io.parse_example(records, schema.feature_spec(keys=keys))


def _centre_windows(config: DecodeSettings, features: dict) -> tf.Tensor:
    """Windows int [B, 4] (top, left, height, width): the centre crops of the whole batch at once,
    from the sides the converter recorded (it decoded them): saves a header parse and a dozen
    scalar ops per image."""
    return tf.stack(
        crop_window(config, features[schema.HEIGHT], features[schema.WIDTH], None), axis=1
    )


def _all_exact(config: DecodeSettings, windows: tf.Tensor) -> tf.Tensor:
    """Whether every window already has the output's size.

    Then the resize is an identity and is skipped (pixels stored at the size the crop needs,
    e.g. a 256 shorter side cropped to 224): same pixels either way (a bilinear resize at scale
    1 samples each pixel exactly; tested); one check per batch, not a branch per image (a
    tf.cond per image around the resize slows the crops that need it).
    """
    height, width = config.image_size
    return tf.reduce_all(
        tf.logical_and(tf.equal(windows[:, 2], height), tf.equal(windows[:, 3], width))
    )


def decode_batch_eagerly(config: DecodeSettings, records: tf.Tensor):
    """`decode_batch` for evaluation (training=False), run eagerly one image at a time.

    For a few dozen records outside any tf.data pipeline (the report's eval crops): eagerly,
    tf.map_fn runs each image through AutoGraph's converted call and a Python while loop,
    several times the CPU of calling `decode_image` per image. Same ops per image, so the same
    pixels (tests/integration/test_report.py compares them with make_dataset's).
    """
    if config.training:
        raise ValueError("decode_batch_eagerly decodes for evaluation only (training=False)")
    features = _parse_batch(config, records)
    windows = _centre_windows(config, features)
    resize = config.dct_scaling or not bool(_all_exact(config, windows))
    raw = raw_features(config, features)
    images = [
        decode_image(
            config, encoded, None, window=tf.unstack(window), raw=tuple(r[i] for r in raw),
            resize=resize,
        )
        for i, (encoded, window) in enumerate(zip(features[schema.ENCODED], windows, strict=True))
    ]  # fmt: skip
    height, width = config.image_size
    empty = tf.zeros((0, height, width, config.pixels.channels), config.pixels.dtype)
    stacked = tf.stack(images) if images else empty
    return _with_extras(config, stacked, features)


def decode_batch(config: DecodeSettings, records: tf.Tensor, seeds: tf.Tensor | None = None):
    """A batch of records -> (images uint8 [B, H, W, 3], labels int64 [B][, {key: [B]}])."""
    features = _parse_batch(config, records)
    height, width = config.image_size
    # Raw records need their sides (and, mixed with encoded ones, their format) per image.
    raw = raw_features(config, features)
    if config.training:
        elems = (features[schema.ENCODED], seeds) + raw

        def one(e):
            return decode_image(config, e[0], e[1], raw=e[2:])
    else:
        windows = _centre_windows(config, features)
        elems = (features[schema.ENCODED], windows) + raw

        def one(e):
            return decode_image(config, e[0], None, window=tf.unstack(e[1]), raw=e[2:])

    def run(fn):
        return tf.map_fn(
            fn,
            elems,
            fn_output_signature=tf.TensorSpec(
                (height, width, config.pixels.channels), config.pixels.dtype
            ),
            # A few images of the batch in flight: a little faster than one at a time, and more
            # gain nothing.
            parallel_iterations=DECODE_PARALLEL_ITERATIONS,
        )

    if config.training or config.dct_scaling:
        images = run(one)
    else:

        def one_exact(e):
            return decode_image(
                config, e[0], None, window=tf.unstack(e[1]), raw=e[2:], resize=False
            )

        images = tf.cond(_all_exact(config, windows), lambda: run(one_exact), lambda: run(one))
    return _with_extras(config, images, features)


def _with_extras(config: DecodeSettings, images: tf.Tensor, features: dict):
    """(images, labels) or (images, labels, {key: extra}) from the parsed features."""
    labels = features[schema.LABEL]
    if config.extra_features:
        return images, labels, {key: features[key] for key in config.extra_features}
    return images, labels


def decode_example(config: DecodeSettings, record: tf.Tensor, seed: tf.Tensor | None):
    """Parse one record, crop, decode, resize: (image uint8 [H, W, 3], label int64[, extras])."""
    keys = (schema.ENCODED, schema.LABEL) + config.extra_features + raw_keys(config)
    features = tf.io.parse_single_example(record, schema.feature_spec(keys=keys))
    image = decode_image(config, features[schema.ENCODED], seed, raw=raw_features(config, features))
    return _with_extras(config, image, features)


def raw_keys(config: DecodeSettings) -> tuple[str, ...]:
    """Features the raw-pixel path reads besides the encoded bytes (none for encoded datasets)."""
    if config.pixels.general:
        return GENERAL_KEYS
    if config.store == "encoded":
        return ()
    return (schema.HEIGHT, schema.WIDTH) + ((schema.FORMAT,) if config.store == "smart" else ())


def raw_features(config: DecodeSettings, features: dict) -> tuple:
    """(height, width[, is_raw]) for decode_image's `raw` from the parsed `raw_keys` features;
    () for encoded datasets; the general path's parts (bands.decode_any)."""
    if config.pixels.general:
        return tuple(features[key] for key in GENERAL_KEYS)
    if config.store == "encoded":
        return ()
    sides = (features[schema.HEIGHT], features[schema.WIDTH])
    if config.store == "smart":
        return sides + (raw_pixels.is_raw(features[schema.FORMAT]),)
    return sides


def decode_image(
    config: DecodeSettings,
    encoded: tf.Tensor,
    seed: tf.Tensor | None,
    window=None,
    raw=(),
    resize: bool = True,
) -> tf.Tensor:
    """One encoded image -> cropped, resized uint8 [H, W, 3] (augmented in training).

    `window` (top, left, height, width), when known, is the crop; else it is computed from the
    image's own header (random-resized in training, centre otherwise). `raw` is (height, width)
    of raw-pixel records (--store pixels), plus a bool "this one is raw" for --store smart.
    Other depths and band counts go through bands.decode_any (`config.pixels.general`).
    `resize=False` leaves the crop at its own size (e.g. when the caller knows it already has
    the output's).
    """
    if config.pixels.general:
        return decode_any(config, encoded, seed, window, raw, resize)
    height, width = config.image_size

    def raw_crop() -> tf.Tensor:
        return _crop_raw(config, encoded, seed, window, raw)

    def decoded() -> tf.Tensor:
        return tf.cond(
            tf.io.is_jpeg(encoded),
            lambda: _crop_jpeg(config, encoded, seed, window),
            lambda: _crop_other(config, encoded, seed, window),
        )

    # Only decode+crop sits in the branch: a resize inside a tf.cond branch runs slower.
    if config.store == "pixels":
        image = raw_crop()
    elif config.store == "smart":
        image = tf.cond(raw[2], raw_crop, decoded)
    else:
        image = decoded()
    if config.training:
        # The random flip, on the crop before it is resized: the same draw and the same pixels
        # (up to float rounding: bilinear with half-pixel centres is mirror-symmetric) as
        # flipping the output, but it reverses the crop's pixels instead of the output's.
        flip = tf.random.stateless_uniform([], seed=seed) < 0.5
        image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
    if resize:
        image = resize_to_output(image, (height, width))
    # Without the resize the crop's size is the caller's to know (detection: the whole image).
    image.set_shape((height, width, 3) if resize else (None, None, 3))
    return image


def _crop_jpeg(config: DecodeSettings, encoded: tf.Tensor, seed, window) -> tf.Tensor:
    """A JPEG's crop, decoded fused: libjpeg skips the IDCT outside the window and stops after
    its last row (DCT-scaled when `config.dct_scaling`)."""
    crop = window
    if crop is None:
        shape = tf.io.extract_jpeg_shape(encoded)
        crop = crop_window(config, shape[0], shape[1], seed)
    if not config.dct_scaling:
        return tf.io.decode_and_crop_jpeg(encoded, tf.stack(crop), channels=3)
    return decode_and_crop_scaled(encoded, crop, config.image_size)


def _crop_other(config: DecodeSettings, encoded: tf.Tensor, seed, window) -> tf.Tensor:
    """A PNG/GIF/BMP/WebP's crop: the whole image decoded, then sliced."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    crop = window
    if crop is None:
        shape = tf.shape(image)
        crop = crop_window(config, shape[0], shape[1], seed)
    top, left, h, w = crop
    return tf.slice(image, tf.stack([top, left, 0]), tf.stack([h, w, 3]))


def _crop_raw(config: DecodeSettings, encoded: tf.Tensor, seed, window, raw) -> tf.Tensor:
    """A raw-pixel record's crop: no decoder, the stored pixels reshaped, then the same crop as
    an encoded image gets."""
    pixels = raw_pixels.decode_raw_image(encoded, raw[0], raw[1])
    crop = window
    if crop is None:
        crop = crop_window(config, raw[0], raw[1], seed)
    top, left, h, w = crop
    return tf.slice(pixels, tf.stack([top, left, 0]), tf.stack([h, w, 3]))


def resize_to_output(image: tf.Tensor, size: tuple[int, int]) -> tf.Tensor:
    """Bilinear resize of a uint8 crop to `size`, rounded back to uint8."""
    # Float32 pixels: TF's uint8 bilinear kernel converts as it goes, which costs more than a cast.
    image = tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear")
    # Bilinear output stays within [0, 255]: +0.5 and truncate rounds without a clip, cheaper
    # than round + saturate_cast.
    return tf.cast(image + 0.5, tf.uint8)


def postprocess_fn(config: DecodeSettings) -> Callable:
    """Apply the user's per-example (image, label) hook, passing extras through."""
    fn = config.postprocess

    def apply(image, label, *extras):
        image, label = fn(image, label)
        return (image, label, *extras)

    return apply
