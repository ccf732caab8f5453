"""One image's annotations as its record's object features (boxes, classes, instance masks).

The frame. An annotation's pixel coordinates refer to a frame: the size the file declares
(COCO's image width/height, VOC's <size>), else the image as displayed, i.e. after its EXIF
orientation (`image_width`/`image_height`, what imgrec's inspection reports):

- declared size == displayed size (or none declared): the displayed frame.
- orientation 5..8 and declared size == the raw (un-rotated, width and height swapped) size: the
  raw frame; boxes and masks are turned by the orientation as PIL.ImageOps.exif_transpose turns
  the pixels (transforms/images/headers.py ORIENTATION_TRANSPOSE). Orientations 2..4 keep the
  size, so their coordinates are taken as displayed.
- else the declared size is a frame of its own, scaled onto the displayed image: YOLO declares
  1 x 1 (its values are fractions of the image), an annotation made on a copy of another size
  declares that copy's size.

Boxes are clipped in the frame (transforms/annotations/objects.py clip_box), normalised by it to
[0, 1] of the displayed image, which is also the stored one (--max_side keeps proportions).
Dropped objects are left out of the record; each drop or clip is an ObjectChange. Every per-object
key is written, as empty lists for an image without objects, so the counts always agree.

OBJECT_AREA is the file's area when it gives a finite one, else the clipped box's, in stored-image
pixels (scaled by stored / frame). ObjectTally's size buckets are COCO's (area < 32**2 small, <
96**2 medium, else large) on the area in the frame's pixels (the displayed image's for YOLO).

Instance masks, when any written object has a segmentation: one PNG per written object, uint8 0/1,
stored_height x stored_width, as the Object Detection API's create_coco_tf_record writes them.
Polygons and RLE (uncompressed: counts a list; compressed: counts a str) are rasterised by
pycocotools as COCO.annToMask does: at the frame's size for the displayed and raw frames (then
turned by the orientation), at the displayed size with scaled coordinates for the other frames
(better than a coarse frame's upscaled mask, and memory bounded by the image's own size). Each
mask is then resized NEAREST to the stored size. An object without a usable segmentation gets its
clipped box filled ("mask_from_box"): a polygon part under three points has no area and is left
out (pycocotools would read four values as a box, and refuse two); an RLE whose runs do not cover
exactly its size (pycocotools leaves the rest uninitialised), or whose size is not the frame's,
is not used. Coordinates far outside the frame are clipped away first (pycocotools allocates five
points per pixel of outline, and a NaN or 1e12 corner exhausts memory).
"""

from __future__ import annotations

import dataclasses
import io
import math
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np
from PIL import Image
from pycocotools import mask as coco_mask

from core import schema
from transforms.annotations.objects import (
    CLIPPED,
    NEGATIVE_SIZE,
    NO_AREA_INSIDE,
    NOT_FINITE,
    Box,
    ImageAnnotations,
    ImageObject,
    clip_box,
    coco_segmentation,
)

__all__ = [
    "MASK_FROM_BOX",
    "MaskError",
    "ObjectChange",
    "ObjectTally",
    "RecordObjects",
    "record_objects",
    "semantic_mask",
]

# ObjectChange.what of an object written with its box as its instance mask.
MASK_FROM_BOX = "mask_from_box"
# COCO's size buckets (cocoeval's areaRng): small < 32**2 <= medium < 96**2 <= large.
_SIZES = (("small", 32**2), ("medium", 96**2), ("large", math.inf))
_DROPS = (NO_AREA_INSIDE, NEGATIVE_SIZE, NOT_FINITE)

# EXIF orientation -> how a raw frame becomes the displayed one: PIL's transpose (as
# ImageOps.exif_transpose and headers.py ORIENTATION_TRANSPOSE apply it), and the same map on a
# normalised point (u, v): swap u and v, then flip u (1 - u), then flip v. Only 5..8 swap the
# sides; 2..4 keep the size, so a raw frame of theirs cannot be told from the displayed one.
_ORIENTATIONS = {
    5: (Image.Transpose.TRANSPOSE, False, False),
    6: (Image.Transpose.ROTATE_270, True, False),
    7: (Image.Transpose.TRANSVERSE, True, True),
    8: (Image.Transpose.ROTATE_90, False, True),
}
# Polygon coordinates beyond one canvas size outside it are clipped away (see the docstring);
# within that margin they pass to pycocotools untouched, so masks equal annToMask's.
_POLYGON_MARGIN = 1.0
# An outline longer than this many canvas perimeters zig-zags as no real outline does, and would
# cost pycocotools five points per pixel of it: the object falls back to its box.
_MAX_OUTLINE = 64
# An RLE is decoded at its own size: one of a frame over 4x the image's pixels (annotated on a
# copy with twice the sides, or a typo) falls back to the box rather than allocate it.
_MAX_RLE_RATIO = 4


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectChange:
    """One line of objects_changed.jsonl: an object clipped, dropped or given its box as mask."""

    path: str  # the image's path
    annotation: int | str | None  # the object's annotation_id
    what: str  # "clipped", "no_area_inside", "negative_size", "not_finite", "mask_from_box"

    def to_dict(self) -> dict:
        """The JSON line's fields: {"path", "annotation", "what"}."""
        return {"path": self.path, "annotation": self.annotation, "what": self.what}


