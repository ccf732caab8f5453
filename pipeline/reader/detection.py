"""The reader's detection and segmentation tasks: one record to (image, targets), the targets
moved with every crop, flip and resize (pipeline/reader/objects.py). TensorFlow + core only."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from core import schema
from pipeline.reader import objects
from pipeline.reader.decode import decode_image, raw_features, raw_keys

__all__ = ["TASKS", "Detection", "decode_targets", "max_instances_of", "with_task"]

# make_dataset's task: classification keeps today's (images, labels) elements.
TASKS = ("classification", "detection", "segmentation")


@dataclasses.dataclass(frozen=True)
class Detection:
    """`make_dataset(task=Detection(...))`: how the detection or segmentation targets are built
    (task="detection" or "segmentation" takes these defaults).

    max_instances: object slots per image (None: the split's largest count, from
        dataset_info.json; a smaller one keeps each image's largest objects).
    masks: detection: also the instance masks, uint8 [max_instances, H, W].
    min_visible: training: a box keeping less of its area inside the crop is dropped.
    box_format: "yxyx" (Model Garden / Object Detection API order), "xyxy", "xywh" or
        "center_xywh"; `normalized` False gives pixels of the output image.
    ignore_value: the label map's "no class" value, also where a crop pads.
    """

    kind: str = "detection"  # or "segmentation": the targets are the label map
    max_instances: int | None = None
    masks: bool = False
    min_visible: float = objects.MIN_VISIBLE
    box_format: str = "yxyx"
    normalized: bool = True
    ignore_value: int = objects.IGNORE_VALUE

    def __post_init__(self) -> None:
        if self.kind not in ("detection", "segmentation"):
            raise ValueError(f"kind must be 'detection' or 'segmentation', got {self.kind!r}")
        if self.box_format not in objects.BOX_FORMATS:
            raise ValueError(
                f"box_format must be one of {', '.join(objects.BOX_FORMATS)}, "
                f"got {self.box_format!r}"
            )
        if self.max_instances is not None and self.max_instances < 1:
            raise ValueError(f"max_instances must be at least 1, got {self.max_instances}")


def max_instances_of(info: dict, split: str, data_dir: str, detection: Detection) -> int:
    """The object slots per image: the option, else the split's largest count.

    Raises:
        ValueError: the dataset was converted without --annotations.
    """
    annotations = info.get("annotations")
    if not annotations:
        raise ValueError(
            f"{data_dir} has no objects: convert it with --annotations (docs/annotations.md) "
            "to read it with task='detection' or 'segmentation'"
        )
    if detection.max_instances is not None:
        return detection.max_instances
    tally = annotations.get("splits", {}).get(split, {})
    return max(1, int(tally.get("max_per_image", 0)))


def with_task(config, info: dict, split: str, task: str, detection: Detection | None):
    """The reader's `config` with its task; detection's object slots from the split's largest
    count (dataset_info.json `info`)."""
    if task == "classification":
        return dataclasses.replace(config, task=task)
    slots = max_instances_of(info, split, config.data_dir, detection)
    return dataclasses.replace(config, task=task, detection=detection, max_instances=slots)


def decode_targets(config, record: tf.Tensor, seed: tf.Tensor | None):
    """One record -> (image [H, W, C], targets): training crops, flips and resizes image and
    targets together, evaluation resizes keeping the aspect ratio and pads."""
    features = _parse(config, record)
    targets = _targets(config, features)
    if config.training:
        if seed is None:  # no epoch order's seed: fresh randomness
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
        image, targets = _augmented(config, features, targets, seed)
    else:
        size = _stored_size(features)
        image = _decoded(config, features, (0, 0, *size))
        image, targets = objects.resize_with_pad(
            image, targets, config.image_size, config.detection.ignore_value
        )
    return image, _formatted(config, targets)


def _augmented(config, features: dict, targets: dict, seed: tf.Tensor):
    """objects.augment, with the crop window taken from the stored size first, so that a JPEG
    decodes only its window, fused (as the classification reader decodes its crops)."""
    options = config.detection
    crop_seed, flip_seed = objects.split_seed(seed)
    size = _stored_size(features)
    # A label map alone has no object to keep whole: crops of any part of the image.
    covered = 0.1 if config.task == "segmentation" else objects.MIN_OBJECT_COVERED
    window = objects.sample_crop_window(tf.stack([*size, 3]), targets, crop_seed, covered)
    image = _decoded(config, features, window)
    targets = objects.crop_targets(targets, window, size, options.min_visible, options.ignore_value)
    image, targets = objects.random_flip(image, targets, flip_seed)
    image, targets = objects.resize(image, targets, config.image_size)
    return objects.with_size(image, targets, config.image_size, image.shape[-1])


def _stored_size(features: dict) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.cast(features[schema.HEIGHT], tf.int32), tf.cast(features[schema.WIDTH], tf.int32)


def _decoded(config, features: dict, window) -> tf.Tensor:
    """The stored image's `window`, decoded (JPEG: fused), not resized nor flipped."""
    whole = dataclasses.replace(config, training=False, dct_scaling=False)
    return decode_image(
        whole,
        features[schema.ENCODED],
        None,
        window=window,
        raw=raw_features(config, features),
        resize=False,
    )


def _parse(config, record: tf.Tensor) -> dict:
    keys = (schema.ENCODED, schema.HEIGHT, schema.WIDTH) + _raw_keys(config)
    spec = schema.feature_spec(keys=keys)
    if config.task == "segmentation":
        spec |= schema.object_feature_spec((schema.SEGMENTATION,))
    else:
        spec |= schema.object_feature_spec()
    return tf.io.parse_single_example(record, spec)


def _raw_keys(config) -> tuple[str, ...]:
    return tuple(k for k in raw_keys(config) if k not in (schema.HEIGHT, schema.WIDTH))


def _targets(config, features: dict) -> dict:
    if config.task == "segmentation":
        return {objects.SEGMENTATION: objects.parse_segmentation(features)}
    return objects.parse_targets(features, config.max_instances, config.detection.masks)


def _formatted(config, targets: dict) -> dict:
    """Boxes in the asked format; the padding slots' boxes stay zeros."""
    options = config.detection
    if "boxes" in targets and (options.box_format != "yxyx" or not options.normalized):
        boxes = objects.box_format(
            targets["boxes"], options.box_format, options.normalized, config.image_size
        )
        real = tf.sequence_mask(targets["num_instances"], tf.shape(boxes)[0])
        targets["boxes"] = tf.where(real[:, None], boxes, tf.zeros_like(boxes))
    return targets
