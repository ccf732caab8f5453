"""Object features of one record (transforms/annotations/features.py): each instance mask equals
pycocotools' own COCO.annToMask of its polygon or RLE, boxes clip or drop with their reason, EXIF
orientations turn raw-frame annotations as Pillow turns the pixels, stored sizes scale masks and
areas, semantic masks keep their class values, and TensorFlow parses back what was written."""

from __future__ import annotations

import contextlib
import io
import json
import math
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps
from pycocotools import mask as coco_mask
from pycocotools.coco import COCO

from core import schema
from transforms.annotations.coco import read_coco
from transforms.annotations.features import (
    MaskError,
    ObjectChange,
    ObjectTally,
    record_objects,
    semantic_mask,
)
from transforms.annotations.objects import Box, Category, ImageAnnotations, ImageObject
from transforms.annotations.yolo import read_yolo_labels

pytestmark = pytest.mark.unit

WIDTH, HEIGHT = 640, 512
PER_OBJECT = [key for key, (_, per_object) in schema.OBJECT_FEATURES.items() if per_object]


def _runs(mask: np.ndarray) -> list[int]:
    """The uncompressed RLE counts of a 0/1 mask: runs in column-major order, zeros first."""
    flat = mask.flatten(order="F")
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]])
    runs = np.diff(bounds).tolist()
    return runs if flat[0] == 0 else [0, *runs]


def _rect(x0: int, y0: int, x1: int, y1: int) -> np.ndarray:
    mask = np.zeros((HEIGHT, WIDTH), np.uint8)
    mask[y0:y1, x0:x1] = 1
    return mask


def _disc_rle(cx: int, cy: int, r: int) -> dict:
    """A compressed RLE as pycocotools writes it (counts a str, as in COCO's JSON)."""
    ys, xs = np.mgrid[:HEIGHT, :WIDTH]
    disc = ((xs - cx) ** 2 + (ys - cy) ** 2 <= r * r).astype(np.uint8)
    rle = coco_mask.encode(np.asfortranarray(disc))
    return {"size": rle["size"], "counts": rle["counts"].decode("ascii")}


# One image with each kind of segmentation: polygon, two-part polygon, a polygon reaching past
# the image's edge, uncompressed RLE (a crowd), compressed RLE, and an object with none.
# Coordinates are exact in float32, as the COCO reader holds them (objects.Polygons).
DOCUMENT = {
    "images": [{"id": 397133, "file_name": "a.jpg", "width": WIDTH, "height": HEIGHT}],
    "annotations": [
        {"id": 1, "image_id": 397133, "category_id": 1, "bbox": [8, 12, 352, 458],
         "area": 80608.0, "iscrowd": 0,
         "segmentation": [[8.5, 12.25, 360, 12, 360, 470.75, 100.125, 300.5]]},
        {"id": 2, "image_id": 397133, "category_id": 3, "bbox": [300, 100, 120, 80],
         "area": 8400.0, "iscrowd": 0,
         "segmentation": [[300, 100, 420, 100, 420, 140], [300, 150, 420, 150, 420, 180]]},
        {"id": 3, "image_id": 397133, "category_id": 3, "bbox": [600, 400, 60, 130],
         "area": 2000.0, "iscrowd": 0,
         "segmentation": [[600, 400, 660, 400, 660, 530, 600, 530]]},
        {"id": 4, "image_id": 397133, "category_id": 18, "bbox": [20, 20, 20, 4],
         "area": 80.0, "iscrowd": 1,
         "segmentation": {"size": [HEIGHT, WIDTH], "counts": _runs(_rect(20, 20, 40, 24))}},
        {"id": 5, "image_id": 397133, "category_id": 18, "bbox": [150, 330, 100, 100],
         "area": 7845.0, "iscrowd": 1, "segmentation": _disc_rle(200, 380, 50)},
        {"id": 6, "image_id": 397133, "category_id": 1, "bbox": [500, 20, 40, 30],
         "area": 1200.0, "iscrowd": 0},
    ],
    "categories": [
        {"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"},
    ],
}  # fmt: skip


