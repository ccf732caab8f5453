"""Annotation files as real tools export them (tests/annotation_exports.py) are detected by content
and read into the right objects: CVAT's COCO, VOC and YOLO, Label Studio's COCO, YOLO and VOC, an
Ultralytics dataset, pycocotools' RLE masks, the VOC devkit's XML; the same boxes exported by each
tool read back to the same normalised corners and class names, whatever the format, and the VOC
devkit's 1-based corners read as written."""

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
    """The test's boxes, normalised; `shift` pixels off xmin and ymin (negative: added)."""
    return {
        posixpath.splitext(name)[0]: [
            (obj[0], ((obj[1] - shift) / w, (obj[2] - shift) / h, obj[3] / w, obj[4] / h))
            for obj in objects
        ]
        for name, w, h, objects in images
    }


def _written_segmentations(export: Export) -> dict:
    """A COCO export's segmentations by annotation id, as its JSON holds them."""
    document = json.loads(export.annotations.read_text())
    return {a["id"]: a["segmentation"] for a in document["annotations"]}


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
    write_cvat_voc,
    write_cvat_yolo,
    write_label_studio_yolo,
    write_ultralytics,
]

# Each tool's COCO, VOC and YOLO writers, with images whose boxes each of them writes exactly.
TOOL_EXPORTS = {
    "cvat": ((write_cvat_coco, write_cvat_voc, write_cvat_yolo), BOXES_ONLY),
    "label_studio": (
        (write_label_studio_coco, write_label_studio_voc, write_label_studio_yolo),
        BOXES_ONLY[:1],  # 640 x 512: Label Studio's percentages come back exact, int() or not
    ),
}


@pytest.mark.parametrize("writer", WRITERS_OF_PIXEL_BOXES, ids=lambda writer: writer.__name__)
def test_same_boxes_read_back_the_same_from_every_format(writer, tmp_path):
    _assert_same(_read(writer(tmp_path, BOXES_ONLY)), _expected(BOXES_ONLY))


@pytest.mark.parametrize("tool", TOOL_EXPORTS)
def test_a_tools_coco_voc_and_yolo_exports_of_the_same_boxes_agree(tool, tmp_path):
    # CVAT and Label Studio write continuous 0-based VOC corners (x, y, x + w, y + h), which
    # voc.py reads as written: the VOC boxes are the COCO and YOLO ones, not 1 px off.
    writers, images = TOOL_EXPORTS[tool]
    coco, voc, yolo = (_read(writer(tmp_path / writer.__name__, images)) for writer in writers)
    _assert_same(voc, coco)
    _assert_same(yolo, coco)
    _assert_same(coco, _expected(images))


def test_voc_devkit_corners_read_as_written_one_pixel_inside_on_the_left_and_top(tmp_path):
    # The devkit's corners are 1-based inclusive pixels (xmin = left + 1, xmax = right); read as
    # written, as TF's create_pascal_tf_record.py reads them, xmin and ymin land 1 px inside.
    export = write_voc_devkit(tmp_path, BOXES_ONLY)
    person = read_voc(export.files[0].read_bytes(), str(export.files[0])).objects[0]
    assert person.box == Box(9.0, 13.0, 360.0, 470.0)  # drawn as (8, 12, 360, 470)
    _assert_same(_read(export), _expected(BOXES_ONLY, shift=-1.0))


def test_label_studio_voc_truncates_corners_as_label_studio_does(tmp_path):
    # ymin 10 comes back as 9.999999999999998, int() makes it 9, and ymax = 9 + int(50.00...01).
    export = write_label_studio_voc(
        tmp_path, [("street_2.png", 320, 240, [("dog", 200, 10, 300, 60)])]
    )
    (annotations,) = [read_voc(path.read_bytes(), str(path)) for path in export.files]
    (dog,) = annotations.objects
    assert dog.box == Box(200.0, 9.0, 300.0, 59.0)


