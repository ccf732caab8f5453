"""The reader's detection and segmentation tasks: one record to (image, targets), the targets
moved with every crop, flip and resize (pipeline/reader/objects.py). TensorFlow + core only."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from core import schema
from pipeline.reader import box_formats, objects
from pipeline.reader.decode import (
    DECODE_PARALLEL_ITERATIONS,
    decode_image,
    raw_features,
    raw_keys,
)

__all__ = [
    "TASKS",
    "Detection",
    "decode_targets",
    "decode_targets_batch",
    "max_instances_of",
    "with_task",
]

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
        if self.box_format not in box_formats.BOX_FORMATS:
            raise ValueError(
                f"box_format must be one of {', '.join(box_formats.BOX_FORMATS)}, "
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


def decode_targets_batch(config, records: tf.Tensor, seeds: tf.Tensor | None = None):
    """A batch of records -> (images [B, H, W, C], targets {key: [B, ...]}): parsed at once, then
    each image decoded with its targets; one tf.data call per batch, as the classification
    reader's decode_batch."""
    features = tf.io.parse_example(records, _spec(config))
    if config.training and config.task == "detection" and not config.detection.masks:
        return _augmented_boxes(config, features, seeds)
    keys = sorted(features)
    # Per-object lists as ragged rows: tf.map_fn hands each image its own dense vectors.
    elems = tuple(_rows(features[key]) for key in keys)
    if seeds is not None:
        elems += (seeds,)

    def one(e):
        seed = e[len(keys)] if seeds is not None else None
        return decode_targets(config, dict(zip(keys, e[: len(keys)], strict=True)), seed)

    return tf.map_fn(
        one,
        elems,
        fn_output_signature=_signature(config),
        parallel_iterations=DECODE_PARALLEL_ITERATIONS,
    )


def _augmented_boxes(config, features: dict, seeds: tf.Tensor | None):
    """Training with boxes only: each image's crop sampled, decoded, flipped and resized one by
    one, the batch's boxes then moved at once (the same objects functions, on [B, M, 4])."""
    targets = objects.parse_targets(features, config.max_instances)
    heights, widths = _stored_size(features)
    if seeds is None:  # no epoch order's seeds: fresh randomness
        seeds = tf.random.uniform([tf.size(heights), 2], maxval=2**31 - 1, dtype=tf.int32)
    raw = raw_features(config, features)
    elems = (features[schema.ENCODED], heights, widths, targets["boxes"], targets["num_instances"])

    def one(e):
        encoded, height, width, boxes, count, seed, *rest = e
        crop_seed, flip_seed = objects.split_seed(seed)
        boxes = {"boxes": boxes, "num_instances": count}
        window = objects.sample_crop_window(
            tf.stack([height, width, 3]), boxes, crop_seed, objects.MIN_OBJECT_COVERED
        )
        image = _decoded(config, encoded, tuple(rest), window)
        flipped = objects.flip_draw(flip_seed)
        image = tf.cond(flipped, lambda: tf.reverse(image, [1]), lambda: image)
        image, _ = objects.resize(image, {}, config.image_size)
        return (
            objects.with_size(image, {}, config.image_size, image.shape[-1])[0],
            tf.stack(window),
            flipped,
        )

    height, width = config.image_size
    images, windows, flipped = tf.map_fn(
        one,
        elems + (seeds,) + raw,
        fn_output_signature=(
            tf.TensorSpec((height, width, config.pixels.channels), config.pixels.dtype),
            tf.TensorSpec((4,), tf.int32),
            tf.TensorSpec((), tf.bool),
        ),
        parallel_iterations=DECODE_PARALLEL_ITERATIONS,
    )
    options = config.detection
    targets = objects.crop_targets(
        targets, tf.unstack(windows, axis=1), (heights, widths), options.min_visible
    )
    mirrored = objects.flip_targets(targets)["boxes"]
    targets["boxes"] = tf.where(flipped[:, None, None], mirrored, targets["boxes"])
    return images, _formatted(config, targets)


def _rows(values):
    if isinstance(values, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(values)
    return values


def _signature(config) -> tuple:
    """What decode_targets returns for one image, as tf.map_fn needs it spelled out."""
    height, width = config.image_size
    image = tf.TensorSpec((height, width, config.pixels.channels), config.pixels.dtype)
    # Evaluation's resize_with_pad also says where the image lies in the padded frame.
    info = {} if config.training else {"image_info": tf.TensorSpec((4, 2), tf.float32)}
    if config.task == "segmentation":
        return image, {objects.SEGMENTATION: tf.TensorSpec((height, width), tf.uint8), **info}
    slots = config.max_instances
    targets = {
        **info,
        "boxes": tf.TensorSpec((slots, 4), tf.float32),
        "classes": tf.TensorSpec((slots,), tf.int32),
        "is_crowd": tf.TensorSpec((slots,), tf.int32),
        "num_instances": tf.TensorSpec((), tf.int32),
        "num_dropped": tf.TensorSpec((), tf.int32),
    }
    if config.detection.masks:
        targets["masks"] = tf.TensorSpec((slots, height, width), tf.uint8)
    return image, targets


def decode_targets(config, features: dict, seed: tf.Tensor | None):
    """One image's parsed features -> (image [H, W, C], targets): training crops, flips and
    resizes image and targets together, evaluation resizes keeping the aspect ratio and pads."""
    targets = _targets(config, features)
    if config.training:
        if seed is None:  # no epoch order's seed: fresh randomness
            seed = tf.random.uniform([2], maxval=2**31 - 1, dtype=tf.int32)
        image, targets = _augmented(config, features, targets, seed)
    else:
        size = _stored_size(features)
        image = _decoded(
            config, features[schema.ENCODED], raw_features(config, features), (0, 0, *size)
        )
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
    image = _decoded(config, features[schema.ENCODED], raw_features(config, features), window)
    targets = objects.crop_targets(targets, window, size, options.min_visible, options.ignore_value)
    image, targets = objects.random_flip(image, targets, flip_seed)
    image, targets = objects.resize(image, targets, config.image_size)
    return objects.with_size(image, targets, config.image_size, image.shape[-1])


def _stored_size(features: dict) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.cast(features[schema.HEIGHT], tf.int32), tf.cast(features[schema.WIDTH], tf.int32)


def _decoded(config, encoded: tf.Tensor, raw: tuple, window) -> tf.Tensor:
    """The stored image's `window`, decoded (JPEG: fused), not resized nor flipped."""
    whole = dataclasses.replace(config, training=False, dct_scaling=False)
    return decode_image(whole, encoded, None, window=window, raw=raw, resize=False)


def _spec(config) -> dict:
    keys = (schema.ENCODED, schema.HEIGHT, schema.WIDTH) + _raw_keys(config)
    spec = schema.feature_spec(keys=keys)
    if config.task == "segmentation":
        return spec | schema.object_feature_spec((schema.SEGMENTATION,))
    # Only what the targets hold: a record's mask PNGs are most of its object bytes.
    keys = (*schema.OBJECT_BBOX.values(), schema.OBJECT_LABEL, schema.OBJECT_IS_CROWD)
    if config.detection.masks:
        keys += (schema.OBJECT_MASK,)
    return spec | schema.object_feature_spec(keys)


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
        boxes = box_formats.box_format(
            targets["boxes"], options.box_format, options.normalized, config.image_size
        )
        real = tf.sequence_mask(targets["num_instances"], tf.shape(boxes)[-2])
        targets["boxes"] = tf.where(real[..., None], boxes, tf.zeros_like(boxes))
    return targets