def _pycocotools(document: dict) -> COCO:
    """pycocotools' COCO over the dict (its index built as COCO(path) would)."""
    coco = COCO()
    coco.dataset = document
    with contextlib.redirect_stdout(io.StringIO()):  # it prints "creating index..."
        coco.createIndex()
    return coco


def _annotations(document: dict) -> ImageAnnotations:
    """The document's first image as imgrec's COCO reader gives it."""
    return read_coco(json.dumps(document).encode(), "instances.json").images[0]


def _record(annotations: ImageAnnotations, size=(WIDTH, HEIGHT), stored=None, **kwargs):
    stored = stored or size
    return record_objects(
        annotations,
        path="images/a.jpg",
        source_id="397133",
        image_width=size[0],
        image_height=size[1],
        orientation=kwargs.pop("orientation", 1),
        stored_width=stored[0],
        stored_height=stored[1],
        **kwargs,
    )


def _decoded(png: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(png))
    assert (image.format, image.mode) == ("PNG", "L")
    return np.asarray(image)


def _resized(mask: np.ndarray, stored: tuple[int, int]) -> np.ndarray:
    return np.asarray(Image.fromarray(mask).resize(stored, Image.Resampling.NEAREST))


def _box_fill(box: tuple[float, float, float, float], height: int, width: int) -> np.ndarray:
    x0, y0, x1, y1 = box
    polygon = [x0, y0, x1, y0, x1, y1, x0, y1]
    return coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects([polygon], height, width)))


def test_each_instance_mask_equals_pycocotools_ann_to_mask():
    coco = _pycocotools(DOCUMENT)
    result = _record(_annotations(DOCUMENT))

    masks = [_decoded(png) for png in result.features[schema.OBJECT_MASK]]
    assert len(masks) == 6
    for mask, ann in zip(masks[:5], DOCUMENT["annotations"][:5], strict=True):
        expected = coco.annToMask(ann)
        assert mask.shape == (HEIGHT, WIDTH) and mask.dtype == np.uint8
        assert np.array_equal(mask, expected), ann["id"]
        assert set(np.unique(mask)) == {0, 1}
    # The object without a segmentation: its box filled, and the change says so.
    assert np.array_equal(masks[5], _box_fill((500, 20, 540, 50), HEIGHT, WIDTH))
    assert [c.to_dict() for c in result.changes] == [
        {"path": "images/a.jpg", "annotation": 3, "what": "clipped"},
        {"path": "images/a.jpg", "annotation": 6, "what": "mask_from_box"},
    ]
    assert result.tally.masks == 6


def test_a_polygon_of_two_parts_covers_both_and_rle_of_both_kinds_decode():
    masks = [_decoded(png) for png in _record(_annotations(DOCUMENT)).features[schema.OBJECT_MASK]]
    car = masks[1]
    assert car[120, 415] == 1 and car[170, 415] == 1  # a pixel inside each part
    assert car[145, 415] == 0  # between them
    assert masks[3].sum() == 80 and masks[3][21:24, 20:40].all()  # uncompressed RLE: 4 x 20
    assert masks[4][380, 200] == 1 and masks[4].sum() == coco_mask.area(_disc_rle(200, 380, 50))


@pytest.mark.parametrize("stored", [(320, 256), (213, 170), (1280, 1024)])
def test_stored_sizes_resize_masks_nearest_and_scale_areas(stored):
    coco = _pycocotools(DOCUMENT)
    result = _record(_annotations(DOCUMENT), stored=stored)

    masks = result.features[schema.OBJECT_MASK][:5]  # the sixth has no segmentation
    for png, ann in zip(masks, DOCUMENT["annotations"][:5], strict=True):
        mask = _decoded(png)
        assert mask.shape == (stored[1], stored[0])
        assert set(np.unique(mask)) <= {0, 1}
        assert np.array_equal(mask, _resized(coco.annToMask(ann), stored))
    scale = stored[0] * stored[1] / (WIDTH * HEIGHT)
    areas = [ann["area"] * scale for ann in DOCUMENT["annotations"]]
    assert result.features[schema.OBJECT_AREA] == pytest.approx(areas)
    # Boxes are fractions of the image: the stored size does not change them.
    assert (
        result.features[schema.OBJECT_BBOX["xmin"]]
        == _record(_annotations(DOCUMENT)).features[schema.OBJECT_BBOX["xmin"]]
    )


