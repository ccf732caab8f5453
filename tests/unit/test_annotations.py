"""Annotation readers (transforms/annotations/): COCO, VOC and YOLO files in their real formats
give exact typed objects, the same objects in all three formats give the same pixel boxes, boxes
clip or drop with their reason, and malformed files name the file, the line or id, and the fix."""

from __future__ import annotations

import json
import math

import pytest

from transforms.annotations.coco import read_coco
from transforms.annotations.detect import annotation_format
from transforms.annotations.objects import (
    CLIPPED,
    KEPT,
    NEGATIVE_SIZE,
    NO_AREA_INSIDE,
    NOT_FINITE,
    AnnotationError,
    Box,
    Category,
    ImageObject,
    clip_box,
)
from transforms.annotations.voc import read_voc
from transforms.annotations.yolo import read_class_names, read_yolo_labels, read_yolo_yaml

# 640 x 512: every normalised YOLO value below is an exact decimal, so pixels agree to 1e-6.
WIDTH, HEIGHT = 640, 512

# The same three objects as pixel corners (xmin, ymin, xmax, ymax), in each format below.
SAME_OBJECTS = [
    ("person", (8.0, 12.0, 360.0, 470.0)),
    ("car", (300.0, 100.0, 420.0, 180.0)),
    ("dog", (48.0, 240.0, 195.0, 371.0)),
]

# As pycocotools' dataset JSON is laid out: category ids 1, 3, 18 (not contiguous).
COCO_SAME = {
    "info": {"description": "imgrec test", "version": "1.0", "year": 2026},
    "licenses": [],
    "images": [
        {"id": 397133, "file_name": "000000397133.jpg", "width": 640, "height": 512},
        {"id": 37777, "file_name": "000000037777.jpg", "width": 640, "height": 512},
    ],
    "annotations": [
        {"id": 101, "image_id": 397133, "category_id": 1, "bbox": [8, 12, 352, 458],
         "area": 120000.5, "iscrowd": 0, "segmentation": [[8, 12, 360, 12, 360, 470]]},
        {"id": 102, "image_id": 397133, "category_id": 3, "bbox": [300, 100, 120, 80],
         "area": 9600.0, "iscrowd": 0,
         "segmentation": [[300, 100, 420, 100, 420, 140], [300, 150, 420, 150, 420, 180]]},
        {"id": 103, "image_id": 397133, "category_id": 18, "bbox": [48.0, 240.0, 147.0, 131.0],
         "area": 19257.0, "iscrowd": 1,
         "segmentation": {"size": [512, 640], "counts": "Xb0j1k1O1O0000N2N2M3O100O1"}},
        {"id": 104, "image_id": 37777, "category_id": 18, "bbox": [600, 400, 80, 50],
         "area": 2000.0, "iscrowd": 1,
         "segmentation": {"size": [512, 640], "counts": [307600, 40, 472, 40, 1000]}},
        {"id": 105, "image_id": 37777, "category_id": 3, "bbox": [float("nan"), 10, 5, 5],
         "area": 25.0, "iscrowd": 0, "segmentation": []},
    ],
    "categories": [
        {"supercategory": "person", "id": 1, "name": "person"},
        {"supercategory": "vehicle", "id": 3, "name": "car"},
        {"supercategory": "animal", "id": 18, "name": "dog"},
    ],
}  # fmt: skip

# As LabelImg writes it (integer 0-based corners, read as written: see voc.py's convention).
VOC_SAME = b"""<annotation>
\t<folder>images</folder>
\t<filename>000000397133.jpg</filename>
\t<path>/data/images/000000397133.jpg</path>
\t<source>
\t\t<database>Unknown</database>
\t</source>
\t<size>
\t\t<width>640</width>
\t\t<height>512</height>
\t\t<depth>3</depth>
\t</size>
\t<segmented>0</segmented>
\t<object>
\t\t<name>person</name>
\t\t<pose>Unspecified</pose>
\t\t<truncated>0</truncated>
\t\t<difficult>0</difficult>
\t\t<bndbox>
\t\t\t<xmin>8</xmin>
\t\t\t<ymin>12</ymin>
\t\t\t<xmax>360</xmax>
\t\t\t<ymax>470</ymax>
\t\t</bndbox>
\t</object>
\t<object>
\t\t<name>car</name>
\t\t<pose>Unspecified</pose>
\t\t<truncated>1</truncated>
\t\t<difficult>0</difficult>
\t\t<bndbox>
\t\t\t<xmin>300</xmin>
\t\t\t<ymin>100</ymin>
\t\t\t<xmax>420</xmax>
\t\t\t<ymax>180</ymax>
\t\t</bndbox>
\t</object>
\t<object>
\t\t<name>dog</name>
\t\t<pose>Unspecified</pose>
\t\t<truncated>0</truncated>
\t\t<difficult>1</difficult>
\t\t<bndbox>
\t\t\t<xmin>48</xmin>
\t\t\t<ymin>240</ymin>
\t\t\t<xmax>195</xmax>
\t\t\t<ymax>371</ymax>
\t\t</bndbox>
\t</object>
</annotation>
"""