def _zeros(keys: Iterable[str]) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


@dataclasses.dataclass(slots=True)
class ObjectTally:
    """Counts of a record, a shard or the dataset, merged by adding (max_per_image: the max)."""

    images: int = 0  # records with object features
    objects: int = 0  # objects written
    per_class: dict[str, int] = dataclasses.field(default_factory=dict)  # class_text -> objects
    boxes_clipped: int = 0
    dropped: dict[str, int] = dataclasses.field(default_factory=lambda: _zeros(_DROPS))
    sizes: dict[str, int] = dataclasses.field(
        default_factory=lambda: _zeros(name for name, _ in _SIZES)
    )
    max_per_image: int = 0
    masks: int = 0  # instance masks written
    negatives: int = 0  # records with no object written

    def add(
        self,
        objects: Iterable[tuple[str, float]],
        *,
        clipped: int = 0,
        dropped: Iterable[str] = (),
        masks: int = 0,
    ) -> None:
        """Counts one record.

        Args:
            objects: its written objects, as (class_text, area in the frame's pixels).
            clipped: how many of them were clipped.
            dropped: the reason of each object left out.
            masks: the instance masks written.
        """
        objects = list(objects)
        self.images += 1
        self.objects += len(objects)
        for text, area in objects:
            self.per_class[text] = self.per_class.get(text, 0) + 1
            self.sizes[next(name for name, limit in _SIZES if area < limit)] += 1
        self.boxes_clipped += clipped
        for reason in dropped:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
        self.max_per_image = max(self.max_per_image, len(objects))
        self.masks += masks
        self.negatives += not objects

    def merge(self, other: ObjectTally) -> ObjectTally:
        """Adds `other`'s counts to these; returns self (a CombineFn's merge)."""
        for name in ("images", "objects", "boxes_clipped", "masks", "negatives"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for mine, theirs in (
            (self.per_class, other.per_class),
            (self.dropped, other.dropped),
            (self.sizes, other.sizes),
        ):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0) + n
        self.max_per_image = max(self.max_per_image, other.max_per_image)
        return self

    def to_dict(self) -> dict:
        """The counts as JSON-able dicts, keys sorted at every level."""
        out = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return {
            key: dict(sorted(value.items())) if isinstance(value, dict) else value
            for key, value in sorted(out.items())
        }

    @classmethod
    def from_dict(cls, data: dict) -> ObjectTally:
        """The tally `to_dict` wrote."""
        tally = cls()
        for field in dataclasses.fields(cls):
            value = data.get(field.name, getattr(tally, field.name))
            setattr(tally, field.name, dict(value) if isinstance(value, dict) else int(value))
        return tally


@dataclasses.dataclass(frozen=True, slots=True)
class RecordObjects:
    """A record's object features, the changes made to its objects, and their counts."""

    features: dict[str, Any]  # OBJECT_FEATURES key -> value, for schema.make_example(extra=...)
    changes: tuple[ObjectChange, ...]
    tally: ObjectTally


class MaskError(ValueError):
    """A semantic mask that cannot be stored: `reason` a snake_case reject reason
    ("mask_unreadable", "mask_size_mismatch"), `detail` naming the mask file and the fix."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True, slots=True)
class _Frame:
    """What an annotation's coordinates refer to, and how they reach the displayed image."""

    width: float  # the coordinates' extent (the unit square for YOLO's fractions)
    height: float
    orientation: int  # 1, or 5..8 for a raw frame turned to the displayed one
    canvas: tuple[int, int]  # (width, height) polygons are rasterised at
    pixel_area: float  # the frame's area unit in pixels: 1, the displayed image's for YOLO
    rle_ok: bool  # an RLE of the frame's size may be decoded