def test_cvat_coco_keeps_polygons_and_its_uncompressed_crowd_rle(tmp_path):
    export = write_cvat_coco(tmp_path, IMAGES)
    coco = read_coco(export.annotations.read_bytes(), str(export.annotations))
    assert coco.categories == (
        Category(1, "person", ""),
        Category(2, "car", ""),
        Category(3, "dog", ""),
    )
    assert [(i.image, i.image_id, i.width, i.height) for i in coco.images] == [
        ("frame_000001.jpg", 1, 640, 512),
        ("street_2.png", 2, 320, 240),
        ("empty.jpg", 3, 64, 48),
    ]
    person = coco.images[0].objects[0]
    assert (person.segmentation, person.is_crowd, person.area, person.annotation_id) == (
        None,
        False,
        161216.0,
        1,
    )
    polygon, crowd, _ = coco.images[1].objects
    assert polygon.segmentation == [[48.0, 32.0, 80.0, 64.0, 48.0, 96.0, 16.0, 64.0]]
    assert (polygon.box, polygon.is_crowd) == (Box(16.0, 32.0, 80.0, 96.0), False)
    assert (crowd.box, crowd.is_crowd) == (Box(160.0, 120.0, 224.0, 200.0), True)
    # The crowd's uncompressed RLE (a list of runs) is kept as the file gave it.
    written = _written_segmentations(export)[crowd.annotation_id]
    assert isinstance(written["counts"], list) and crowd.segmentation == written
    mask = mask_utils.decode(mask_utils.frPyObjects(written, 240, 320))
    assert mask.sum() == crowd.area == 64 * 80 and mask[120:200, 160:224].all()


def test_cvat_voc_reads_float_corners_flags_and_an_empty_depth(tmp_path):
    write_cvat_voc(tmp_path, IMAGES)
    annotations = tmp_path / "Annotations"
    frame = read_voc((annotations / "frame_000001.xml").read_bytes(), "frame_000001.xml")
    assert (frame.image, frame.width, frame.height) == ("frame_000001.jpg", 640, 512)
    person, car, dog = frame.objects
    assert (person.class_id, person.class_text, person.box) == (
        None,
        "person",
        Box(8, 12, 360, 470),
    )
    assert (car.truncated, car.difficult, dog.truncated, dog.difficult) == (
        True,
        False,
        False,
        True,
    )
    # CVAT's VOC holds boxes only: the polygon and the mask went to its segmentation PNGs.
    street = read_voc((annotations / "street_2.xml").read_bytes(), "street_2.xml")
    assert [o.class_text for o in street.objects] == ["dog"]
    assert read_voc((annotations / "empty.xml").read_bytes(), "empty.xml").objects == ()


def test_voc_zero_size_missing_flags_and_fractional_corners_read(tmp_path):
    export = write_cvat_voc(tmp_path, BOXES_ONLY[:1])
    data = export.files[0].read_bytes()
    for element in (b"<difficult>0</difficult>", b"<difficult>1</difficult>"):
        data = data.replace(element, b"")
    for element in (b"<truncated>0</truncated>", b"<truncated>1</truncated>"):
        data = data.replace(element, b"")
    data = data.replace(b"<width>640</width>", b"<width>0</width>")
    data = data.replace(b"<height>512</height>", b"<height>0</height>")
    data = data.replace(b"<xmin>8.0</xmin>", b"<xmin>8.25</xmin>")
    image = read_voc(data, "a.xml")
    # 0 is a size the exporter did not know: the image's own size decides.
    assert (image.width, image.height) == (None, None)
    assert not any(o.difficult or o.truncated for o in image.objects)
    assert image.objects[0].box == Box(8.25, 12.0, 360.0, 470.0)


def test_cvat_yolo_names_come_from_obj_names_and_only_boxes_are_exported(tmp_path):
    export = write_cvat_yolo(tmp_path, IMAGES)
    names = read_class_names((tmp_path / "obj.names").read_bytes(), "obj.names")
    assert names == (Category(0, "person"), Category(1, "car"), Category(2, "dog"))
    read = _read(export)
    assert [name for name, _ in read["street_2"]] == ["dog"]
    assert (tmp_path / "obj_train_data" / "empty.txt").read_bytes() == b""
    assert read["empty"] == []


