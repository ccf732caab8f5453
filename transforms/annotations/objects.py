"""The typed annotation elements every reader returns, box clipping, and AnnotationError."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = [
    "CLIPPED",
    "KEPT",
    "NEGATIVE_SIZE",
    "NOT_FINITE",
    "NO_AREA_INSIDE",
    "AnnotationError",
    "Box",
    "Category",
    "ImageAnnotations",
    "ImageObject",
    "Segmentation",
    "clip_box",
]

# The reasons clip_box gives; objects_changed.jsonl will spell exactly these.
KEPT = ""
CLIPPED = "clipped"
NO_AREA_INSIDE = "no_area_inside"
NEGATIVE_SIZE = "negative_size"
NOT_FINITE = "not_finite"

# Polygons (one list of x1, y1, x2, y2, ... per part, in source pixels) or an RLE dict as COCO
# writes it ({"size": [h, w], "counts": str | list[int]}), kept exactly as the file gave it.
Segmentation = list[list[float]] | dict[str, Any]


class AnnotationError(ValueError):
    """An annotation file that cannot be read as it stands: the message names the file, where
    in it (a line or an annotation id), what is wrong and the fix."""

    def __init__(self, path: str, where: str, problem: str, fix: str) -> None:
        self.path = path
        self.where = where
        self.problem = problem
        self.fix = fix
        place = f"{path}, {where}" if where else path
        super().__init__(f"{place}: {problem}; {fix}")


@dataclasses.dataclass(frozen=True, slots=True)
class Box:
    """A box in source pixels: continuous coordinates, (0, 0) the top-left corner of the image."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float


@dataclasses.dataclass(frozen=True, slots=True)
class Category:
    """One class as the annotation file names it; ids need not be contiguous."""

    id: int
    name: str
    supercategory: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ImageObject:
    """One annotated object, as its file gave it (no clipping: see clip_box)."""

    class_id: int | None  # None: the file names the class only (VOC); the label map gives the id
    class_text: str
    box: Box
    is_crowd: bool = False
    difficult: bool = False
    truncated: bool = False
    area: float | None = None  # None: the file does not say (VOC, YOLO)
    segmentation: Segmentation | None = None
    annotation_id: int | str | None = (
        None  # COCO's id; VOC: the object's 1-based index; YOLO: its line
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ImageAnnotations:
    """The objects of one image, keyed by the image reference exactly as the file names it."""

    image: str  # COCO file_name, VOC filename, YOLO: the label file's stem
    width: int | None  # None: the file does not say (YOLO); the image's own size decides
    height: int | None
    objects: tuple[ImageObject, ...]
    source: str = ""  # the annotation file's path, for messages
    image_id: int | str | None = None  # COCO's image id, for image/source_id


def clip_box(box: Box, width: float, height: float) -> tuple[Box | None, str]:
    """Clips a box to the image, or drops it with a reason.

    Args:
        box: the box in source pixels.
        width: the image's width in pixels.
        height: the image's height in pixels.

    Returns:
        `(box, KEPT)` for a box inside the image, `(clipped, CLIPPED)` for one partly outside,
        `(None, reason)` with NOT_FINITE, NEGATIVE_SIZE or NO_AREA_INSIDE for one dropped.
    """
    corners = (box.xmin, box.ymin, box.xmax, box.ymax)
    if not all(math.isfinite(c) for c in corners):
        return None, NOT_FINITE
    if box.xmax < box.xmin or box.ymax < box.ymin:
        return None, NEGATIVE_SIZE
    clipped = Box(
        xmin=min(max(box.xmin, 0.0), width),
        ymin=min(max(box.ymin, 0.0), height),
        xmax=min(max(box.xmax, 0.0), width),
        ymax=min(max(box.ymax, 0.0), height),
    )
    # A zero-width box, or one wholly outside, has nothing a detector could learn from.
    if clipped.xmax <= clipped.xmin or clipped.ymax <= clipped.ymin:
        return None, NO_AREA_INSIDE
    if clipped != box:
        return clipped, CLIPPED
    return box, KEPT
