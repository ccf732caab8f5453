"""Boxes in the formats of Keras detection models, from and back to the targets' normalised
(ymin, xmin, ymax, xmax). TensorFlow only."""

from __future__ import annotations

import tensorflow as tf

__all__ = ["BOX_FORMATS", "box_format", "from_box_format"]

# Box formats of KerasHub / KerasCV ("center_xywh" is YOLO's).
BOX_FORMATS = ("yxyx", "xyxy", "xywh", "center_xywh")


def box_format(boxes: tf.Tensor, fmt: str, normalized: bool = True, image_size=None) -> tf.Tensor:
    """Normalised (ymin, xmin, ymax, xmax) boxes in a Keras detection model's format.

    Args:
        boxes: float [..., 4], as the targets hold them.
        fmt: one of BOX_FORMATS: "yxyx", "xyxy", "xywh" (corner and size) or "center_xywh".
        normalized: fractions of the image (KerasCV's "rel_" formats); False: pixels.
        image_size: (height, width) of the image, for pixels.

    Returns:
        float32 [..., 4] in `fmt`.

    Raises:
        ValueError: an unknown format, or pixels without an image size.
    """
    _check_format(fmt, normalized, image_size)
    ymin, xmin, ymax, xmax = tf.unstack(tf.cast(boxes, tf.float32), axis=-1)
    if not normalized:
        height, width = (tf.cast(v, tf.float32) for v in image_size)
        ymin, xmin, ymax, xmax = ymin * height, xmin * width, ymax * height, xmax * width
    parts = {
        "yxyx": (ymin, xmin, ymax, xmax),
        "xyxy": (xmin, ymin, xmax, ymax),
        "xywh": (xmin, ymin, xmax - xmin, ymax - ymin),
        "center_xywh": ((xmin + xmax) / 2, (ymin + ymax) / 2, xmax - xmin, ymax - ymin),
    }[fmt]
    return tf.stack(parts, axis=-1)


def from_box_format(
    boxes: tf.Tensor, fmt: str, normalized: bool = True, image_size=None
) -> tf.Tensor:
    """Boxes of a Keras format back to normalised (ymin, xmin, ymax, xmax): box_format's inverse.

    Args:
        boxes: float [..., 4] in `fmt`.
        fmt: one of BOX_FORMATS.
        normalized: fractions of the image; False: pixels.
        image_size: (height, width) of the image, for pixels.

    Returns:
        float32 [..., 4], normalised (ymin, xmin, ymax, xmax).

    Raises:
        ValueError: an unknown format, or pixels without an image size.
    """
    _check_format(fmt, normalized, image_size)
    a, b, c, d = tf.unstack(tf.cast(boxes, tf.float32), axis=-1)
    ymin, xmin, ymax, xmax = {
        "yxyx": (a, b, c, d),
        "xyxy": (b, a, d, c),
        "xywh": (b, a, b + d, a + c),
        "center_xywh": (b - d / 2, a - c / 2, b + d / 2, a + c / 2),
    }[fmt]
    if not normalized:
        height, width = (tf.cast(v, tf.float32) for v in image_size)
        ymin, xmin, ymax, xmax = ymin / height, xmin / width, ymax / height, xmax / width
    return tf.stack([ymin, xmin, ymax, xmax], axis=-1)


def _check_format(fmt: str, normalized: bool, image_size) -> None:
    if fmt not in BOX_FORMATS:
        raise ValueError(f"unknown box format {fmt!r}: use one of {', '.join(BOX_FORMATS)}")
    if not normalized and image_size is None:
        raise ValueError("boxes in pixels (normalized=False) need image_size=(height, width)")