def _image(*objects: ImageObject, width=WIDTH, height=HEIGHT) -> ImageAnnotations:
    return ImageAnnotations("a.jpg", width, height, objects, source="a.json")


def _obj(box, annotation_id, **kwargs) -> ImageObject:
    return ImageObject(kwargs.pop("class_id", 1), kwargs.pop("text", "cat"), Box(*box),
                       annotation_id=annotation_id, **kwargs)  # fmt: skip


def test_clipping_and_every_drop_reason_make_their_changes():
    image = _image(
        _obj((64, 128, 320, 384), 1),  # inside
        _obj((-64, 256, 128, 600), 2),  # clipped left and bottom
        _obj((700, 10, 800, 20), 3),  # wholly outside
        _obj((100, 100, 50, 200), 4),  # xmax < xmin
        _obj((math.nan, 10, 20, 30), 5),
        _obj((10, 10, math.inf, 30), 6),
        _obj((10, 10, 10, 30), 7),  # zero width
    )
    result = _record(image)

    assert [(c.annotation, c.what) for c in result.changes] == [
        (2, "clipped"),
        (3, "no_area_inside"),
        (4, "negative_size"),
        (5, "not_finite"),
        (6, "not_finite"),
        (7, "no_area_inside"),
    ]
    boxes = [[result.features[schema.OBJECT_BBOX[side]][i] for side in schema.OBJECT_BBOX]
             for i in range(2)]  # fmt: skip
    assert boxes == [[0.1, 0.25, 0.5, 0.75], [0.0, 0.5, 0.2, 1.0]]
    assert all(len(result.features[key]) == 2 for key in PER_OBJECT if key != schema.OBJECT_MASK)
    assert schema.OBJECT_MASK not in result.features  # no segmentation anywhere
    # The clipped box's area, in stored pixels.
    assert result.features[schema.OBJECT_AREA] == [256.0 * 256.0, 128.0 * 256.0]
    assert result.tally.to_dict() == {
        "boxes_clipped": 1,
        "dropped": {"negative_size": 1, "no_area_inside": 2, "not_finite": 2},
        "images": 1,
        "masks": 0,
        "max_per_image": 2,
        "negatives": 0,
        "objects": 2,
        "per_class": {"cat": 2},
        "sizes": {"large": 2, "medium": 0, "small": 0},
    }


def test_an_image_without_objects_writes_every_per_object_key_empty():
    result = _record(_image(_obj((700, 10, 800, 20), 1)))

    assert result.features == {
        schema.SOURCE_ID: "397133",
        **{key: [] for key in PER_OBJECT if key != schema.OBJECT_MASK},
    }
    assert result.tally.negatives == 1 and result.tally.images == 1
    assert result.tally.dropped["no_area_inside"] == 1


def test_instance_masks_off_or_no_segmentation_writes_no_mask_key():
    assert schema.OBJECT_MASK not in _record(_annotations(DOCUMENT), instance_masks=False).features
    assert [c.what for c in _record(_annotations(DOCUMENT), instance_masks=False).changes] == [
        "clipped"
    ]


def test_flags_labels_and_texts_are_written_per_object():
    image = _image(
        _obj((0, 0, 10, 10), 1, class_id=7, text="bus", is_crowd=True),
        _obj((0, 0, 10, 10), 2, class_id=2, text="car", difficult=True, truncated=True),
    )
    features = _record(image).features
    assert features[schema.OBJECT_LABEL] == [7, 2]
    assert features[schema.OBJECT_TEXT] == ["bus", "car"]
    assert features[schema.OBJECT_IS_CROWD] == [1, 0]
    assert features[schema.OBJECT_DIFFICULT] == [0, 1]
    assert features[schema.OBJECT_TRUNCATED] == [0, 1]
    with pytest.raises(ValueError, match="images/a.jpg: object 3 has no class_id"):
        _record(_image(_obj((0, 0, 10, 10), 3, class_id=None)))