# As Ultralytics writes them: data.yaml with a names mapping, labels/<stem>.txt.
DATA_YAML = b"""# Ultralytics YOLO dataset
path: ../datasets/street
train: images/train
val: images/val
test:

names:
  0: person
  1: car
  2: dog
"""

YOLO_SAME = b"""0 0.2875 0.470703125 0.55 0.89453125
1 0.5625 0.2734375 0.1875 0.15625
2 0.18984375 0.5966796875 0.2296875 0.255859375
"""


def _corners(image_object: ImageObject) -> tuple[float, ...]:
    box = image_object.box
    return (box.xmin, box.ymin, box.xmax, box.ymax)


def _coco_bytes(document: dict) -> bytes:
    return json.dumps(document, indent=2).encode()


def test_coco_reads_every_field_with_non_contiguous_categories():
    coco = read_coco(_coco_bytes(COCO_SAME), "ann/instances_val.json")

    assert coco.categories == (
        Category(1, "person", "person"),
        Category(3, "car", "vehicle"),
        Category(18, "dog", "animal"),
    )
    first, second = coco.images
    assert (first.image, first.width, first.height, first.image_id) == (
        "000000397133.jpg",
        640,
        512,
        397133,
    )
    assert first.source == "ann/instances_val.json"
    person, car, dog = first.objects
    assert person == ImageObject(
        class_id=1,
        class_text="person",
        box=Box(8.0, 12.0, 360.0, 470.0),
        area=120000.5,
        segmentation=[[8, 12, 360, 12, 360, 470]],
        annotation_id=101,
    )
    # The two-part polygon is kept as its two parts.
    assert car.segmentation == [[300, 100, 420, 100, 420, 140], [300, 150, 420, 150, 420, 180]]
    assert (car.class_id, car.class_text, car.is_crowd) == (3, "car", False)
    # The crowd's compressed RLE is kept as COCO wrote it.
    assert (dog.class_id, dog.is_crowd, dog.area) == (18, True, 19257.0)
    assert dog.segmentation == {"size": [512, 640], "counts": "Xb0j1k1O1O0000N2N2M3O100O1"}
    edge, nan_box = second.objects
    assert edge.segmentation == {"size": [512, 640], "counts": [307600, 40, 472, 40, 1000]}
    assert _corners(edge) == (600.0, 400.0, 680.0, 450.0)
    assert math.isnan(nan_box.box.xmin) and nan_box.segmentation is None


def test_coco_image_without_annotations_is_kept_with_no_objects():
    document = dict(COCO_SAME, annotations=[])
    coco = read_coco(_coco_bytes(document), "a.json")
    assert [image.objects for image in coco.images] == [(), ()]


def test_coco_boxes_clip_and_drop_with_reasons():
    coco = read_coco(_coco_bytes(COCO_SAME), "a.json")
    edge, nan_box = coco.images[1].objects
    assert clip_box(edge.box, 640, 512) == (Box(600.0, 400.0, 640.0, 450.0), CLIPPED)
    assert clip_box(nan_box.box, 640, 512) == (None, NOT_FINITE)


def test_coco_unknown_category_names_the_annotation_id():
    document = json.loads(_coco_bytes(COCO_SAME))
    document["annotations"][2]["category_id"] = 99
    with pytest.raises(AnnotationError) as caught:
        read_coco(_coco_bytes(document), "ann/instances_val.json")
    assert str(caught.value) == (
        "ann/instances_val.json, annotation id 103: category_id 99 is not in the file's "
        "categories (1, 3, 18); fix: add the category to 'categories' or correct the "
        "annotation's category_id"
    )


