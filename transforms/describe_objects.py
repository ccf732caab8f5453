"""Describe for annotated runs: label_map.pbtxt, unmatched_annotations.jsonl, objects_changed.jsonl
and dataset_info.json's "annotations" entry."""

from __future__ import annotations

import collections
import json

from core import schema, storage
from core.errors import ERROR_PREFIX
from transforms.annotations.features import ObjectTally
from transforms.elements import ShardInfo

__all__ = ["TooManyUnmatchedError", "describe_objects", "label_map_text"]


class TooManyUnmatchedError(RuntimeError):
    """More than --max_bad_fraction of the annotated images name no listed file."""


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode("utf-8")


def label_map_text(label_map) -> str:
    """The Object Detection API's label map (string_int_label_map.proto as text) of (id, name)."""
    items = []
    for cid, name in label_map:
        items.append(
            f"item {{\n  id: {int(cid)}\n  name: {json.dumps(name, ensure_ascii=False)}\n}}\n"
        )
    return "".join(items)


def describe_objects(config, shards: list[ShardInfo], unmatched: list, changed: list) -> dict:
    """Writes the annotation files of the dataset; returns dataset_info.json's "annotations".

    Raises:
        TooManyUnmatchedError: over --max_bad_fraction of the annotated images were not found.
    """
    options, out = config.annotations, config.output
    unmatched = sorted(unmatched, key=lambda r: (r["source"], r["image"]))
    changed = sorted(changed, key=lambda r: (r["path"], str(r["annotation"]), r["what"]))
    storage.write_bytes_atomic(storage.join(out, schema.UNMATCHED_ANNOTATIONS), _jsonl(unmatched))
    storage.write_bytes_atomic(storage.join(out, schema.OBJECTS_CHANGED), _jsonl(changed))
    _check_unmatched(config, len(unmatched))
    if options.label_map:
        text = label_map_text(options.label_map).encode("utf-8")
        storage.write_bytes_atomic(storage.join(out, schema.LABEL_MAP), text)
    return {
        "formats": list(options.formats),
        "sources": list(options.sources),
        "label_map": [{"id": cid, "name": name} for cid, name in options.label_map],
        "relabel": options.relabel,
        "instance_masks": options.instance_masks,
        "masks": options.masks,
        "ignore_value": options.mask_ignore if options.masks else None,
        "segmentation_classes": [
            {"value": value, "name": name} for value, name in options.segmentation_classes
        ]
        or None,
        "num_annotated_images": options.num_images,
        "num_unmatched_annotations": len(unmatched),
        "num_objects_changed": len(changed),
        "objects_changed_by_what": dict(
            sorted(collections.Counter(r["what"] for r in changed).items())
        ),
        "splits": _split_tallies(shards),
    }


def _split_tallies(shards: list[ShardInfo]) -> dict:
    by_split: dict[str, ObjectTally] = {}
    for shard in shards:
        tally = by_split.setdefault(shard.split, ObjectTally())
        if shard.objects is not None:
            tally.merge(ObjectTally.from_dict(shard.objects))
    return {split: tally.to_dict() for split, tally in sorted(by_split.items())}


def _check_unmatched(config, num_unmatched: int) -> None:
    named = config.annotations.num_images
    bad = num_unmatched / named if named else 0.0
    if bad <= config.max_bad_fraction:
        return
    raise TooManyUnmatchedError(
        f"{ERROR_PREFIX}{num_unmatched} of the {named} images the annotations name were not "
        f"found ({bad:.1%} > --max_bad_fraction {config.max_bad_fraction}); see "
        f"{storage.join(config.output, schema.UNMATCHED_ANNOTATIONS)}. Check --input (the "
        "images' folder?) against the annotations' file names, or rerun with a higher "
        "--max_bad_fraction. No dataset_info.json was written."
    )
