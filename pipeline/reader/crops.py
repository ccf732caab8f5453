"""The reader's crop-window math: random-resized crop (training), centre crop (evaluation), and
libjpeg's DCT-scaled crop decode. TensorFlow only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import tensorflow as tf

__all__ = ["DEFAULT_CROP_FRACTION", "CropSettings", "crop_window", "decode_and_crop_scaled"]


class CropSettings(Protocol):
    """What the crop reads from the reader's config."""

    training: bool
    image_size: tuple[int, int]
    crop_fraction: float


# Random-resized crop ("Inception" crop), as in Szegedy et al. 2015 and every ImageNet reference
# trainer (TF official models, torchvision RandomResizedCrop): 8%-100% of the area, aspect 3/4-4/3.
_CROP_AREA_RANGE = (0.08, 1.0)
_CROP_ASPECT_RANGE = (3.0 / 4.0, 4.0 / 3.0)
_CROP_MIN_OBJECT_COVERED = 0.1
_CROP_MAX_ATTEMPTS = 10
# Evaluation centre crop: the central 87.5% (224 of 256), the ResNet/Inception convention.
DEFAULT_CROP_FRACTION = 0.875

# JPEG DCT scaling: libjpeg can decode at 1/2, 1/4 or 1/8 size for a fraction of the cost.
_DCT_RATIOS = (1, 2, 4, 8)


def crop_window(config: CropSettings, height: tf.Tensor, width: tf.Tensor, seed: tf.Tensor | None):
    """(top, left, crop_height, crop_width) int32: random-resized crop in training, else centre."""
    height = tf.cast(height, tf.int32)
    width = tf.cast(width, tf.int32)
    if config.training:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.stack([height, width, 3]),
            bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
            seed=seed,
            min_object_covered=_CROP_MIN_OBJECT_COVERED,
            aspect_ratio_range=_CROP_ASPECT_RANGE,
            area_range=_CROP_AREA_RANGE,
            max_attempts=_CROP_MAX_ATTEMPTS,
            use_image_if_no_bounding_boxes=True,
        )
        return begin[0], begin[1], size[0], size[1]
    out_h, out_w = config.image_size
    h_f, w_f = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    # Largest window with the output's aspect ratio, then its central crop_fraction.
    crop_h = tf.minimum(h_f, w_f * out_h / out_w) * config.crop_fraction
    crop_w = tf.minimum(w_f, h_f * out_w / out_h) * config.crop_fraction
    crop_h = tf.clip_by_value(tf.cast(tf.round(crop_h), tf.int32), 1, height)
    crop_w = tf.clip_by_value(tf.cast(tf.round(crop_w), tf.int32), 1, width)
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


def decode_and_crop_scaled(encoded: tf.Tensor, window, image_size: tuple[int, int]) -> tf.Tensor:
    """Fused crop+decode at the largest DCT scale that keeps the crop >= image_size."""
    top, left, h, w = window
    out_h, out_w = image_size
    index = tf.constant(0)
    for i, ratio in enumerate(_DCT_RATIOS[1:], start=1):
        fits = tf.logical_and(h // ratio >= out_h, w // ratio >= out_w)
        index = tf.where(fits, i, index)

    def branch(ratio: int) -> Callable[[], tf.Tensor]:
        # libjpeg's crop window is in scaled coordinates.
        scaled = tf.stack([top // ratio, left // ratio, h // ratio, w // ratio])
        return lambda: tf.io.decode_and_crop_jpeg(encoded, scaled, channels=3, ratio=ratio)

    return tf.switch_case(index, [branch(r) for r in _DCT_RATIOS])