def test_coco_size_buckets_use_the_frames_area():
    image = _image(
        _obj((0, 0, 31, 33), 1),  # 1023 px: small
        _obj((0, 0, 32, 32), 2),  # 1024 px: medium
        _obj((0, 0, 96, 96), 3, area=9215.0),  # the file's area decides: medium
        _obj((0, 0, 96, 96), 4),  # large
        _obj((0, 0, 10, 10), 5, area=math.nan),  # an unusable file area: the box's
    )
    result = _record(image, stored=(320, 256))
    assert result.tally.sizes == {"small": 2, "medium": 2, "large": 1}
    assert result.features[schema.OBJECT_AREA][2] == 9215.0 / 4
    assert result.features[schema.OBJECT_AREA][4] == 25.0


# A raw 60 x 40 image with a marked rectangle, annotated in its raw pixels.
RAW = (60, 40)
MARK = (10, 5, 25, 15)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_turns_raw_frame_annotations_as_pillow_turns_pixels(orientation):
    polygon = [MARK[0], MARK[1], MARK[2], MARK[1], MARK[2], MARK[3], MARK[0], MARK[3]]
    raw_mask = _box_fill(MARK, RAW[1], RAW[0])
    raw = Image.fromarray(raw_mask * 255)
    raw.getexif()[0x0112] = orientation
    displayed = ImageOps.exif_transpose(raw)  # what the record stores
    expected = (np.asarray(displayed) > 0).astype(np.uint8)
    rows, cols = np.nonzero(expected)
    width, height = displayed.size
    assert (width, height) == (RAW if orientation < 5 else RAW[::-1])

    image = _image(_obj(MARK, 1, segmentation=[polygon]), width=RAW[0], height=RAW[1])
    result = _record(image, size=(width, height), orientation=orientation)

    box = [result.features[schema.OBJECT_BBOX[side]][0] for side in schema.OBJECT_BBOX]
    if orientation < 5:
        # Same size: the coordinates are taken as displayed, whatever the orientation.
        assert box == [10 / 60, 5 / 40, 25 / 60, 15 / 40]
        expected = raw_mask
    else:
        pixels = [cols.min() / width, rows.min() / height]
        assert box == pytest.approx(pixels + [(cols.max() + 1) / width, (rows.max() + 1) / height])
    assert np.array_equal(_decoded(result.features[schema.OBJECT_MASK][0]), expected)
    stored = (width // 2, height // 2)
    half = _record(image, size=(width, height), orientation=orientation, stored=stored)
    assert np.array_equal(
        _decoded(half.features[schema.OBJECT_MASK][0]), _resized(expected, stored)
    )
    assert half.features[schema.OBJECT_AREA] == [150.0 / 4]


def test_yolo_fractions_are_a_unit_frame_rasterised_at_the_displayed_size():
    names = (Category(0, "person"), Category(1, "car"))
    labels = b"0 0.5 0.5 0.25 0.5\n1 0.1 0.1 0.4 0.1 0.4 0.3 0.1 0.3\n1 0.95 0.5 0.2 0.2\n"
    annotations = read_yolo_labels(labels, "labels/a.txt", width=1, height=1, names=names)
    result = _record(annotations, stored=(320, 256))

    features = result.features
    assert [features[schema.OBJECT_BBOX[s]] for s in schema.OBJECT_BBOX] == [
        pytest.approx(v) for v in ([0.375, 0.1, 0.85], [0.25, 0.1, 0.4], [0.625, 0.4, 1.0],
                                   [0.75, 0.3, 0.6])
    ]  # fmt: skip
    assert features[schema.OBJECT_TEXT] == ["person", "car", "car"]
    assert features[schema.OBJECT_AREA] == pytest.approx([0.125 * 320 * 256, 0.06 * 320 * 256,
                                                          0.03 * 320 * 256])  # fmt: skip
    assert result.tally.sizes == {"small": 0, "medium": 0, "large": 3}  # in displayed pixels
    # The polygon rasterised at 640 x 512 in pixels, as annToMask would, then resized.
    fractions = [0.1, 0.1, 0.4, 0.1, 0.4, 0.3, 0.1, 0.3]
    pixels = [v * (HEIGHT if i % 2 else WIDTH) for i, v in enumerate(fractions)]
    polygon = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects([pixels], HEIGHT, WIDTH)))
    masks = [_decoded(png) for png in features[schema.OBJECT_MASK]]
    assert np.array_equal(masks[1], _resized(polygon, (320, 256)))
    assert [(c.annotation, c.what) for c in result.changes] == [
        (3, "clipped"), (1, "mask_from_box"), (3, "mask_from_box")
    ]  # fmt: skip
    assert np.array_equal(masks[0], _resized(_box_fill((240, 128, 400, 384), 512, 640), (320, 256)))