def test_coco_id_of_the_wrong_type_names_the_annotation_id():
    document = json.loads(_coco_bytes(COCO_SAME))
    document["annotations"][1]["category_id"] = [3]
    with pytest.raises(AnnotationError, match=r"^a\.json, annotation id 102: category_id \[3\] is"):
        read_coco(_coco_bytes(document), "a.json")
    document["annotations"][1]["category_id"] = 3
    document["annotations"][1]["image_id"] = {"id": 397133}
    with pytest.raises(AnnotationError, match=r"^a\.json, annotation id 102: image_id \{'id'"):
        read_coco(_coco_bytes(document), "a.json")


def test_coco_unknown_image_names_the_annotation_id():
    document = json.loads(_coco_bytes(COCO_SAME))
    document["annotations"][0]["image_id"] = 5
    with pytest.raises(AnnotationError, match=r"^a\.json, annotation id 101: image_id 5 is not"):
        read_coco(_coco_bytes(document), "a.json")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("bbox", [1, 2, 3], "annotation id 101: bbox [1, 2, 3] is not [x, y, width, height]"),
        ("segmentation", [[1, 2, 3]], "annotation id 101: a segmentation polygon is not"),
        ("segmentation", {"counts": "abc"}, "annotation id 101: segmentation {'counts'"),
    ],
)
def test_coco_malformed_annotation_names_its_id(field, value, message):
    document = json.loads(_coco_bytes(COCO_SAME))
    document["annotations"][0][field] = value
    with pytest.raises(AnnotationError) as caught:
        read_coco(_coco_bytes(document), "a.json")
    assert str(caught.value).startswith(f"a.json, {message}")


def test_coco_malformed_json_names_file_and_line():
    data = b'{\n  "images": [],\n  "annotations": [\n    {"id": 1,}\n  ]\n}\n'
    with pytest.raises(AnnotationError) as caught:
        read_coco(data, "ann/broken.json")
    assert str(caught.value).startswith("ann/broken.json, line 4 column 14: malformed JSON")
    assert caught.value.where == "line 4 column 14"
    assert "fix: " in str(caught.value)


def test_voc_reads_labelimg_file_with_corners_as_written():
    annotations = read_voc(VOC_SAME, "Annotations/000000397133.xml")
    assert (annotations.image, annotations.width, annotations.height) == (
        "000000397133.jpg",
        640,
        512,
    )
    person, car, dog = annotations.objects
    # Continuous coordinates, no 1-based shift: xmin=8 is the left edge at 8 (TF's reading).
    assert person == ImageObject(
        class_id=None, class_text="person", box=Box(8.0, 12.0, 360.0, 470.0), annotation_id=1
    )
    assert (car.truncated, car.difficult, dog.truncated, dog.difficult) == (
        True,
        False,
        False,
        True,
    )


def test_voc_whole_image_box_covers_the_whole_image():
    data = VOC_SAME.replace(b"<xmin>8</xmin>", b"<xmin>0</xmin>").replace(
        b"<ymin>12</ymin>", b"<ymin>0</ymin>"
    )
    data = data.replace(b"<xmax>360</xmax>", b"<xmax>640</xmax>").replace(
        b"<ymax>470</ymax>", b"<ymax>512</ymax>"
    )
    person = read_voc(data, "a.xml").objects[0]
    assert clip_box(person.box, 640, 512) == (Box(0.0, 0.0, 640.0, 512.0), KEPT)


def test_voc_malformed_xml_names_file_and_line():
    data = VOC_SAME.replace(b"<xmax>420</xmax>", b"<xmax>420</xmin>")
    with pytest.raises(AnnotationError) as caught:
        read_voc(data, "Annotations/bad.xml")
    assert str(caught.value).startswith(
        "Annotations/bad.xml, line 34 column 15: malformed XML (mismatched tag); fix: "
    )


def test_voc_non_numeric_corner_names_the_object():
    data = VOC_SAME.replace(b"<xmax>420</xmax>", b"<xmax>4x0</xmax>")
    with pytest.raises(AnnotationError) as caught:
        read_voc(data, "a.xml")
    assert str(caught.value) == (
        "a.xml, object #2: <xmax> '4x0' is not a number; fix: write the xmax pixel"
    )


def test_yolo_yaml_names_mapping_and_list():
    data = read_yolo_yaml(DATA_YAML, "street/data.yaml")
    assert data.categories == (Category(0, "person"), Category(1, "car"), Category(2, "dog"))
    assert data.root == "../datasets/street"
    assert data.splits == {"train": ("images/train",), "val": ("images/val",)}
    listed = read_yolo_yaml(b"names: [person, car]\ntrain: [a/images, b/images]\n", "d.yaml")
    assert listed.categories == (Category(0, "person"), Category(1, "car"))
    assert listed.splits == {"train": ("a/images", "b/images")}


