"""An annotated dataset's objects as the report and `imgrec inspect` show them: the counts
dataset_info.json's annotations record, and each record's objects read without TensorFlow."""

from __future__ import annotations

import collections
import dataclasses

from core import schema
from core.names import printable
from pipeline.report.scan import bar_lines, parse_example_lists

__all__ = [
    "SIZES",
    "TOP_CLASSES",
    "RecordObjects",
    "class_counts",
    "object_count_lines",
    "read_objects",
]

# COCO's box size classes (areas below 32² pixels, below 96², the rest), in the order shown.
SIZES = ("small", "medium", "large")
# Classes `imgrec inspect` lists, the most objects first: COCO's 80 would fill the screen.
TOP_CLASSES = 20
_OBJECT_KEYS = {
    *schema.OBJECT_BBOX.values(),
    schema.OBJECT_LABEL,
    schema.OBJECT_TEXT,
    schema.OBJECT_MASK,
    schema.SEGMENTATION,
}


@dataclasses.dataclass(frozen=True)
class RecordObjects:
    """One record's objects: boxes normalised (xmin, ymin, xmax, ymax), class ids and names,
    instance mask PNGs (none, or one per object) and the label map PNG (b"": none)."""

    boxes: list[tuple[float, float, float, float]]
    labels: list[int]
    texts: list[str]
    masks: list[bytes]
    segmentation: bytes


def read_objects(record: bytes) -> RecordObjects:
    """The objects of a serialized tf.train.Example (empty lists for a record without any)."""
    fields = parse_example_lists(record, _OBJECT_KEYS)
    sides = [fields.get(schema.OBJECT_BBOX[s], []) for s in ("xmin", "ymin", "xmax", "ymax")]
    return RecordObjects(
        boxes=list(zip(*sides, strict=False)),
        labels=list(fields.get(schema.OBJECT_LABEL, [])),
        texts=[printable(t) for t in fields.get(schema.OBJECT_TEXT, [])],
        masks=list(fields.get(schema.OBJECT_MASK, [])),
        segmentation=(fields.get(schema.SEGMENTATION) or [b""])[0],
    )


def class_counts(annotations: dict) -> dict[str, collections.Counter]:
    """split -> objects per class name, as the writer counted them."""
    return {
        split: collections.Counter(entry.get("per_class", {}))
        for split, entry in annotations.get("splits", {}).items()
    }


def object_count_lines(info: dict, width: int = 30) -> list[str]:
    """`imgrec inspect`'s lines about objects; [] for a dataset without annotations."""
    annotations = info.get("annotations")
    if annotations is None:
        return []
    return [
        *_source_lines(annotations),
        *_split_lines(annotations),
        *_class_lines(annotations, width),
    ]


def _source_lines(annotations: dict) -> list[str]:
    """Where the objects came from, the label map's size, what carries masks, the unmatched."""
    formats = ", ".join(annotations.get("formats", [])) or "?"
    sources = len(annotations.get("sources", []))
    masks = "instance masks" if annotations.get("instance_masks") else "no instance masks"
    classes = annotations.get("segmentation_classes")
    if classes is not None:
        masks += f", label maps of {len(classes)} classes"
    unmatched = annotations.get("num_unmatched_annotations", 0)
    return [
        f"  annotations {formats} from {sources} file{'s' if sources != 1 else ''}; "
        f"label map {len(annotations.get('label_map', []))} classes; {masks}",
        f"  unmatched   {unmatched:>7}   annotations naming no image found"
        + (f" ({schema.UNMATCHED_ANNOTATIONS})" if unmatched else ""),
    ]


def _split_lines(annotations: dict) -> list[str]:
    """A table of each split's images, negatives, objects, masks, clipped and dropped boxes."""
    heads = ("images", "negatives", "objects", "masks", "max/image", "clipped", "dropped")
    lines = ["  objects     " + " ".join(f"{h:>9}" for h in heads)]
    for split, s in annotations.get("splits", {}).items():
        dropped = s.get("dropped", {})
        row = (s.get("images"), s.get("negatives"), s.get("objects"), s.get("masks"),
               s.get("max_per_image"), s.get("boxes_clipped"), sum(dropped.values()))  # fmt: skip
        cells = " ".join(f"{'?' if v is None else v:>9}" for v in row)
        lines.append(f"    {printable(split)[:10]:<10}{cells}")
        sizes = s.get("sizes", {})
        why = ", ".join(f"{printable(k)} {v}" for k, v in sorted(dropped.items()) if v)
        lines.append(
            "      sizes " + ", ".join(f"{k} {sizes.get(k, 0)}" for k in SIZES)
            + (f"; dropped: {why}" if why else "")
        )  # fmt: skip
    return lines


def _class_lines(annotations: dict, width: int) -> list[str]:
    """A bar per class (the TOP_CLASSES with the most objects), with the count per split."""
    counts = class_counts(annotations)
    totals = collections.Counter()
    for c in counts.values():
        totals.update(c)
    names = [c["name"] for c in annotations.get("label_map", [])]
    top = sorted(set(names) | set(totals), key=lambda n: (-totals[n], n))[:TOP_CLASSES]
    title = f"  object classes (top {len(top)} of {len(set(names) | set(totals))})"
    return [title, *bar_lines(top, totals, counts, width)]