def test_a_declared_size_of_another_copy_scales_onto_the_image():
    # Annotated on a copy at half the sides.
    two_parts = [[150, 50, 210, 50, 210, 70], [150, 75, 210, 75, 210, 90]]
    document = DOCUMENT | {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 320, "height": 256}],
        "annotations": [{"id": 7, "image_id": 1, "category_id": 3, "bbox": [150, 50, 60, 40],
                         "area": 1050.0, "segmentation": two_parts}],
    }  # fmt: skip
    result = _record(_annotations(document), size=(WIDTH, HEIGHT))

    features = result.features
    box = [features[schema.OBJECT_BBOX[side]][0] for side in schema.OBJECT_BBOX]
    assert box == [150 / 320, 50 / 256, 210 / 320, 90 / 256]
    assert features[schema.OBJECT_AREA] == [1050.0 * 4]
    assert result.tally.sizes["medium"] == 1  # 1050 pixels of the frame
    doubled = [[v * 2 for v in part] for part in document["annotations"][0]["segmentation"]]
    expected = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(doubled, HEIGHT, WIDTH)))
    assert np.array_equal(_decoded(features[schema.OBJECT_MASK][0]), expected)


@pytest.mark.parametrize(
    "segmentation",
    [
        {"size": [HEIGHT, WIDTH], "counts": [100, 20]},  # runs short of the image
        {"size": [HEIGHT, WIDTH], "counts": "Xb0j1k1O"},  # compressed, short
        {"size": [HEIGHT, WIDTH], "counts": [HEIGHT * WIDTH + 5]},  # runs past it
        {"size": [HEIGHT, WIDTH], "counts": "!!!!"},  # no RLE characters
        {"size": [HEIGHT // 2, WIDTH // 2], "counts": [HEIGHT * WIDTH // 4]},  # another size
        [[10, 10, 30, 30]],  # a part of two points: no area
        [[10, 10]],
        [[math.nan, 10, 30, 10, 30, 30]],
    ],
)
def test_an_unusable_segmentation_falls_back_to_the_box(segmentation):
    image = _image(_obj((10, 10, 30, 30), 1, segmentation=segmentation))
    first, second = _record(image), _record(image)

    assert first.features[schema.OBJECT_MASK] == second.features[schema.OBJECT_MASK]
    mask = _decoded(first.features[schema.OBJECT_MASK][0])
    assert np.array_equal(mask, _box_fill((10, 10, 30, 30), HEIGHT, WIDTH))
    assert [c.what for c in first.changes] == ["mask_from_box"]


def test_polygon_corners_far_outside_are_clipped_not_allocated():
    # pycocotools allocates five points per pixel of outline: 1e12 would exhaust memory.
    far = [[-1e12, 100, 1e12, 100, 1e12, 200, -1e12, 200], [1, 1, 5, 1, 5, 5]]
    image = _image(_obj((0, 100, 640, 200), 1, segmentation=far))
    mask = _decoded(_record(image).features[schema.OBJECT_MASK][0])
    within = [[-640, 100, 1280, 100, 1280, 200, -640, 200], [1, 1, 5, 1, 5, 5]]
    expected = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(within, HEIGHT, WIDTH)))
    assert np.array_equal(mask, expected)
    assert mask[100:200].all() and not mask[201:].any()


