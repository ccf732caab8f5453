"""`imgrec verify` of an annotated dataset's objects: each record's per-object lists, boxes,
labels, instance masks and label map, and each split's object counts in dataset_info.json."""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from core import schema

__all__ = ["ObjectChecks", "count_problems", "object_checks", "record_problems"]

# The per-object lists every object has an entry in (masks: only when the record has any).
_LISTS = (
    *schema.OBJECT_BBOX.values(),
    schema.OBJECT_LABEL,
    schema.OBJECT_TEXT,
    schema.OBJECT_AREA,
    schema.OBJECT_IS_CROWD,
    schema.OBJECT_DIFFICULT,
    schema.OBJECT_TRUNCATED,
)
_FLAGS = (schema.OBJECT_IS_CROWD, schema.OBJECT_DIFFICULT, schema.OBJECT_TRUNCATED)
# The counts of annotations.splits[split] the records can confirm ("images" is left out: the
# split's num_examples is checked already).
_COUNTS = ("objects", "negatives", "masks")


@dataclasses.dataclass(frozen=True)
class ObjectChecks:
    """What every record's objects are checked against, and the counts found while checking."""

    label_map: dict[int, str]  # class id -> name
    segmentation_values: frozenset[int] | None  # a label map's allowed values; None: any
    decode: bool  # decode masks and label maps (verify's --no_decode skips it)
    spec: dict  # tf.io parse spec of the object keys
    found: dict  # split -> Counter of _COUNTS (filled while checking)


def object_checks(info: dict, decode: bool) -> ObjectChecks | None:
    """The checks of an annotated dataset's objects; None for a dataset without annotations."""
    annotations = info.get("annotations")
    if annotations is None:
        return None
    classes = annotations.get("segmentation_classes")
    values = None
    if classes is not None:
        values = frozenset([int(c["value"]) for c in classes] + [annotations["ignore_value"]])
    return ObjectChecks(
        label_map={int(c["id"]): c["name"] for c in annotations.get("label_map", [])},
        segmentation_values=values,
        decode=decode,
        spec=schema.object_feature_spec(),
        found=collections.defaultdict(collections.Counter),
    )


def _values(example: dict, key: str) -> list:
    value = example[key]
    return list((value.values if hasattr(value, "values") else value).numpy().tolist())


def record_problems(example: dict, split: str, checks: ObjectChecks) -> list[str]:
    """What is wrong with one parsed record's objects ([] when nothing), counting them.

    Args:
        example: the record parsed with `checks.spec` and image/height and image/width.
        split: the record's split, for the counts.
        checks: from object_checks.
    """
    lists = {key: _values(example, key) for key in (*_LISTS, schema.OBJECT_MASK)}
    count = len(lists[schema.OBJECT_LABEL])
    found = checks.found[split]
    found.update(objects=count, negatives=int(count == 0), masks=len(lists[schema.OBJECT_MASK]))
    problems = _length_problems(lists, count)
    if problems:  # the checks below pair the lists' entries by object
        return problems
    names = [checks.label_map.get(label, "?") for label in lists[schema.OBJECT_LABEL]]
    problems += _first(_box_problems(lists, names))
    problems += _first(_label_problems(lists, checks.label_map))
    problems += _first(_flag_problems(lists, names))
    if checks.decode:
        shape = (int(example[schema.HEIGHT].numpy()), int(example[schema.WIDTH].numpy()))
        problems += _first(_mask_problems(lists[schema.OBJECT_MASK], names, shape))
        problems += _segmentation_problems(example, shape, checks.segmentation_values)
    return problems


def _first(problems: list[str]) -> list[str]:
    """The first of a record's problems of one kind and how many more: a record with a hundred
    bad boxes is one line."""
    if len(problems) <= 1:
        return problems
    return [f"{problems[0]} (and {len(problems) - 1} more objects)"]


def _length_problems(lists: dict, count: int) -> list[str]:
    """Every per-object list as long as the class labels (masks: when there are any)."""
    wrong = [
        f"{key.removeprefix('image/object/')} {len(values)}"
        for key, values in lists.items()
        if len(values) != count and (key != schema.OBJECT_MASK or values)
    ]
    if not wrong:
        return []
    return [f"per-object lists differ in length: class/label {count}, " + ", ".join(wrong)]


def _box_problems(lists: dict, names: list[str]) -> list[str]:
    """Boxes normalised to [0, 1], each min at most its max."""
    sides = {side: lists[key] for side, key in schema.OBJECT_BBOX.items()}
    problems = []
    for i, name in enumerate(names):
        box = {side: values[i] for side, values in sides.items()}
        outside = [f"{s} {v:g}" for s, v in box.items() if not (math.isfinite(v) and 0 <= v <= 1)]
        if outside:
            problems.append(f"object {i} ({name}): box {', '.join(outside)} outside [0, 1]")
        for low, high in (("xmin", "xmax"), ("ymin", "ymax")):
            if box[low] > box[high]:
                problems.append(
                    f"object {i} ({name}): box {low} {box[low]:g} > {high} {box[high]:g}"
                )
    return problems


