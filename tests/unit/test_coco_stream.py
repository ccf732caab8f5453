"""transforms/annotations/coco.py's streaming read: a file object gives what its bytes give,
however the stream cuts its reads; segmentations are held compactly and convert back to what
pycocotools takes; the result pickles; a JSON error names its line and column, past the first
chunk too; and a COCO-shaped file grows the reader's memory by at most twice its size
(bench/coco_memory.py measures COCO train2017's 448 MB the same way)."""

from __future__ import annotations

import io
import json
import math
import pickle

import numpy as np
import pytest
from pycocotools import mask as coco_mask

from bench.coco_memory import measure, write_coco_like
from transforms.annotations.coco import read_coco
from transforms.annotations.objects import (
    AnnotationError,
    Polygons,
    Rle,
    coco_segmentation,
)

pytestmark = pytest.mark.unit

# NaN and Infinity as Python's json writes them, in numbers and (as text) in strings; escapes,
# quotes and non-ASCII in names; categories last, their ids not contiguous; a string image id.
DOCUMENT = {
    "info": {"description": "NaN and Infinity in text stay text: \"NaN\", -Infinity \\"},
    "images": [
        {"id": 7, "file_name": "NaN.jpg", "width": 640, "height": 480},
        {"id": "b-2", "file_name": "caf\u00e9 \"Infinity\" \\NaN.jpg", "width": 10, "height": 10},
    ],
    "annotations": [
        {"id": 1, "image_id": 7, "category_id": 90, "bbox": [1.25, 2.5, 3, 4], "area": 12.5,
         "iscrowd": 0,
         "segmentation": [[510.66, 423.01, 511.72, 420.03, 500.1, 400.99], [1, 2, 3, 4, 5, 6]]},
        {"id": 2, "image_id": "b-2", "category_id": 2,
         "bbox": [math.inf, 2, 1, -math.inf], "area": math.nan, "iscrowd": 1,
         "segmentation": {"size": [10, 10], "counts": [3, 4, 93]}},
        {"id": 3, "image_id": 7, "category_id": 2, "bbox": [0, 0, 1, 1], "iscrowd": 1,
         "segmentation": {"size": [10, 10], "counts": "52203"}},
    ],
    "categories": [{"id": 90, "name": "toothbrush"}, {"id": 2, "name": "bicycle"}],
}  # fmt: skip