def _png(values: np.ndarray, palette: list[int] | None = None) -> bytes:
    """A PNG of `values`: mode L, I;16, 1 or RGB by the array, P (values as indices) with a
    palette."""
    if palette is None:
        image = Image.fromarray(values)
    else:
        image = Image.frombytes("P", values.shape[::-1], values.tobytes())
        image.putpalette(palette)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _semantic(data: bytes, size=(6, 4), stored=None, orientation=1) -> np.ndarray:
    stored = stored or size
    out = semantic_mask(
        data,
        path="masks/a.png",
        image_width=size[0],
        image_height=size[1],
        orientation=orientation,
        stored_width=stored[0],
        stored_height=stored[1],
    )
    return _decoded(out)


LABELS = np.array([[0, 1, 1, 2, 2, 255], [0, 1, 1, 2, 2, 255], [3, 3, 0, 0, 15, 15],
                   [3, 3, 0, 0, 15, 15]], np.uint8)  # fmt: skip


def test_a_semantic_mask_in_l_p_and_16_bit_keeps_its_class_values():
    voc_palette = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [64, 64, 64] * 252
    assert np.array_equal(_semantic(_png(LABELS)), LABELS)
    assert np.array_equal(_semantic(_png(LABELS, palette=voc_palette)), LABELS)
    assert np.array_equal(_semantic(_png(LABELS.astype(np.uint16))), LABELS)
    ones = (LABELS > 0).astype(bool)
    assert np.array_equal(_semantic(_png(ones)), ones.astype(np.uint8))