def _label_problems(lists: dict, label_map: dict[int, str]) -> list[str]:
    """Class ids of the label map, each object's text its class's name."""
    known = ", ".join(str(i) for i in sorted(label_map))
    problems = []
    for i, (label, text) in enumerate(
        zip(lists[schema.OBJECT_LABEL], lists[schema.OBJECT_TEXT], strict=True)
    ):
        text = text.decode("utf-8", "replace")
        if label not in label_map:
            problems.append(f"object {i}: class id {label} is not in the label map ({known})")
        elif text != label_map[label]:
            problems.append(
                f"object {i}: class/text {text!r}, the label map names id {label} "
                f"{label_map[label]!r}"
            )
    return problems


def _flag_problems(lists: dict, names: list[str]) -> list[str]:
    """is_crowd, difficult and truncated 0 or 1; areas finite and not negative."""
    problems = []
    for i, name in enumerate(names):
        bad = [
            f"{key.rsplit('/', 1)[1]} {lists[key][i]}"
            for key in _FLAGS
            if lists[key][i] not in (0, 1)
        ]
        area = lists[schema.OBJECT_AREA][i]
        if not (math.isfinite(area) and area >= 0):
            bad.append(f"area {area:g}")
        if bad:
            problems.append(f"object {i} ({name}): {', '.join(bad)} (flags are 0/1, area >= 0)")
    return problems


def _decoded(png: bytes) -> tuple[np.ndarray | None, str]:
    """(the PNG's samples as H x W x C, "") or (None, why it does not decode)."""
    import tensorflow as tf

    try:
        return tf.io.decode_png(png, channels=0).numpy(), ""
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as e:
        return None, e.message.splitlines()[0][:200]


def _mask_problems(masks: list[bytes], names: list[str], shape: tuple[int, int]) -> list[str]:
    """Each instance mask a PNG of the image's size holding only 0 and 1."""
    problems = []
    # `masks` is empty (a record without masks) or one per object: _length_problems saw to it.
    for i, (mask, name) in enumerate(zip(masks, names, strict=False)):
        pixels, why = _decoded(mask)
        if pixels is None:
            problems.append(f"object {i} ({name}): mask does not decode ({why})")
        elif tuple(pixels.shape[:2]) != shape:
            problems.append(
                f"object {i} ({name}): mask is {pixels.shape[0]}x{pixels.shape[1]}, "
                f"the image {shape[0]}x{shape[1]} (height x width)"
            )
        elif pixels.max(initial=0) > 1:
            values = ", ".join(str(v) for v in np.unique(pixels)[:6])
            problems.append(f"object {i} ({name}): mask holds {values}; expected only 0 and 1")
    return problems


def _segmentation_problems(
    example: dict, shape: tuple[int, int], allowed: frozenset[int] | None
) -> list[str]:
    """The label map, when the record has one: a PNG of the image's size, of known values."""
    encoded = example[schema.SEGMENTATION].numpy()
    if not encoded:
        return []
    image_format = example[schema.SEGMENTATION_FORMAT].numpy().decode("utf-8", "replace")
    if image_format != "png":
        return [f"label map of format {image_format!r}; expected 'png'"]
    pixels, why = _decoded(encoded)
    if pixels is None:
        return [f"label map does not decode ({why})"]
    if tuple(pixels.shape[:2]) != shape or pixels.shape[2] != 1:
        h, w, c = pixels.shape
        return [f"label map is {h}x{w}x{c}, the image {shape[0]}x{shape[1]}x1"]
    unknown = sorted(set(np.unique(pixels).tolist()) - allowed) if allowed is not None else []
    if unknown:
        known = ", ".join(str(v) for v in sorted(allowed))
        return [f"label map holds values {unknown[:6]} of no class (known: {known})"]
    return []


def count_problems(info: dict, checks: ObjectChecks) -> list[str]:
    """Each split's objects, negatives and masks as the records hold them against
    annotations.splits (a count the writer did not record is not compared)."""
    recorded = info["annotations"].get("splits", {})
    problems = []
    for split in info["splits"]:
        want, found = recorded.get(split), checks.found.get(split, collections.Counter())
        if want is None:
            if found["objects"]:
                problems.append(
                    f"split {split}: {found['objects']} objects in the records, "
                    "dataset_info's annotations.splits does not list the split"
                )
            continue
        for what in _COUNTS:
            if what in want and found[what] != want[what]:
                problems.append(
                    f"split {split}: {found[what]} {what} in the records, "
                    f"dataset_info's annotations say {want[what]}"
                )
    return problems