class _Trickle(io.RawIOBase):
    """A stream that gives at most `step` bytes a read, as a socket may: every token, escape and
    multi-byte character gets cut somewhere."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._step, self._at = data, step, 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self._step if size < 0 else min(size, self._step)
        chunk = self._data[self._at : self._at + size]
        self._at += len(chunk)
        return chunk


def _bytes(document: dict, **dumps) -> bytes:
    return json.dumps(document, **dumps).encode()


def test_stream_and_bytes_give_the_same_result_however_reads_are_cut():
    data = _bytes(DOCUMENT, indent=1)
    expected = repr(read_coco(data, "a.json"))  # repr: NaN != NaN, but 'nan' == 'nan'
    for step in (1, 2, 3, 5, 7, 64 * 1024):
        assert repr(read_coco(_Trickle(data, step), "a.json")) == expected, step
    assert repr(read_coco(io.BytesIO(data), "a.json")) == expected


def test_nan_and_infinity_are_numbers_outside_strings_and_text_inside():
    coco = read_coco(_Trickle(_bytes(DOCUMENT, ensure_ascii=False), 3), "a.json")
    first, second = coco.images
    assert first.image == "NaN.jpg"
    assert second.image == 'caf\u00e9 "Infinity" \\NaN.jpg'
    (crowd,) = second.objects
    box = crowd.box
    assert (box.xmin, box.ymin, box.xmax, box.ymax) == (math.inf, 2.0, math.inf, -math.inf)
    assert math.isnan(crowd.area)
    assert [c.name for c in coco.categories] == ["toothbrush", "bicycle"]


def test_segmentations_are_compact_and_convert_back():
    coco = read_coco(_bytes(DOCUMENT), "a.json")
    polygon, compressed = coco.images[0].objects
    runs = coco.images[1].objects[0].segmentation
    assert isinstance(polygon.segmentation, Polygons)
    assert polygon.segmentation.coords.typecode == "f" and polygon.segmentation.starts == (6,)
    assert isinstance(runs, Rle) and runs.counts.typecode == "I"
    # float32 holds the file's 2 decimals: rounding gives the numbers back, integers exactly.
    parts = coco_segmentation(polygon.segmentation)
    assert [[round(v, 2) for v in part] for part in parts] == [
        [510.66, 423.01, 511.72, 420.03, 500.1, 400.99],
        [1, 2, 3, 4, 5, 6],
    ]
    assert parts[0][0] != 510.66  # float32, not the float64 the file's text gives
    assert polygon.segmentation == DOCUMENT["annotations"][0]["segmentation"]
    assert polygon.segmentation != [[510.67, 423.01, 511.72, 420.03, 500.1, 400.99]]
    assert coco_segmentation(runs) == {"size": [10, 10], "counts": [3, 4, 93]}
    assert coco_segmentation(compressed.segmentation) == {"size": [10, 10], "counts": "52203"}
    assert coco_segmentation([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]) == [[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]


def test_converted_segmentations_give_pycocotools_the_masks_of_the_file():
    height, width = 48, 64
    truth = np.zeros((height, width), np.uint8, order="F")
    truth[5:20, 10:40] = 1
    encoded = coco_mask.encode(truth)
    document = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": width, "height": height}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1],
             "segmentation": [[10.25, 5.5, 39.75, 5.5, 39.75, 19.5], [1, 1, 4, 1, 4, 4]]},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "iscrowd": 1,
             "segmentation": {"size": [height, width], "counts": encoded["counts"].decode()}},
            {"id": 3, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "iscrowd": 1,
             "segmentation": {"size": [height, width], "counts": [325, 15, 33, 15, 2684]}},
        ],
        "categories": [{"id": 1, "name": "thing"}],
    }  # fmt: skip
    objects = read_coco(_bytes(document), "a.json").images[0].objects
    for image_object, annotation in zip(objects, document["annotations"], strict=True):
        ours = _mask(coco_segmentation(image_object.segmentation), height, width)
        theirs = _mask(annotation["segmentation"], height, width)
        assert ours.any() and (ours == theirs).all(), annotation["id"]
    assert (_mask(coco_segmentation(objects[1].segmentation), height, width) == truth).all()


def _mask(segmentation, height: int, width: int) -> np.ndarray:
    # As pycocotools' COCO.annToRLE does it: polygons and runs through frPyObjects.
    if isinstance(segmentation, list):
        rle = coco_mask.merge(coco_mask.frPyObjects(segmentation, height, width))
    elif isinstance(segmentation["counts"], list):
        rle = coco_mask.frPyObjects(segmentation, height, width)
    else:
        rle = segmentation
    return coco_mask.decode(rle)


def test_a_generated_coco_file_reads_as_json_load_sees_it(tmp_path):
    path = str(tmp_path / "instances.json")
    write_coco_like(path, mb=0.5)
    with open(path, "rb") as f:
        coco = read_coco(f, path)
    with open(path, "rb") as f:
        document = json.load(f)
    names = {c["id"]: c["name"] for c in document["categories"]}
    assert [c.id for c in coco.categories] == list(names)
    assert [i.image_id for i in coco.images] == [i["id"] for i in document["images"]]
    objects = {o.annotation_id: o for image in coco.images for o in image.objects}
    assert len(objects) == len(document["annotations"])
    for annotation in document["annotations"]:
        image_object = objects[annotation["id"]]
        x, y, w, h = annotation["bbox"]
        assert (image_object.box.xmin, image_object.box.ymax) == (x, y + h)
        assert image_object.class_text == names[annotation["category_id"]]
        assert image_object.segmentation == annotation["segmentation"]


def test_the_result_pickles(tmp_path):
    path = str(tmp_path / "instances.json")
    write_coco_like(path, mb=0.2)
    with open(path, "rb") as f:
        coco = read_coco(f, path)
    again = pickle.loads(pickle.dumps(coco))
    assert again == coco
    segmentations = [o.segmentation for image in again.images for o in image.objects]
    assert {type(s) for s in segmentations} == {Polygons, Rle}
    polygons = Polygons.from_parts([[1.5, 2.5, 3.5, 4.5, 5, 6], [7, 8, 9, 10, 11, 12]])
    assert pickle.loads(pickle.dumps(polygons)) == polygons
    runs = Rle.from_dict({"size": [4, 5], "counts": [0, 20]})
    assert pickle.loads(pickle.dumps(runs)) == {"size": [4, 5], "counts": [0, 20]}


# Past the first 64 KiB chunk the parser reads, on lines where NaN (rewritten for the parser)
# comes first, and at the file's end. The column counts bytes: the same as json's for ASCII.
_PADDING = [{"id": i, "file_name": f"{i:08d}.jpg"} for i in range(3000)]


@pytest.mark.parametrize(
    "good, bad",
    [
        ('"bbox": [1, 2, 3, 4]', '"bbox": [1, 2, 3, 4],}'),
        ('"bbox": [1, 2, 3, 4]', '"bbox": [1, 2 3, 4]'),
        ('"bbox": [1, 2, 3, 4]', '"bbox": [NaN, NaN, 3, 4] "area": 1'),
        ('"bbox": [1, 2, 3, 4]', '"bbox": [1, 2, 3, tru]'),
        ('"bbox": [1, 2, 3, 4]', '"bbox": [1, 2, 3, @]'),
        ('"name": "x"}]', '"name": "x"}] "more": 1'),
        ('"name": "x"}]\n}', '"name": "x"}]\n} {}'),
        ('"name": "x"}]\n}', '"name": "x"'),
    ],
)
def test_malformed_json_names_the_line_and_column_json_would(good, bad):
    text = (
        f'{{\n "images": {json.dumps(_PADDING, indent=1)},\n "annotations": [\n'
        '  {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4]}\n ],\n'
        ' "categories": [{"id": 1, "name": "x"}]\n}\n'
    )
    assert text.count(good) == 1
    data = text.replace(good, bad).encode()
    assert len(data) > 64 * 1024
    with pytest.raises(json.JSONDecodeError) as python:
        json.loads(data)
    for source in (data, _Trickle(data, 1000)):
        with pytest.raises(AnnotationError) as caught:
            read_coco(source, "ann/broken.json")
        assert caught.value.where == f"line {python.value.lineno} column {python.value.colno}"
        assert caught.value.problem.startswith("malformed JSON: ")


def test_column_counts_bytes_after_non_ascii_text():
    data = '{"images": [{"id": 1, "file_name": "\u00e9.jpg"} "x"]}'.encode()
    with pytest.raises(AnnotationError) as caught:
        read_coco(data, "a.json")
    # json says column 45 (characters); the one two-byte character makes it 46 here.
    assert caught.value.where == "line 1 column 46"


def test_utf8_bom_is_read_and_utf16_is_refused_with_the_fix():
    data = _bytes(DOCUMENT)
    expected = repr(read_coco(data, "a.json"))
    assert repr(read_coco(b"\xef\xbb\xbf" + data, "a.json")) == expected
    assert repr(read_coco(_Trickle(b"\xef\xbb\xbf" + data, 1), "a.json")) == expected
    with pytest.raises(AnnotationError) as caught:
        read_coco(json.dumps(DOCUMENT).encode("utf-16"), "a.json")
    assert str(caught.value) == (
        "a.json: not UTF-8 text (UTF-16 or UTF-32); fix: write the file as COCO instances JSON "
        "(images, annotations, categories), in UTF-8"
    )
    with pytest.raises(AnnotationError, match=r"^a\.json, line 1 column 26: not UTF-8 text"):
        read_coco(b'{"images": [], "x": "caf\xe9"}', "a.json")


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"images": [], "annotations": [], "images": []}', "a.json: 'images' appears twice"),
        (b'{"images": {}, "annotations": []}', "a.json: 'images' is not a list"),
        (b'{"images": [], "annotations": []}', "a.json: 'categories' is missing or not a list"),
        (b'{"images": [], "annotations": [3], "categories": []}',
         "a.json: 'annotations' holds a non-object entry"),
        (b"[]", "a.json: a JSON list, not an object"),
        (b'{"images": [{"id": [1]}]}', "a.json, image #1: id [1] is no number or text"),
        (b'{"images": [{"id": 1, "file_name": "a"}, {"id": 1, "file_name": "b"}]}',
         "a.json, image id 1: the id appears twice"),
        (b"3.5", "a.json: a JSON float, not an object"),
    ],
)  # fmt: skip
def test_malformed_document_names_the_list(data, message):
    with pytest.raises(AnnotationError) as caught:
        read_coco(data, "a.json")
    assert str(caught.value).startswith(message + "; fix: ")


def test_unknown_category_after_annotations_names_the_first_such_annotation():
    document = json.loads(json.dumps(DOCUMENT).replace("NaN", "0").replace("Infinity", "1"))
    document["annotations"][1]["category_id"] = 5
    document["annotations"][2]["category_id"] = 6
    with pytest.raises(AnnotationError) as caught:
        read_coco(_bytes(document), "a.json")
    assert str(caught.value).startswith(
        "a.json, annotation id 2: category_id 5 is not in the file's categories (90, 2)"
    )


def test_reading_grows_memory_by_at_most_twice_the_file(tmp_path):
    path = str(tmp_path / "instances.json")
    size = write_coco_like(path, mb=20)
    growth = measure(path, "read_coco")["growth"]
    # A COCO train2017-sized file (452 MB) measures 1.67x in bench/coco_memory.py; json.load 7.65x.
    assert growth <= 2 * size, f"{growth / size:.2f}x the file's {size / 1e6:.0f} MB"
