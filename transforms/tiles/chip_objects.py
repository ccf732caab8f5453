"""Objects cut with their chip (--tile with --annotations): boxes clipped to the window and
shifted into it, polygons shifted, RLE masks cropped; an object is kept in a chip when at least
--tile_min_object of its box's area falls inside.

Planned with the chips (transforms/tiles/cut_chips.py), so the writer gets each chip's objects
already in its own coordinates, as any image's, and empty chips dropped by --tile_keep_empty are
never read. Coordinates are taken as the displayed image's (after EXIF orientation), or YOLO's
fractions of it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from pycocotools import mask as coco_mask

from core.tile_grid import Window
from transforms.annotations.objects import (
    Box,
    ImageAnnotations,
    ImageObject,
    Polygons,
    Rle,
    coco_segmentation,
)

__all__ = ["cut_objects"]


def cut_objects(
    annotations: ImageAnnotations, width: int, height: int, window: Window, min_object: float
) -> ImageAnnotations:
    """The objects of a width x height image that belong to `window`, in its coordinates; the
    result declares the window's sides and no image id (image/source_id: the chip's key)."""
    declared_w, declared_h = annotations.width or width, annotations.height or height
    scale = (width / declared_w, height / declared_h)
    kept = []
    for obj in annotations.objects:
        cut = _cut(obj, scale, (width, height), window, min_object)
        if cut is not None:
            kept.append(cut)
    return ImageAnnotations(
        annotations.image, window.width, window.height, tuple(kept), annotations.source
    )


def _cut(obj: ImageObject, scale, sides, window: Window, min_object: float):
    """`obj` in the window's coordinates, or None when too little of it is inside."""
    sx, sy = scale
    b = obj.box
    corners = (b.xmin * sx, b.ymin * sy, b.xmax * sx, b.ymax * sy)
    if not all(math.isfinite(c) for c in corners):
        return None  # left out, as the whole image's record drops it
    x0, y0 = max(corners[0], 0.0), max(corners[1], 0.0)
    x1, y1 = min(corners[2], float(sides[0])), min(corners[3], float(sides[1]))
    area = (x1 - x0) * (y1 - y0)
    if x1 <= x0 or y1 <= y0 or area <= 0:
        return None
    ix0, iy0 = max(x0, window.x), max(y0, window.y)
    ix1, iy1 = min(x1, window.x + window.width), min(y1, window.y + window.height)
    if ix1 <= ix0 or iy1 <= iy0 or (ix1 - ix0) * (iy1 - iy0) < min_object * area:
        return None
    inside = Box(ix0 - window.x, iy0 - window.y, ix1 - window.x, iy1 - window.y)
    return dataclasses.replace(
        obj,
        box=inside,
        area=None,  # the clipped box's, at the chip
        truncated=obj.truncated or (ix0, iy0, ix1, iy1) != (x0, y0, x1, y1),
        segmentation=_segmentation(obj.segmentation, scale, sides, window),
    )


def _segmentation(segmentation, scale, sides, window: Window):
    """Polygons shifted into the window (record_objects clips them when it rasterises); an RLE
    of the image's size cropped to it; None (the writer then masks the box) otherwise."""
    if segmentation is None:
        return None
    coco = coco_segmentation(segmentation)
    if isinstance(coco, list):
        sx, sy = scale
        parts = [
            [(v * sy - window.y) if i % 2 else (v * sx - window.x) for i, v in enumerate(part)]
            for part in coco
        ]
        return Polygons.from_parts(parts) if parts else None
    if isinstance(coco, dict) and list(coco.get("size", ())) == [sides[1], sides[0]]:
        rle = (
            coco if isinstance(coco["counts"], str) else coco_mask.frPyObjects(coco, *coco["size"])
        )
        mask = coco_mask.decode(rle)[
            window.y : window.y + window.height, window.x : window.x + window.width
        ]
        cropped = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
        return Rle.from_dict({"size": cropped["size"], "counts": cropped["counts"].decode()})
    return None
