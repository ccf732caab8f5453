"""Annotation files as real tools export them (tests/annotation_exports.py) are detected by content
and read into the right objects: CVAT's COCO, VOC and YOLO, Label Studio's COCO, YOLO and VOC, an
Ultralytics dataset, pycocotools' RLE masks, the VOC devkit's XML; and the same boxes exported by
each read back to the same normalised corners and class names."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from tests.annotation_exports import (
    BOX,
    CROWD,
    POLYGON,
    Export,
    write_cvat_coco,
    write_cvat_voc,
    write_cvat_yolo,
    write_label_studio_coco,
    write_label_studio_voc,
    write_label_studio_yolo,
    write_pycocotools_dataset,
    write_ultralytics,
    write_voc_devkit,
)
from transforms.annotations.coco import read_coco
from transforms.annotations.detect import annotation_format
from transforms.annotations.objects import Box, Category, ImageAnnotations
from transforms.annotations.voc import read_voc
from transforms.annotations.yolo import read_class_names, read_yolo_labels, read_yolo_yaml

pytestmark = pytest.mark.unit

# Sizes whose fractions are exact decimals, so '%.6f' and '%g' values stay within 1e-6.
IMAGES = [
    (
        "frame_000001.jpg",
        640,
        512,
        [
            ("person", 8, 12, 360, 470),
            ("car", 300, 100, 420, 180, BOX, False, True, True),
            ("dog", 48, 240, 195, 371, BOX, True),
        ],
    ),
    (
        "street_2.png",
        320,
        240,
        [
            ("car", 16, 32, 80, 96, POLYGON),
            ("person", 160, 120, 224, 200, CROWD),
            ("dog", 200, 10, 300, 60),
        ],
    ),
    ("empty.jpg", 64, 48, []),
]
BOXES_ONLY = [
    (name, w, h, [obj for obj in objects if len(obj) < 6 or obj[5] == BOX])
    for name, w, h, objects in IMAGES
]
SIZES = {posixpath.splitext(name)[0]: (w, h) for name, w, h, _ in IMAGES}

# Every writer, with what its export's files are by content (ImageSets lists aside: see below).
KINDS = {
    "instances_default.json": "coco",
    "instances.json": "coco",
    "result.json": "coco",
    "notes.json": "companion",
    "labelmap.txt": "companion",
    "obj.data": "companion",
    "train.txt": "companion",
    "obj.names": "yolo_names",
    "classes.txt": "yolo_names",
    "data.yaml": "yolo_yaml",
}
WRITERS = [
    write_cvat_coco,
    write_cvat_voc,
    write_cvat_yolo,
    write_label_studio_coco,
    write_label_studio_voc,
    write_label_studio_yolo,
    write_pycocotools_dataset,
    write_ultralytics,
    write_voc_devkit,
]


def _kind(path: Path) -> str | None:
    if path.name in KINDS:
        return KINDS[path.name]
    if path.suffix == ".xml":
        return "voc"
    if "ImageSets" in path.parts:
        return None
    return "yolo_labels"  # obj_train_data/*.txt, labels/**/*.txt, empty ones too


def _read(export: Export) -> dict[str, list[tuple[str, tuple[float, ...]]]]:
    """Every image of an export, by stem: (class name, corners normalised to the image's size),
    each file read as annotation_format says, YOLO labels with their names file and the size the
    test gave the image."""
    read: list[ImageAnnotations] = []
    names: tuple[Category, ...] = ()
    labels = []
    for path in export.files:
        data = path.read_bytes()
        kind = annotation_format(data, str(path))
        if kind == "coco":
            read += read_coco(data, str(path)).images
        elif kind == "voc":
            read.append(read_voc(data, str(path)))
        elif kind == "yolo_yaml":
            names = read_yolo_yaml(data, str(path)).categories
        elif kind == "yolo_names":
            names = read_class_names(data, str(path))
        elif kind == "yolo_labels":
            labels.append((path, data))
    for path, data in labels:
        width, height = SIZES[path.stem]
        read.append(read_yolo_labels(data, str(path), width=width, height=height, names=names))
    return {posixpath.splitext(posixpath.basename(i.image))[0]: _normalised(i) for i in read}


def _normalised(image: ImageAnnotations) -> list[tuple[str, tuple[float, ...]]]:
    w, h = image.width, image.height
    return [
        (o.class_text, (o.box.xmin / w, o.box.ymin / h, o.box.xmax / w, o.box.ymax / h))
        for o in image.objects
    ]


def _expected(images, shift: float = 0.0) -> dict[str, list[tuple[str, tuple[float, ...]]]]:
    """The test's boxes, normalised; `shift` pixels off xmin and ymin."""
    return {
        posixpath.splitext(name)[0]: [
            (obj[0], ((obj[1] - shift) / w, (obj[2] - shift) / h, obj[3] / w, obj[4] / h))
            for obj in objects
        ]
        for name, w, h, objects in images
    }


def _assert_same(read: dict, expected: dict) -> None:
    assert read.keys() == expected.keys()
    for stem, objects in expected.items():
        assert [name for name, _ in read[stem]] == [name for name, _ in objects], stem
        for (_, corners), (_, want) in zip(read[stem], objects, strict=True):
            assert corners == pytest.approx(want, abs=1e-6, rel=0), stem


@pytest.mark.parametrize("writer", WRITERS, ids=lambda writer: writer.__name__)
def test_every_file_of_every_export_is_detected_by_content(writer, tmp_path):
    export = writer(tmp_path, IMAGES)
    files = [path for path in export.files if _kind(path)]
    detected = {path.name: annotation_format(path.read_bytes(), str(path)) for path in files}
    assert detected == {path.name: _kind(path) for path in files}


def test_a_voc_image_set_list_reads_as_names_as_detect_documents(tmp_path):
    # Content cannot tell VOC's list of image ids from a names file; detect.py says so.
    export = write_cvat_voc(tmp_path, IMAGES)
    (listed,) = [path for path in export.files if "ImageSets" in path.parts]
    assert listed.read_text() == "frame_000001\nstreet_2\nempty\n"
    assert annotation_format(listed.read_bytes(), str(listed)) == "yolo_names"


WRITERS_OF_PIXEL_BOXES = [
    write_cvat_coco,
    write_label_studio_coco,
    write_pycocotools_dataset,
    write_cvat_yolo,
    write_label_studio_yolo,
    write_ultralytics,
    write_voc_devkit,
]


@pytest.mark.parametrize("writer", WRITERS_OF_PIXEL_BOXES, ids=lambda writer: writer.__name__)
def test_same_boxes_read_back_the_same_from_every_format(writer, tmp_path):
    _assert_same(_read(writer(tmp_path, BOXES_ONLY)), _expected(BOXES_ONLY))


@pytest.mark.parametrize("writer", [write_cvat_voc, write_label_studio_voc])
def test_tools_voc_corners_read_one_pixel_left_and_up_by_the_devkit_convention(writer, tmp_path):
    # CVAT and Label Studio write continuous 0-based corners (x, y, x + w, y + h); voc.py reads
    # every VOC file as the devkit's 1-based pixels, so their xmin and ymin come out 1 px lower.
    images = BOXES_ONLY[:1]  # 640 x 512: Label Studio's percentages come back exact
    _assert_same(_read(writer(tmp_path, images)), _expected(images, shift=1.0))


def test_label_studio_voc_truncates_corners_as_label_studio_does(tmp_path):
    # ymin 10 comes back as 9.999999999999998, int() makes it 9, and ymax = 9 + int(50.00...01).
    export = write_label_studio_voc(
        tmp_path, [("street_2.png", 320, 240, [("dog", 200, 10, 300, 60)])]
    )
    (annotations,) = [read_voc(path.read_bytes(), str(path)) for path in export.files]
    (dog,) = annotations.objects
    assert dog.box == Box(199.0, 8.0, 300.0, 59.0)