def test_yolo_malformed_yaml_names_file_and_line():
    with pytest.raises(AnnotationError) as caught:
        read_yolo_yaml(b"names:\n  0: person\n  1: [car\n", "data.yaml")
    assert str(caught.value).startswith("data.yaml, line 4 column 1: malformed YAML")
    with pytest.raises(AnnotationError, match=r"^data\.yaml: no 'names' key"):
        read_yolo_yaml(b"train: images\n", "data.yaml")


def test_yolo_polygon_line_gives_pixel_polygon_and_box():
    names = read_yolo_yaml(DATA_YAML, "data.yaml").categories
    data = b"2 0.015625 0.0390625 0.171875 0.0390625 0.171875 0.13671875\n"
    annotations = read_yolo_labels(
        data, "labels/val/a.txt", width=WIDTH, height=HEIGHT, names=names
    )
    assert annotations.image == "a"
    (dog,) = annotations.objects
    assert dog.segmentation == [[10.0, 20.0, 110.0, 20.0, 110.0, 70.0]]
    assert dog.box == Box(10.0, 20.0, 110.0, 70.0)
    assert (dog.class_id, dog.class_text, dog.annotation_id) == (2, "dog", 1)


def test_yolo_empty_file_is_an_image_with_no_objects():
    names = read_yolo_yaml(DATA_YAML, "data.yaml").categories
    empty = read_yolo_labels(b"", "labels/b.txt", width=WIDTH, height=HEIGHT, names=names)
    assert empty.objects == ()


def test_yolo_nan_box_is_dropped_with_its_reason():
    names = read_yolo_yaml(DATA_YAML, "data.yaml").categories
    data = b"0 nan 0.5 0.1 0.1\n1 0.5 0.5 0.1 -0.1\n1 1.5 0.5 0.2 0.2\n"
    boxes = read_yolo_labels(data, "l.txt", width=WIDTH, height=HEIGHT, names=names).objects
    assert [clip_box(o.box, WIDTH, HEIGHT) for o in boxes] == [
        (None, NOT_FINITE),
        (None, NEGATIVE_SIZE),
        (None, NO_AREA_INSIDE),
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        (b"0 0.5 0.5 0.1", "l.txt, line 2: 3 values after the class"),
        (b"0 0.5 0.5 0.1 0.1 0.2", "l.txt, line 2: 5 values after the class"),
        (b"person 0.5 0.5 0.1 0.1", "l.txt, line 2: 'person 0.5 0.5 0.1 0.1' is not numbers"),
        (b"7 0.5 0.5 0.1 0.1", "l.txt, line 2: class 7 is not in the class names (ids 0, 1, 2)"),
    ],
)
def test_yolo_bad_line_names_file_and_line_number(line, message):
    names = read_yolo_yaml(DATA_YAML, "data.yaml").categories
    data = b"0 0.5 0.5 0.1 0.1\n" + line + b"\n"
    with pytest.raises(AnnotationError) as caught:
        read_yolo_labels(data, "l.txt", width=WIDTH, height=HEIGHT, names=names)
    assert str(caught.value).startswith(message)
    assert "; fix: " in str(caught.value)


def test_same_objects_give_same_pixel_boxes_in_all_three_formats():
    coco = read_coco(_coco_bytes(COCO_SAME), "instances.json").images[0].objects
    voc = read_voc(VOC_SAME, "a.xml").objects
    names = read_yolo_yaml(DATA_YAML, "data.yaml").categories
    yolo = read_yolo_labels(YOLO_SAME, "a.txt", width=WIDTH, height=HEIGHT, names=names).objects
    for objects in (coco, voc, yolo):
        assert [o.class_text for o in objects] == [name for name, _ in SAME_OBJECTS]
        for image_object, (_, expected) in zip(objects, SAME_OBJECTS, strict=True):
            assert _corners(image_object) == pytest.approx(expected, abs=1e-6, rel=0)