def _frame(annotations: ImageAnnotations, width: int, height: int, orientation: int) -> _Frame:
    declared = (annotations.width, annotations.height)
    if None in declared or declared == (width, height):
        return _Frame(width, height, 1, (width, height), 1.0, True)
    fw, fh = declared
    if orientation in _ORIENTATIONS and declared == (height, width):
        return _Frame(fw, fh, orientation, (fw, fh), 1.0, True)
    unit = declared == (1, 1)
    pixel_area = width * height if unit else 1.0
    rle_ok = not unit and fw * fh <= _MAX_RLE_RATIO * width * height
    return _Frame(fw, fh, 1, (width, height), pixel_area, rle_ok)


def _normalised(box: Box, frame: _Frame) -> Box:
    """A box clipped in the frame as [0, 1] coordinates of the displayed image."""
    x0, y0 = box.xmin / frame.width, box.ymin / frame.height
    x1, y1 = box.xmax / frame.width, box.ymax / frame.height
    if frame.orientation != 1:
        _, flip_x, flip_y = _ORIENTATIONS[frame.orientation]
        x0, y0, x1, y1 = y0, x0, y1, x1
        if flip_x:
            x0, x1 = 1.0 - x1, 1.0 - x0
        if flip_y:
            y0, y1 = 1.0 - y1, 1.0 - y0
    return Box(x0, y0, x1, y1)


def record_objects(
    annotations: ImageAnnotations,
    *,
    path: str,
    source_id: str,
    image_width: int,
    image_height: int,
    orientation: int,
    stored_width: int,
    stored_height: int,
    instance_masks: bool = True,
) -> RecordObjects:
    """One image's object features, as the module docstring describes.

    Args:
        annotations: the image's objects, each with its final class_id and class_text.
        path: the image's path, for ObjectChange.
        source_id: image/source_id (COCO's image id, or the image's key).
        image_width: the image's width as displayed (after its EXIF orientation).
        image_height: its height as displayed.
        orientation: its EXIF orientation, 1..8 (1: none).
        stored_width: the record's stored width (after --max_side).
        stored_height: the record's stored height.
        instance_masks: write OBJECT_MASK when any written object has a segmentation.

    Returns:
        The features for schema.make_example(extra=...), the changes, the record's tally.

    Raises:
        ValueError: an object without a class_id (map class names to ids first).
    """
    frame = _frame(annotations, image_width, image_height, orientation)
    kept, changes, dropped = [], [], []
    for obj in annotations.objects:
        if obj.class_id is None:
            raise ValueError(f"{path}: object {obj.annotation_id} has no class_id (label map)")
        box, reason = clip_box(obj.box, frame.width, frame.height)
        if box is None:
            dropped.append(reason)
        else:
            kept.append((obj, box))
        if reason:
            changes.append(ObjectChange(path, obj.annotation_id, reason))
    features = _box_features(kept, frame, source_id, stored_width * stored_height)
    masks = []
    if instance_masks and any(obj.segmentation is not None for obj, _ in kept):
        for obj, box in kept:
            png, from_box = _instance_mask(obj, box, frame, (stored_width, stored_height))
            masks.append(png)
            if from_box:
                changes.append(ObjectChange(path, obj.annotation_id, MASK_FROM_BOX))
        features[schema.OBJECT_MASK] = masks
    tally = ObjectTally()
    tally.add(
        ((obj.class_text, _frame_area(obj, box) * frame.pixel_area) for obj, box in kept),
        clipped=sum(change.what == CLIPPED for change in changes),
        dropped=dropped,
        masks=len(masks),
    )
    return RecordObjects(features, tuple(changes), tally)


def _frame_area(obj: ImageObject, box: Box) -> float:
    """The file's area when it gives a usable one, else the clipped box's (frame units)."""
    if obj.area is not None and math.isfinite(obj.area) and obj.area >= 0:
        return obj.area
    return (box.xmax - box.xmin) * (box.ymax - box.ymin)


def _box_features(
    kept: list[tuple[ImageObject, Box]], frame: _Frame, source_id: str, stored_pixels: int
) -> dict[str, Any]:
    boxes = [_normalised(box, frame) for _, box in kept]
    to_stored = stored_pixels / (frame.width * frame.height)
    objects = [obj for obj, _ in kept]
    return {
        schema.SOURCE_ID: source_id,
        **{key: [getattr(box, side) for box in boxes] for side, key in schema.OBJECT_BBOX.items()},
        schema.OBJECT_LABEL: [int(obj.class_id) for obj in objects],
        schema.OBJECT_TEXT: [obj.class_text for obj in objects],
        schema.OBJECT_AREA: [_frame_area(obj, box) * to_stored for obj, box in kept],
        schema.OBJECT_IS_CROWD: [int(obj.is_crowd) for obj in objects],
        schema.OBJECT_DIFFICULT: [int(obj.difficult) for obj in objects],
        schema.OBJECT_TRUNCATED: [int(obj.truncated) for obj in objects],
    }