def test_label_studio_coco_ids_from_zero_are_kept(tmp_path):
    upload = "../../label-studio/data/upload/1/"
    export = write_label_studio_coco(tmp_path, IMAGES, file_prefix=upload)
    coco = read_coco(export.annotations.read_bytes(), str(export.annotations))
    assert coco.categories == (Category(0, "car"), Category(1, "dog"), Category(2, "person"))
    first, street, empty = coco.images
    assert (first.image_id, first.image) == (0, upload + "frame_000001.jpg")
    person, car, _ = first.objects
    assert (person.class_id, person.annotation_id, car.class_id, car.class_text) == (2, 0, 0, "car")
    # The crowd mask is no Label Studio region: the export has the polygon and the box.
    polygon, dog = street.objects
    assert (polygon.class_id, polygon.annotation_id, dog.annotation_id) == (0, 3, 4)
    written = _written_segmentations(export)[3]
    assert written[0] == pytest.approx([48, 32, 80, 64, 48, 96, 16, 64], abs=1e-9)
    assert polygon.segmentation == written
    assert (empty.image_id, empty.objects) == (2, ())


def test_label_studio_yolo_classes_txt_is_sorted_and_polygons_are_segments(tmp_path):
    write_label_studio_yolo(tmp_path, IMAGES)
    names = read_class_names((tmp_path / "classes.txt").read_bytes(), "classes.txt")
    assert names == (Category(0, "car"), Category(1, "dog"), Category(2, "person"))
    labels = tmp_path / "labels" / "street_2.txt"
    polygon, dog = read_yolo_labels(
        labels.read_bytes(), str(labels), width=320, height=240, names=names
    ).objects
    assert (polygon.class_text, dog.class_text) == ("car", "dog")
    assert polygon.segmentation[0] == pytest.approx([48, 32, 80, 64, 48, 96, 16, 64], abs=1e-9)
    corners = (polygon.box.xmin, polygon.box.ymin, polygon.box.xmax, polygon.box.ymax)
    assert corners == pytest.approx((16, 32, 80, 96), abs=1e-9)


@pytest.mark.parametrize("names_as", ["dict", "list"])
def test_ultralytics_dataset_names_splits_and_segments(names_as, tmp_path):
    export = write_ultralytics(tmp_path, IMAGES[:1], val=IMAGES[1:], names_as=names_as)
    yolo = read_yolo_yaml(export.annotations.read_bytes(), str(export.annotations))
    assert yolo.categories == (Category(0, "person"), Category(1, "car"), Category(2, "dog"))
    assert yolo.root == str(tmp_path.resolve())
    assert yolo.splits == {"train": ("images/train",), "val": ("images/val",)}
    labels = tmp_path / "labels" / "val" / "street_2.txt"
    polygon, dog = read_yolo_labels(
        labels.read_bytes(), str(labels), width=320, height=240, names=yolo.categories
    ).objects  # the crowd mask is dropped, as Ultralytics' convert_coco drops iscrowd
    assert (polygon.class_text, dog.class_text) == ("car", "dog")
    assert polygon.segmentation[0] == pytest.approx([48, 32, 80, 64, 48, 96, 16, 64], abs=1e-3)
    assert export.image_paths["street_2.png"] == tmp_path / "images" / "val" / "street_2.png"


def test_pycocotools_dataset_keeps_compressed_rle_counts_as_str(tmp_path):
    export = write_pycocotools_dataset(tmp_path, IMAGES)
    coco = read_coco(export.annotations.read_bytes(), str(export.annotations))
    written = _written_segmentations(export)
    person = coco.images[0].objects[0]
    assert isinstance(written[1]["counts"], str) and person.segmentation == written[1]
    assert (person.box, person.is_crowd) == (Box(8.0, 12.0, 360.0, 470.0), False)
    crowd = coco.images[1].objects[1]
    mask = mask_utils.decode(written[crowd.annotation_id])  # compressed: decode takes it as is
    assert crowd.is_crowd and mask.sum() == crowd.area == 64 * 80


@pytest.mark.parametrize(
    "writer",
    [write_cvat_coco, write_label_studio_coco, write_pycocotools_dataset],
    ids=lambda writer: writer.__name__,
)
def test_pycocotools_reads_every_coco_export(writer, tmp_path, capsys):
    # The reference implementation loads each file and rasterises every segmentation in it.
    from pycocotools.coco import COCO

    export = writer(tmp_path, IMAGES)
    coco = COCO(str(export.annotations))
    annotations = coco.loadAnns(coco.getAnnIds())
    assert len(annotations) == len(json.loads(export.annotations.read_text())["annotations"])
    masks = [coco.annToMask(a) for a in annotations if a["segmentation"]]
    assert masks and all(np.any(mask) for mask in masks)
