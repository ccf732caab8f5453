"""make_dataset's option groups, their defaults documented once, and the keywords they replaced
(accepted for one release with a DeprecationWarning naming the new place)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence

import tensorflow as tf

from pipeline.reader.crops import DEFAULT_CROP_FRACTION
from pipeline.reader.detection import Detection

__all__ = [
    "DEFAULT_ORDER",
    "DEFAULT_PIXELS",
    "DEFAULT_STORAGE",
    "SHARDS_AT_ONCE",
    "Classification",
    "Order",
    "Pixels",
    "Storage",
    "resolve_options",
]

# Training: shards read at once and merged. Mixes shards that each hold few classes better than
# 16 interleaved + a shuffle buffer, at one read buffer each (docs/training.md, "Shuffle quality").
SHARDS_AT_ONCE = 32


@dataclasses.dataclass(frozen=True)
class Pixels:
    """What each image becomes.

    dtype: tf.uint8 (photos), tf.uint16 (16-bit data exactly; 8-bit scaled by 257) or
        tf.float32 (the stored values, unscaled). uint8 from 16-bit keeps the high byte.
    channels: 3 (gray repeated, alpha dropped, a multi-band image's first three bands) or None:
        every band as stored (the split's images must agree on their count).
    bands: band indices to return, in order (e.g. [3, 2, 1]: a satellite scene's RGB).
    normalize: apply the dataset's tensorflow-transform export to each batch: float32
        `(x - pixel_mean) / pixel_std` (off: uint8 batches are 4x smaller to move).
    crop_fraction: evaluation centre crop, as a fraction of the largest window of the output's
        aspect ratio.
    jpeg_dct_scaling: decode large JPEGs at 1/2, 1/4 or 1/8 scale when the crop stays at least
        the output's size; None decides from the split's typical image size.
    """

    dtype: tf.DType = tf.uint8
    channels: int | None = 3
    bands: Sequence[int] | None = None
    normalize: bool = False
    crop_fraction: float = DEFAULT_CROP_FRACTION
    jpeg_dct_scaling: bool | None = None


@dataclasses.dataclass(frozen=True)
class Order:
    """How records are ordered, repeated and mixed.

    repeat: repeat the split forever (None: when training). Pair with `steps_per_epoch`.
    deterministic: keep element order reproducible (None: not when training; training batches
        always follow the epoch order).
    shuffle_buffer_mb: training: RAM for a window of serialized records permuted together
        (None: none when the split has `shards_at_once` shards or pieces, else 256 MB).
    shards_at_once: training: shards read at once and merged. Keep it, `seed`, the global batch,
        `shuffle_buffer_mb` and `partitions` when resuming: they make the epoch order.
    partitions: training: the epoch order's partitions, each a run of the split's records with
        its own order and its own columns of every global batch; a worker reads only those of
        the columns it takes (None: the largest power of two up to 64, `shards_at_once`, the
        split's pieces and the global batch; never the worker count, so a resume on other
        workers keeps it). Each reads `shards_at_once / partitions` shards at once (one at
        least).
    """

    repeat: bool | None = None
    deterministic: bool | None = None
    shuffle_buffer_mb: float | None = None
    shards_at_once: int = SHARDS_AT_ONCE
    partitions: int | None = None


@dataclasses.dataclass(frozen=True)
class Storage:
    """Where the bytes come from, and what is kept of them.

    cache: True keeps the split's serialized records in RAM after the first epoch (an error if
        they exceed a quarter of physical memory); "auto" only when they fit.
    cache_dir: copy shards here before reading them, each checked against its sha256 (default:
        a folder under the temp dir for stores TensorFlow cannot read, s3://; none otherwise).
    s3_endpoint_url: S3 endpoint for s3:// data (MinIO, Ceph, ...); default: boto3's.
    lease: on a version of a versioned root, hold a lease on it while the dataset lives, so
        `imgrec convert --keep_versions` does not prune it (docs/scheduling.md).
    """

    cache: bool | str = False
    cache_dir: str | None = None
    s3_endpoint_url: str | None = None
    lease: bool = True


@dataclasses.dataclass(frozen=True)
class Classification:
    """task="classification" with its options: elements (images, labels[, extras]).

    extra_features: more schema keys to return (e.g. schema.LABEL_TEXT): elements become
        (images, labels, {key: [B] tensor}).
    postprocess: per-example fn(image, label) -> (image, label), after the resize.
    """

    extra_features: Sequence[str] = ()
    postprocess: Callable | None = None


# make_dataset's defaults (frozen: one instance serves every call).
DEFAULT_PIXELS = Pixels()
DEFAULT_ORDER = Order()
DEFAULT_STORAGE = Storage()

# The keywords make_dataset took before its options were grouped: name -> (group, field).
_MOVED = {
    **{f.name: ("pixels", f.name) for f in dataclasses.fields(Pixels)},
    **{f.name: ("order", f.name) for f in dataclasses.fields(Order)},
    **{f.name: ("storage", f.name) for f in dataclasses.fields(Storage)},
    **{f.name: ("task", f.name) for f in dataclasses.fields(Classification)},
}
_GROUP_CLASS = {"pixels": "Pixels", "order": "Order", "storage": "Storage"}


def resolve_options(task, groups: dict, old: dict) -> tuple[str, object, dict]:
    """(task name, its options, {"pixels", "order", "storage"}) from make_dataset's arguments and
    the old keywords `old` (each warned about once per call).

    Raises:
        TypeError: an unknown keyword, or an old one given with its group.
        ValueError: an unknown task.
    """
    name, task_options = _task(task)
    fields: dict[str, dict] = {}
    for key, value in old.items():
        if key not in _MOVED:
            raise TypeError(f"make_dataset() got an unexpected keyword argument {key!r}")
        group, field = _MOVED[key]
        fields.setdefault(group, {})[field] = value
        _warn(key, group, field)
    for group, values in fields.items():
        if group == "task":
            task_options = _classification(name, task_options, values)
        else:
            groups[group] = dataclasses.replace(groups[group], **values)
    return name, task_options, groups


def _task(task) -> tuple[str, object]:
    if isinstance(task, Classification):
        return "classification", task
    if isinstance(task, Detection):
        return task.kind, task
    if task == "classification":
        return task, Classification()
    if task in ("detection", "segmentation"):
        return task, Detection(kind=task)
    raise ValueError(
        "task must be 'classification', 'detection', 'segmentation', a Classification or a "
        f"Detection, got {task!r}"
    )


def _classification(name: str, options, values: dict) -> Classification:
    if name != "classification":
        raise TypeError(f"{', '.join(values)}: classification options, not {name}'s")
    return dataclasses.replace(options, **values)


def _warn(key: str, group: str, field: str) -> None:
    where = (
        f"task=Classification({field}=...)"
        if group == "task"
        else f"{group}={_GROUP_CLASS[group]}({field}=...)"
    )
    warnings.warn(
        f"make_dataset({key}=...) is deprecated: pass {where} (pipeline.reader); the old keyword "
        "works until the next release",
        DeprecationWarning,
        stacklevel=4,
    )