def _gray_png(rows: list[list[int]], bits: int) -> bytes:
    """A grayscale PNG of `bits` per pixel (Pillow writes none under 8 bits; it reads them scaled
    to 0..255)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    per_byte = 8 // bits
    lines = b""
    for row in rows:
        padded = row + [0] * (-len(row) % per_byte)
        packed = [sum(v << (8 - bits * (i + 1)) for i, v in enumerate(padded[j : j + per_byte]))
                  for j in range(0, len(padded), per_byte)]  # fmt: skip
        lines += b"\x00" + bytes(packed)
    header = struct.pack(">IIBBBBB", len(rows[0]), len(rows), bits, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(lines))
            + chunk(b"IEND", b""))  # fmt: skip


@pytest.mark.parametrize("bits", [2, 4])
def test_a_2_or_4_bit_grayscale_mask_keeps_its_class_values(bits):
    rows = (LABELS % (1 << bits)).tolist()
    assert np.array_equal(_semantic(_gray_png(rows, bits)), np.array(rows, np.uint8))


def test_an_8_bit_l_png_of_the_stored_size_is_returned_as_is_and_others_resized_nearest():
    data = _png(LABELS)
    assert semantic_mask(data, path="m.png", image_width=6, image_height=4, orientation=1,
                         stored_width=6, stored_height=4) is data  # fmt: skip
    assert np.array_equal(_semantic(data, stored=(3, 2)), _resized(LABELS, (3, 2)))
    assert np.array_equal(_semantic(data, stored=(12, 8)), LABELS.repeat(2, 0).repeat(2, 1))


@pytest.mark.parametrize("orientation", [5, 6, 7, 8])
def test_a_semantic_mask_of_the_raw_size_is_turned_by_the_orientation(orientation):
    raw = Image.fromarray(LABELS)
    raw.getexif()[0x0112] = orientation
    expected = np.asarray(ImageOps.exif_transpose(raw))
    assert np.array_equal(_semantic(_png(LABELS), size=(4, 6), orientation=orientation), expected)


def test_a_semantic_mask_of_another_size_names_both_sizes_and_the_fix():
    with pytest.raises(MaskError) as caught:
        _semantic(_png(LABELS), size=(4, 6), orientation=1)  # raw size, but no orientation
    assert caught.value.reason == "mask_size_mismatch"
    assert caught.value.detail == (
        "masks/a.png is 6x4 pixels, its image 4x6 (as displayed); "
        "fix: write the label map at the image's size"
    )


@pytest.mark.parametrize(
    "data, words",
    [
        (b"not a png at all", "is no readable PNG"),
        (_png(np.zeros((4, 6, 3), np.uint8)), "is a mode RGB image"),
        (_png(np.full((4, 6), 300, np.uint16)), "holds class 300, over 255"),
        (_png(LABELS)[: _png(LABELS).index(b"IDAT") + 8], "masks/a.png"),  # cut short
    ],
)
def test_a_semantic_mask_that_is_no_label_map_is_unreadable(data, words):
    with pytest.raises(MaskError, match=words) as caught:
        _semantic(data)
    assert caught.value.reason == "mask_unreadable"
    assert "fix:" in caught.value.detail and "masks/a.png" in caught.value.detail


def _example(features: dict) -> bytes:
    return schema.make_example(
        encoded=b"jpeg", image_format="jpeg", height=HEIGHT, width=WIDTH, channels=3, label=0,
        label_text="", filename="a.jpg", sha256="", extra=features,
    )  # fmt: skip


def test_tensorflow_parses_back_what_was_written_with_the_object_spec():
    result = _record(_annotations(DOCUMENT), stored=(320, 256))
    segmentation = _png(LABELS)
    extra = result.features | {schema.SEGMENTATION: segmentation, schema.SEGMENTATION_FORMAT: "png"}
    parsed = tf.io.parse_single_example(_example(extra), schema.object_feature_spec())

    for key in PER_OBJECT:
        values = tf.sparse.to_dense(parsed[key]).numpy().tolist()
        written = result.features[key]
        if key == schema.OBJECT_TEXT:
            written = [text.encode() for text in written]
        assert values == (pytest.approx(written) if schema.OBJECT_FEATURES[key][0] == "float"
                          else written), key  # fmt: skip
    assert parsed[schema.SOURCE_ID].numpy() == b"397133"
    assert parsed[schema.SEGMENTATION].numpy() == segmentation


def test_the_object_detection_apis_convention_decodes_boxes_and_masks():
    result = _record(_annotations(DOCUMENT), stored=(320, 256))
    spec = {
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
        "image/object/area": tf.io.VarLenFeature(tf.float32),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
        "image/object/mask": tf.io.VarLenFeature(tf.string),
        "image/source_id": tf.io.FixedLenFeature((), tf.string, default_value=""),
    }
    parsed = tf.io.parse_single_example(_example(result.features), spec)
    dense = {key: tf.sparse.to_dense(value) for key, value in parsed.items()
             if isinstance(value, tf.SparseTensor)}  # fmt: skip

    sides = ("ymin", "xmin", "ymax", "xmax")  # the API's box order
    boxes = tf.stack([dense[f"image/object/bbox/{side}"] for side in sides], axis=1)
    assert boxes.shape == (6, 4)
    assert dense["image/object/bbox/xmin"].numpy()[1] == pytest.approx(300 / 640)
    assert dense["image/object/class/label"].numpy().tolist() == [1, 3, 3, 18, 18, 1]
    assert dense["image/object/is_crowd"].numpy().tolist() == [0, 0, 0, 1, 1, 0]
    coco = _pycocotools(DOCUMENT)
    masks = dense["image/object/mask"].numpy()
    assert len(masks) == 6
    for png, ann in zip(masks[:5], DOCUMENT["annotations"][:5], strict=True):
        mask = tf.io.decode_png(png, channels=1)[:, :, 0].numpy()
        assert mask.shape == (256, 320)
        assert np.array_equal(mask, _resized(coco.annToMask(ann), (320, 256)))


def test_tallies_merge_and_round_trip_through_json():
    first = _record(_annotations(DOCUMENT)).tally
    second = _record(_image(_obj((700, 10, 800, 20), 1, text="dog"))).tally
    merged = ObjectTally().merge(first).merge(second)

    assert merged.images == 2 and merged.negatives == 1 and merged.objects == 6
    assert merged.max_per_image == 6 and merged.masks == 6 and merged.boxes_clipped == 1
    assert merged.per_class == {"person": 2, "car": 2, "dog": 2}
    assert merged.dropped == {"no_area_inside": 1, "negative_size": 0, "not_finite": 0}
    assert sum(merged.sizes.values()) == 6
    text = json.dumps(merged.to_dict())
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert ObjectTally.from_dict(json.loads(text)) == merged
    assert ObjectChange("a.jpg", "x1", "clipped").to_dict() == {
        "path": "a.jpg", "annotation": "x1", "what": "clipped",
    }  # fmt: skip
