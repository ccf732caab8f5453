"""Annotated datasets for the tests, built as a consumer of the keys sees them: tf.train.Example
records with the Object Detection API's keys (core/schema.py), one shard per split, and the
dataset_info.json an annotated conversion writes (its "annotations" block computed from the
records, so a test plants a problem in a record or in the block, never in both)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tensorflow as tf

from core import schema

__all__ = [
    "GRAY",
    "HEIGHT",
    "LABEL_MAP",
    "SEGMENTATION_CLASSES",
    "WIDTH",
    "Obj",
    "example",
    "png",
    "shard_file",
    "with_values",
    "write_dataset",
]

# COCO's ids need not be contiguous: 2 is no class, so an id of 2 is unknown.
LABEL_MAP = ({"id": 1, "name": "cat"}, {"id": 3, "name": "dog"})
SEGMENTATION_CLASSES = ({"value": 0, "name": "background"}, {"value": 1, "name": "cat"},
                        {"value": 3, "name": "dog"})  # fmt: skip
IGNORE = 255
# The report's thumbnail is 160 px on its longer side: at this size a box's pixels are its own.
HEIGHT, WIDTH = 120, 160
GRAY = 128
# COCO's size classes: areas below 32² are small, below 96² medium, the rest large.
_SMALL, _MEDIUM = 32**2, 96**2


@dataclasses.dataclass(frozen=True)
class Obj:
    """One object: its box normalised (xmin, ymin, xmax, ymax) and its class id."""

    box: tuple[float, float, float, float]
    label: int = 1


def png(array: np.ndarray) -> bytes:
    """A PNG of an H x W (gray) or H x W x C uint8 array."""
    return tf.io.encode_png(array if array.ndim == 3 else array[:, :, None]).numpy()


def _box_pixels(box, height: int, width: int) -> tuple[slice, slice]:
    xmin, ymin, xmax, ymax = box
    rows = slice(round(ymin * height), round(ymax * height))
    return rows, slice(round(xmin * width), round(xmax * width))


def _names() -> dict[int, str]:
    return {c["id"]: c["name"] for c in LABEL_MAP}


def example(name: str, objects: list[Obj], *, height: int = HEIGHT, width: int = WIDTH,
            masks: bool = True, segmentation: bool = False) -> tf.train.Example:  # fmt: skip
    """A record of a uniform gray PNG with `objects` (masks filling their boxes when `masks`;
    a label map of the boxes' class ids when `segmentation`)."""
    encoded = png(np.full((height, width, 3), GRAY, np.uint8))
    feature = {
        schema.ENCODED: [encoded], schema.FORMAT: [b"png"], schema.HEIGHT: [height],
        schema.WIDTH: [width], schema.CHANNELS: [3], schema.LABEL: [0],
        schema.LABEL_TEXT: [b"street"], schema.FILENAME: [f"/data/{name}.png".encode()],
        schema.SHA256: [hashlib.sha256(encoded).hexdigest().encode()],
        schema.VERSION: [schema.SCHEMA_VERSION], schema.TRANSCODED_FROM: [b""],
        schema.TRANSCODE_REASON: [b""], schema.SOURCE_ID: [name.encode()],
    }  # fmt: skip
    for i, side in enumerate(("xmin", "ymin", "xmax", "ymax")):
        feature[schema.OBJECT_BBOX[side]] = [o.box[i] for o in objects]
    areas = [(o.box[2] - o.box[0]) * width * (o.box[3] - o.box[1]) * height for o in objects]
    feature |= {
        schema.OBJECT_LABEL: [o.label for o in objects],
        schema.OBJECT_TEXT: [_names().get(o.label, "?").encode() for o in objects],
        schema.OBJECT_AREA: areas, schema.OBJECT_IS_CROWD: [0] * len(objects),
        schema.OBJECT_DIFFICULT: [0] * len(objects), schema.OBJECT_TRUNCATED: [0] * len(objects),
    }  # fmt: skip
    if masks:
        feature[schema.OBJECT_MASK] = [_mask(o, height, width) for o in objects]
    if segmentation:
        label_map = np.zeros((height, width), np.uint8)
        for o in objects:
            label_map[_box_pixels(o.box, height, width)] = o.label
        feature[schema.SEGMENTATION] = [png(label_map)]
        feature[schema.SEGMENTATION_FORMAT] = [b"png"]
    return tf.train.Example(
        features=tf.train.Features(feature={k: _feature(k, v) for k, v in feature.items()})
    )


def _mask(o: Obj, height: int, width: int) -> bytes:
    mask = np.zeros((height, width), np.uint8)
    mask[_box_pixels(o.box, height, width)] = 1
    return png(mask)


def _feature(key: str, values: list) -> tf.train.Feature:
    """A Feature of the key's type (an object key's from schema.OBJECT_FEATURES)."""
    dtype = schema.OBJECT_FEATURES.get(key, (None,))[0]
    if dtype == "float" or (dtype is None and values and isinstance(values[0], float)):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    if dtype == "int64" or (dtype is None and values and isinstance(values[0], int)):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def with_values(ex: tf.train.Example, key: str, values: list) -> tf.train.Example:
    """A copy of `ex` whose feature `key` holds `values` (typed as the key is)."""
    copy = tf.train.Example()
    copy.CopyFrom(ex)
    copy.features.feature[key].CopyFrom(_feature(key, values))
    return copy


def shard_file(split: str) -> str:
    """The relative path of a split's one shard."""
    return schema.shard_name(split, 0, 1)


def _values(ex: tf.train.Example, key: str) -> list:
    if key not in ex.features.feature:  # reading a missing map entry would add it
        return []
    feature = ex.features.feature[key]
    return list(getattr(feature, feature.WhichOneof("kind") or "bytes_list").value)


def _split_stats(examples: list[tf.train.Example]) -> dict:
    """A split's entry of annotations.splits, counted from its records."""
    per_record = [len(_values(ex, schema.OBJECT_LABEL)) for ex in examples]
    texts = [t.decode() for ex in examples for t in _values(ex, schema.OBJECT_TEXT)]
    areas = [a for ex in examples for a in _values(ex, schema.OBJECT_AREA)]
    sizes = collections.Counter(
        "small" if a < _SMALL else "medium" if a < _MEDIUM else "large" for a in areas
    )
    return {
        "images": len(examples), "negatives": per_record.count(0), "objects": sum(per_record),
        "per_class": dict(collections.Counter(texts)), "boxes_clipped": 1,
        "dropped": {"no_area_inside": 1},
        "sizes": {k: sizes[k] for k in ("small", "medium", "large")},
        "max_per_image": max(per_record, default=0),
        "masks": sum(len(_values(ex, schema.OBJECT_MASK)) for ex in examples),
    }  # fmt: skip


def _shard(root: Path, split: str, examples: list[tf.train.Example]) -> dict:
    """Write a split's one shard; its entry of dataset_info.json's splits."""
    path = root / shard_file(split)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for ex in examples:
            writer.write(ex.SerializeToString())
    data = path.read_bytes()
    shard = {"file": shard_file(split), "num_examples": len(examples), "num_bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
    return {
        "num_examples": len(examples), "num_files": len(examples), "num_bytes": len(data),
        "num_shards": 1, "shards": [shard], "label_counts": {"street": len(examples)},
    }  # fmt: skip


def write_dataset(root: Path, splits: dict[str, list[tf.train.Example]], *,
                  segmentation: bool = False,
                  edit: Callable[[dict], None] | None = None) -> str:  # fmt: skip
    """Write `splits`' records and the dataset_info.json describing them; returns the folder.

    Args:
        root: the dataset's folder.
        splits: split -> its records.
        segmentation: the records carry label maps of SEGMENTATION_CLASSES.
        edit: changes the info dict before it is written (a planted disagreement).
    """
    entries = {split: _shard(root, split, examples) for split, examples in splits.items()}
    n = sum(e["num_examples"] for e in entries.values())
    annotations = {
        "formats": ["coco"], "sources": ["/data/instances.json"], "label_map": list(LABEL_MAP),
        "instance_masks": True,
        "segmentation_classes": list(SEGMENTATION_CLASSES) if segmentation else None,
        "ignore_value": IGNORE, "num_unmatched_annotations": 2,
        "splits": {split: _split_stats(examples) for split, examples in splits.items()},
    }  # fmt: skip
    info = {
        "schema_version": schema.SCHEMA_VERSION, "num_listed": n, "num_written": n,
        "num_records": n, "num_rejected": 0, "num_duplicates": 0, "label_names": ["street"],
        "num_classes": 1, "splits": entries, "rejected_by_reason": {}, "transcoded_by_reason": {},
        "formats_written": {"png": n}, "transcode": "auto", "store": "encoded",
        "compression": "none", "feature_spec": schema.FEATURE_SPEC_JSON | schema.OBJECT_FEATURE_SPEC_JSON,
        "statistics": None, "provenance": {"finished": "2026-12-07T10:00:00+00:00"},
        "annotations": annotations,
    }  # fmt: skip
    if edit is not None:
        edit(info)
    (root / schema.DATASET_INFO).write_text(json.dumps(info, indent=2))
    return str(root)
