"""The typed annotation elements every reader returns, box clipping, and AnnotationError."""

from __future__ import annotations

import dataclasses
import itertools
import math
from array import array
from collections.abc import Iterator, Sequence
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
    "Polygons",
    "Rle",
    "Segmentation",
    "clip_box",
    "coco_segmentation",
]

# The reasons clip_box gives; objects_changed.jsonl will spell exactly these.
KEPT = ""
CLIPPED = "clipped"
NO_AREA_INSIDE = "no_area_inside"
NEGATIVE_SIZE = "negative_size"
NOT_FINITE = "not_finite"


class Polygons:
    """An object's polygon parts, compact: every part's x1, y1, x2, y2, ... in one float32 array,
    and where in it the second and later parts start (none for one part, as most objects have).
    Lists of Python floats cost ~8x more: COCO train2017's polygons would not fit a launcher's
    memory (bench/coco_memory.py).

    float32 keeps COCO's 2-decimal coordinates within 0.004 pixel below 131072 pixels (rounding
    to 2 decimals gives the file's numbers back), integers exactly. Equal to the lists of numbers
    that round to the same float32s. Picklable; treat as read-only.
    """

    __slots__ = ("coords", "starts")

    def __init__(self, coords: array, starts: tuple[int, ...] = ()) -> None:
        self.coords = coords
        self.starts = starts

    @classmethod
    def from_parts(cls, parts: Sequence[Sequence[float]]) -> Polygons:
        """The compact form of `parts`, one sequence of x1, y1, x2, y2, ... per part.

        Raises:
            ValueError: no parts.
            TypeError, OverflowError: a value that is no float.
        """
        if not parts:
            raise ValueError("a polygon needs a part")
        # From a list, array() allocates exactly; extend() would over-allocate.
        flat = parts[0] if len(parts) == 1 else list(itertools.chain.from_iterable(parts))
        starts = tuple(itertools.accumulate(len(part) for part in parts[:-1]))
        return cls(array("f", flat), starts)

    def parts(self) -> list[list[float]]:
        """The parts as lists of floats, as pycocotools' mask.frPyObjects takes them."""
        bounds = (0, *self.starts, len(self.coords))
        return [self.coords[start:end].tolist() for start, end in itertools.pairwise(bounds)]

    def __len__(self) -> int:
        return len(self.starts) + 1

    def __iter__(self) -> Iterator[list[float]]:
        return iter(self.parts())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            try:
                other = Polygons.from_parts(other)
            except (TypeError, ValueError, OverflowError):  # not lists of numbers
                return False
        if not isinstance(other, Polygons):
            return NotImplemented
        return self.starts == other.starts and self.coords == other.coords

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which have no hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (Polygons, (self.coords, self.starts))

    def __repr__(self) -> str:
        return f"Polygons({self.parts()!r})"


class Rle:
    """A COCO run-length mask: size (height, width) and counts as the file gave them, compressed
    text or runs (a uint32 array, pycocotools' own type for them). Equal to its dict; picklable."""

    __slots__ = ("counts", "size")

    def __init__(self, size: tuple[int, int], counts: str | array) -> None:
        self.size = size
        self.counts = counts

    @classmethod
    def from_dict(cls, rle: dict[str, Any]) -> Rle:
        """The compact form of COCO's {"size": [h, w], "counts": str | list[int]}.

        Raises:
            OverflowError: a run below 0 or past 2**32 - 1.
        """
        counts = rle["counts"]
        height, width = rle["size"]
        return cls((height, width), counts if isinstance(counts, str) else array("I", counts))

    def as_dict(self) -> dict[str, Any]:
        """The dict COCO writes, as pycocotools' mask.frPyObjects takes it."""
        counts = self.counts if isinstance(self.counts, str) else self.counts.tolist()
        return {"size": list(self.size), "counts": counts}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, dict):
            return self.as_dict() == other
        if not isinstance(other, Rle):
            return NotImplemented
        return self.size == other.size and self.counts == other.counts

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, which have no hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (Rle, (self.size, self.counts))

    def __repr__(self) -> str:
        return f"Rle({self.as_dict()!r})"


# Polygons (x1, y1, x2, y2, ... per part, in source pixels) or a COCO RLE: compact from COCO
# files, plain lists from YOLO's; coco_segmentation gives either as pycocotools takes it.
Segmentation = Polygons | Rle | list[list[float]] | dict[str, Any]


def coco_segmentation(segmentation: Segmentation) -> list[list[float]] | dict[str, Any]:
    """A segmentation as COCO's JSON has it, what pycocotools' mask.frPyObjects takes.

    Args:
        segmentation: an ImageObject's segmentation.

    Returns:
        Polygons as one list of x1, y1, x2, y2, ... floats per part; RLE as
        {"size": [height, width], "counts": str | list[int]}.
    """
    if isinstance(segmentation, Polygons):
        return segmentation.parts()
    if isinstance(segmentation, Rle):
        return segmentation.as_dict()
    return segmentation


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
