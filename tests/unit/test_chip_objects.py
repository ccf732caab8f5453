"""Objects cut with their chip (transforms/tiles/chip_objects.py) and the chips planned for an
annotated image (--tile_min_object, --tile_keep_empty)."""

from __future__ import annotations

import numpy as np
import pytest
from pycocotools import mask as coco_mask

from core.tile_grid import TileOptions, Window
from transforms.annotations.objects import Box, ImageAnnotations, ImageObject, Polygons, Rle
from transforms.elements import InspectedImage, ListedFile, PackedObjects
from transforms.tiles.chip_objects import cut_objects
from transforms.tiles.cut_chips import chips_of

pytestmark = pytest.mark.unit


def _obj(box: Box, **kwargs) -> ImageObject:
    return ImageObject(1, "car", box, annotation_id=kwargs.pop("annotation_id", 1), **kwargs)


def test_boxes_are_clipped_shifted_and_kept_by_the_share_inside():
    objects = (
        _obj(Box(10, 10, 30, 30), annotation_id=1),  # wholly inside the window at (0, 0)
        _obj(Box(90, 10, 130, 30), annotation_id=2),  # 10 of 40 columns inside: 25 %
        _obj(Box(70, 50, 110, 70), annotation_id=3),  # 30 of 40 columns inside: 75 %
        _obj(Box(200, 200, 220, 220), annotation_id=4),  # elsewhere
    )
    annotations = ImageAnnotations("a.jpg", 300, 250, objects)
    cut = cut_objects(annotations, 300, 250, Window(0, 0, 100, 100), 0.5)
    assert (cut.width, cut.height, cut.image_id) == (100, 100, None)
    assert [(o.annotation_id, o.box, o.truncated) for o in cut.objects] == [
        (1, Box(10, 10, 30, 30), False),
        (3, Box(70, 50, 100, 70), True),
    ]
    shifted = cut_objects(annotations, 300, 250, Window(y=0, x=50, height=100, width=100), 0.2)
    assert [(o.annotation_id, o.box) for o in shifted.objects] == [
        (2, Box(40, 10, 80, 30)),
        (3, Box(20, 50, 60, 70)),
    ]


def test_yolo_fractions_become_the_chips_pixels():
    annotations = ImageAnnotations("a", None, None, (_obj(Box(0.5, 0.5, 0.75, 1.0)),))
    annotations = ImageAnnotations("a", 1, 1, annotations.objects)  # YOLO: the unit square
    # x 200..300, y 100..200 of a 400 x 200 image; the window's columns 200..400, rows 100..200
    cut = cut_objects(annotations, 400, 200, Window(y=100, x=200, height=100, width=200), 0.5)
    assert [o.box for o in cut.objects] == [Box(0, 0, 100, 100)]


def test_polygons_shift_and_rle_masks_are_cropped():
    full = np.zeros((60, 80), np.uint8)
    full[20:40, 30:70] = 1
    rle = coco_mask.encode(np.asfortranarray(full))
    objects = (
        _obj(Box(30, 20, 70, 40), segmentation=Polygons.from_parts([[30, 20, 70, 20, 70, 40]])),
        _obj(Box(30, 20, 70, 40), segmentation=Rle.from_dict(
            {"size": rle["size"], "counts": rle["counts"].decode()})),
    )  # fmt: skip
    cut = cut_objects(ImageAnnotations("a", 80, 60, objects), 80, 60, Window(10, 25, 40, 40), 0.1)
    polygon, cropped = (o.segmentation for o in cut.objects)
    assert polygon.parts() == [[5.0, 10.0, 45.0, 10.0, 45.0, 30.0]]
    assert cropped.size == (40, 40)
    np.testing.assert_array_equal(coco_mask.decode(cropped.as_dict()), full[10:50, 25:65])


def _annotated(height: int, width: int, objects: tuple) -> InspectedImage:
    packed = PackedObjects.pack(ImageAnnotations("big.jpg", width, height, objects))
    listed = ListedFile("/d/big.jpg", "big.jpg", "", "train", 1000, None, objects=packed)
    return InspectedImage.of(
        listed, size=1000, sha256="0" * 64, format="jpeg", source_format="jpeg",
        height=height, width=width, channels=3, transcode="", stats=None,
    )  # fmt: skip


def test_empty_chips_are_kept_by_a_deterministic_fraction():
    image = _annotated(1000, 1000, (_obj(Box(10, 10, 40, 40)),))
    everything = chips_of(image, TileOptions(100, 100), seed=1)
    assert len(everything) == 100  # --tile_keep_empty 1: every chip
    half = chips_of(image, TileOptions(100, 100, keep_empty=0.5), seed=1)
    assert half == chips_of(image, TileOptions(100, 100, keep_empty=0.5), seed=1)
    assert 25 < len(half) < 75
    assert (half[0].chip.y, half[0].chip.x) == (0, 0)  # the chip with the object is kept
    assert [c.chip.carrier for c in half] == [True] + [False] * (len(half) - 1)
    (only,) = chips_of(image, TileOptions(100, 100, keep_empty=0.0), seed=1)
    assert [o.box for o in only.objects.unpack().objects] == [Box(10, 10, 40, 40)]


def test_an_image_whose_chips_are_all_dropped_keeps_its_first():
    image = _annotated(300, 300, ())
    (first,) = chips_of(image, TileOptions(100, 100, keep_empty=0.0))
    assert (first.chip.y, first.chip.x, first.chip.carrier) == (0, 0, True)
    assert first.objects.unpack().objects == ()