def _instance_mask(
    obj: ImageObject, box: Box, frame: _Frame, stored: tuple[int, int]
) -> tuple[bytes, bool]:
    """One written object's mask PNG at the stored size, and whether it is its box."""
    mask = _decoded_segmentation(obj.segmentation, frame)
    from_box = mask is None
    if from_box:
        corners = [box.xmin, box.ymin, box.xmax, box.ymin, box.xmax, box.ymax, box.xmin, box.ymax]
        mask = _rasterised([corners], frame)
    image = Image.fromarray(np.ascontiguousarray(mask))
    if frame.orientation != 1:
        image = image.transpose(_ORIENTATIONS[frame.orientation][0])
    if image.size != stored:
        image = image.resize(stored, Image.Resampling.NEAREST)
    return _png(image), from_box


def _decoded_segmentation(segmentation: Any, frame: _Frame) -> np.ndarray | None:
    """The 0/1 mask of a segmentation over the frame (any size), None if it is unusable."""
    segmentation = coco_segmentation(segmentation)  # COCO's lists or dict, from compact forms
    if isinstance(segmentation, list):
        return _rasterised(segmentation, frame)
    if not isinstance(segmentation, dict) or not frame.rle_ok:
        return None
    size, counts = segmentation.get("size"), segmentation.get("counts")
    if size != [frame.height, frame.width] or not _rle_complete(counts, size[0] * size[1]):
        return None
    if isinstance(counts, list):  # uncompressed: as COCO.annToRLE converts it
        segmentation = coco_mask.frPyObjects(segmentation, *size)
    return coco_mask.decode(segmentation)


def _rasterised(parts: list[list[float]], frame: _Frame) -> np.ndarray | None:
    """Polygon parts (frame coordinates) rasterised at the canvas by pycocotools, as annToMask."""
    width, height = frame.canvas
    scale_x, scale_y = width / frame.width, height / frame.height
    usable = []
    for part in parts:
        xy = [float(v) * (scale_y if i % 2 else scale_x) for i, v in enumerate(part)]
        if len(xy) >= 6 and all(math.isfinite(v) for v in xy):
            xy = _within_margin(xy, width, height)
            if len(xy) >= 6:
                usable.append(xy)
    outline = sum(_outline(xy) for xy in usable)
    if not usable or outline > _MAX_OUTLINE * 2 * (width + height):
        return None
    return coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(usable, height, width)))


def _outline(xy: list[float]) -> float:
    points = list(zip(xy[0::2], xy[1::2], strict=True))
    return sum(math.dist(p, q) for p, q in zip(points, points[1:] + points[:1], strict=True))


def _within_margin(xy: list[float], width: int, height: int) -> list[float]:
    """The polygon clipped to the canvas grown by _POLYGON_MARGIN sizes (Sutherland-Hodgman);
    itself when it lies inside, so that pycocotools sees the file's coordinates."""
    low = (-_POLYGON_MARGIN * width, -_POLYGON_MARGIN * height)
    high = ((1 + _POLYGON_MARGIN) * width, (1 + _POLYGON_MARGIN) * height)
    points = list(zip(xy[0::2], xy[1::2], strict=True))
    if all(low[0] <= x <= high[0] and low[1] <= y <= high[1] for x, y in points):
        return xy
    for axis in (0, 1):
        for limit, sign in ((low[axis], 1.0), (high[axis], -1.0)):
            inside = [sign * (p[axis] - limit) >= 0 for p in points]
            clipped = []
            for i, p in enumerate(points):
                q, q_in = points[i - 1], inside[i - 1]
                if inside[i] != q_in:
                    t = (limit - q[axis]) / (p[axis] - q[axis])
                    clipped.append((q[0] + t * (p[0] - q[0]), q[1] + t * (p[1] - q[1])))
                if inside[i]:
                    clipped.append(p)
            points = clipped
    return [v for point in points for v in point]


def _rle_complete(counts: Any, pixels: int) -> bool:
    """Whether RLE counts (a list, or COCO's compressed string) run over exactly `pixels`."""
    if isinstance(counts, str):
        counts = _rle_string_counts(counts)
    if not isinstance(counts, list) or not all(isinstance(n, int) for n in counts):
        return False
    return all(0 <= n < 1 << 32 for n in counts) and sum(counts) == pixels