@pytest.mark.parametrize(
    "box, expected",
    [
        (Box(10, 20, 30, 40), (Box(10, 20, 30, 40), KEPT)),
        (Box(-5, 20, 30, 600), (Box(0.0, 20, 30, 512.0), CLIPPED)),
        (Box(650, 20, 700, 40), (None, NO_AREA_INSIDE)),
        (Box(10, 20, 10, 40), (None, NO_AREA_INSIDE)),
        (Box(30, 20, 10, 40), (None, NEGATIVE_SIZE)),
        (Box(10, 20, math.inf, 40), (None, NOT_FINITE)),
    ],
)
def test_clip_box(box, expected):
    assert clip_box(box, WIDTH, HEIGHT) == expected


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"\n" + json.dumps(COCO_SAME).encode(), "coco"),
        (VOC_SAME, "voc"),
        (b'<?xml version="1.0"?>\n' + VOC_SAME, "voc"),
        (YOLO_SAME, "yolo_labels"),
        (b"", "yolo_labels"),
        (DATA_YAML, "yolo_yaml"),
        (b"person\ntraffic light\nstop sign\n", "yolo_names"),
        (b"0\n1\n2\n", "yolo_names"),  # digits as class names: a label line has five numbers
        (b"0 0.5 0.5 0.1\n", "yolo_labels"),  # a bad label line, which the reader names
        (b"car 0.5 0.5 0.1 0.1\n", "yolo_labels"),  # a class named, not numbered: likewise
        (b'{"categories": [{"id": 0, "name": "car"}], "info": {}}', "companion"),
        (b"classes = 2\ntrain = data/train.txt\nnames = data/obj.names\n", "companion"),
        (b"data/obj_train_data/a.jpg\ndata/obj_train_data/b.PNG\n", "companion"),
        (b"# label:color_rgb:parts:actions\nbackground:0,0,0::\ncar:128,0,0::\n", "companion"),
    ],
)
def test_annotation_format_from_content(data, expected):
    # The names lie on purpose: only the content decides.
    assert annotation_format(data, "misnamed.txt") == expected


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"type": "FeatureCollection"}', "x: a JSON object without 'images' or 'annotations'"),
        (b"<svg></svg>", "x: XML whose root is <svg>, not <annotation>"),
        (b"hello: world\n", "x: text that is no annotation format (starts 'hello: world')"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "x: binary data, not text"),
        (b'{"info": {\n]', "x, line 2 column 1: malformed JSON"),
        (b"- person\n- car\n", "x: text that is no annotation format (starts '- person')"),
        (
            b'[{"image_id": 1, "category_id": 3, "bbox": [1, 2, 3, 4], "score": 0.9}]',
            "x: a JSON list of detections (COCO results, as COCO.loadRes reads them); fix: pass",
        ),
    ],
)
def test_annotation_format_says_what_it_saw(data, message):
    with pytest.raises(AnnotationError) as caught:
        annotation_format(data, "x")
    assert str(caught.value).startswith(message)


def test_class_names_one_a_line_ids_from_zero():
    data = "\ufeffperson\r\ntraffic light\r\n dog \n\n\n".encode()
    assert read_class_names(data, "obj.names") == (
        Category(0, "person"),
        Category(1, "traffic light"),
        Category(2, "dog"),
    )


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\n\n", "classes.txt: no class names; fix: write one class name a line"),
        (
            b"person\n\ncar\n",
            "classes.txt, line 2: a blank line before the last name shifts every id after it; "
            "fix: remove it or name its class",
        ),
        (
            b"person\ncar\nperson\n",
            "classes.txt, line 3: 'person' names line 1's class too; fix: name each class once",
        ),
        (b"car\n\xff\n", "classes.txt: not UTF-8 text (invalid start byte)"),
    ],
)
def test_class_names_errors_name_the_line_and_the_fix(data, message):
    with pytest.raises(AnnotationError) as caught:
        read_class_names(data, "classes.txt")
    assert str(caught.value).startswith(message)


def test_yolo_labels_read_with_names_from_a_names_file():
    names = read_class_names(b"person\ncar\ndog\n", "classes.txt")
    yolo = read_yolo_labels(YOLO_SAME, "a.txt", width=WIDTH, height=HEIGHT, names=names).objects
    assert [(o.class_id, o.class_text) for o in yolo] == [(0, "person"), (1, "car"), (2, "dog")]


def test_a_coco_file_is_told_from_its_first_keys_and_read_for_its_errors():
    # Recognised without loading it whole; read_coco then names the malformed line.
    data = b'{"images": [\n}'
    assert annotation_format(data, "x") == "coco"
    with pytest.raises(AnnotationError, match="x, line 2"):
        read_coco(data, "x")