def _rle_string_counts(text: str) -> list[int] | None:
    """The runs of a compressed RLE, read as pycocotools' rleFrString reads them: 5 bits a
    character (offset 48), 0x20 continues, 0x10 of the last one signs; from the third run on,
    each is a difference to the run two before. None for a string it would misread."""
    counts, value, shift = [], 0, 0
    for char in text:
        c = ord(char) - 48
        if not 0 <= c < 64:
            return None
        value |= (c & 0x1F) << shift
        shift += 5
        if c & 0x20:
            continue
        if c & 0x10:
            value -= 1 << shift
        counts.append(value + (counts[-2] if len(counts) > 2 else 0))
        value, shift = 0, 0
    return None if shift else counts


def _png(image: Image.Image) -> bytes:
    # zlib's run-length strategy: masks are long runs of 0 and 1, which it writes faster than
    # the default strategy and no larger (docs/benchmarks.md, "Annotations").
    out = io.BytesIO()
    image.save(out, format="PNG", compress_type=zlib.Z_RLE)
    return out.getvalue()


def semantic_mask(
    data: bytes,
    *,
    path: str,
    image_width: int,
    image_height: int,
    orientation: int,
    stored_width: int,
    stored_height: int,
) -> bytes:
    """A label-map PNG (value = class) as the record's SEGMENTATION: 8-bit grayscale, stored size.

    Args:
        data: the mask file's bytes: a PNG in mode L, P (the palette index is the class, as
            Pascal VOC's SegmentationClass; the palette is not expanded), 1-bit, or 16-bit
            with values under 256.
        path: the mask file's path, for messages.
        image_width: the image's width as displayed (after its EXIF orientation).
        image_height: its height as displayed.
        orientation: its EXIF orientation, 1..8.
        stored_width: the record's stored width.
        stored_height: the record's stored height.

    Returns:
        A mode L PNG of stored_width x stored_height, resized NEAREST; `data` itself when it
        already is an 8-bit L PNG of the displayed size, which is the stored size.

    Raises:
        MaskError: "mask_unreadable" (not a PNG label map), "mask_size_mismatch" (neither the
            displayed nor, for orientations 5..8, the raw size).
    """
    image = _open_mask(data, path)
    size, displayed = image.size, (image_width, image_height)
    turn = size != displayed and orientation in _ORIENTATIONS and size == displayed[::-1]
    if size != displayed and not turn:
        raise MaskError(
            "mask_size_mismatch",
            f"{path} is {size[0]}x{size[1]} pixels, its image {image_width}x{image_height} "
            "(as displayed); fix: write the label map at the image's size",
        )
    stored = (stored_width, stored_height)
    eight_bit = image.mode == "L" and _raw_mode(image) == "L"
    values = _label_values(image, path)  # decoded also when kept as is: a cut file is refused
    if eight_bit and not turn and size == stored:
        return data
    image = Image.fromarray(values)
    if turn:
        image = image.transpose(_ORIENTATIONS[orientation][0])
    if image.size != stored:
        image = image.resize(stored, Image.Resampling.NEAREST)
    return _png(image)


def _open_mask(data: bytes, path: str) -> Image.Image:
    """The mask opened (header only) as a PNG label map."""
    fix = "fix: save the label map as a PNG of class values (mode L or P)"
    try:
        image = Image.open(io.BytesIO(data), formats=["PNG"])
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise MaskError("mask_unreadable", f"{path} is no readable PNG ({error}); {fix}") from None
    if image.mode not in ("L", "P", "1") and not image.mode.startswith("I;16"):
        raise MaskError("mask_unreadable", f"{path} is a mode {image.mode} image; {fix}")
    return image


def _raw_mode(image: Image.Image) -> str:
    """The PNG's pixel layout as Pillow unpacks it ("L", "L;4", ...), read before decoding."""
    return image.tile[0][3] if image.tile and isinstance(image.tile[0][3], str) else ""


def _label_values(image: Image.Image, path: str) -> np.ndarray:
    """The mask's class values as uint8 (2- and 4-bit grayscale scaled back from Pillow's)."""
    bits = {"L;2": 2, "L;4": 4}.get(_raw_mode(image))
    try:
        values = np.asarray(image)
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        detail = f"{path} does not decode ({error}); fix: re-save the label map as PNG"
        raise MaskError("mask_unreadable", detail) from None
    if bits:
        values = values // (255 // (2**bits - 1))
    if values.size and int(values.max()) > 255:
        raise MaskError(
            "mask_unreadable",
            f"{path} holds class {int(values.max())}, over 255; fix: at most 256 classes",
        )
    return values.astype(np.uint8)
