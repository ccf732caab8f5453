"""An annotated dataset in `imgrec inspect` and report.html: object counts, boxes, masks and
label maps drawn on the contact sheet's thumbnails, and the three object charts; a dataset
without annotations shows none of it."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from core import schema
from pipeline.cli import main
from pipeline.report import charts, page
from pipeline.report.objects import read_objects
from pipeline.report.scan import OBJECTS, parse_example_lists, scan_dataset
from tests.object_records import (
    GRAY,
    HEIGHT,
    WIDTH,
    Obj,
    example,
    with_values,
    write_dataset,
)

pytestmark = pytest.mark.unit

_NS = "{http://www.w3.org/2000/svg}"
_CAT, _DOG = charts.PALETTE[0], charts.PALETTE[1]  # the label map's first and second class
# JPEG (4:4:4, as drawn thumbnails are saved) moves a colour this far at most on these flat
# thumbnails (measured: 15 on a box's edge).
_TOLERANCE = 30
_CAT_BOX = (0.1, 0.2, 0.5, 0.6)  # columns 16-79, rows 24-71 of the 160 x 120 thumbnail


def _records(segmentation: bool = False) -> dict[str, list]:
    return {
        "train": [
            example(
                "a", [Obj(_CAT_BOX, 1), Obj((0.6, 0.5, 0.9, 0.9), 3)], segmentation=segmentation
            ),
            example("b", []),
            example("c", [Obj((0.0, 0.0, 0.2, 0.2), 3)] * 3),
        ],
        "validation": [example("d", [Obj((0.2, 0.2, 0.4, 0.4), 1)])],
    }


def _rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], np.float64)


def _thumbnails(report: str) -> list[np.ndarray]:
    """The contact sheet's originals (each figure's first image), in page order."""
    uris = re.findall(r'<figure><div class=pair><img alt="original" src="data:image/jpeg;base64,'
                      r'([^"]+)"', report)  # fmt: skip
    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(u))), np.float64) for u in uris]


def _near(pixel: np.ndarray, expected: np.ndarray) -> bool:
    return bool(np.abs(pixel - expected).max() <= _TOLERANCE)


def _charts(report: str) -> dict[str, ET.Element]:
    """The page's SVG charts by their accessible name."""
    found = {}
    for svg in re.findall(r"<svg .*?</svg>", report, flags=re.S):
        root = ET.fromstring(svg)
        found[root.get("aria-label")] = root
    return found


def _marks(chart: ET.Element) -> list[tuple[str | None, str | None, int]]:
    """(category, series, value) of each bar."""
    return [
        (m.get("data-category"), m.get("data-series"), int(float(m.get("data-value"))))
        for m in chart.iter()
        if m.get("class") == "mark"
    ]


@pytest.fixture
def no_eval_crops(monkeypatch):
    """The reader's crops are another test's business (and TensorFlow's start-up)."""
    monkeypatch.setattr(page, "_eval_crops", lambda info, records: [None] * len(records))


def test_inspect_prints_the_object_counts(tmp_path, capsys):
    assert main(["inspect", write_dataset(tmp_path, _records())]) == 0
    out = capsys.readouterr().out
    assert "  annotations coco from 1 file; label map 2 classes; instance masks" in out
    assert "  unmatched         2   annotations naming no image found" in out
    header = "  objects        images negatives   objects     masks max/image   clipped   dropped"
    assert header in out
    assert (
        "    train             3         1         5         5         3         1         1" in out
    )
    assert (
        "    validation        1         0         1         1         1         1         1" in out
    )
    assert "  object classes (top 2 of 2)" in out
    assert re.search(r"\n    dog +4 █+ +train 4, validation 0\n", out), out
    assert re.search(r"\n    cat +2 █+ +train 1, validation 1", out), out


def test_inspect_of_a_dataset_without_annotations_shows_no_objects(tmp_path, capsys):
    data_dir = write_dataset(tmp_path, _records(), edit=lambda info: info.pop("annotations"))
    assert main(["inspect", data_dir]) == 0
    out = capsys.readouterr().out
    assert "classes" in out and "object" not in out and "annotations" not in out


def test_thumbnails_show_each_box_in_its_class_colour(tmp_path, no_eval_crops):
    report = page.build_report(write_dataset(tmp_path, _records()))
    first = _thumbnails(report)[0]  # record "a": a cat and a dog
    assert first.shape == (HEIGHT, WIDTH, 3)
    assert _near(first[48, 16], _rgb(_CAT)) and _near(first[48, 79], _rgb(_CAT))  # left, right
    assert _near(first[71, 40], _rgb(_CAT))  # the bottom edge
    assert _near(first[90, 96], _rgb(_DOG))  # the dog's left edge
    # Inside, the instance mask tints the gray; outside every box, the image is as stored.
    tinted = GRAY * 0.55 + _rgb(_CAT) * 0.45
    assert _near(first[48, 40], tinted) and not _near(first[48, 40], np.full(3, GRAY))
    assert _near(first[100, 8], np.full(3, GRAY))
    assert "<span class=objects>cat</span> · <span class=objects>dog</span>" in report
    assert "<span class=objects>dog ×3</span>" in report  # record "c"


def test_a_label_map_is_drawn_in_its_class_colour(tmp_path, no_eval_crops):
    records = {"train": [example("a", [Obj(_CAT_BOX, 3)], masks=False, segmentation=True)]}
    report = page.build_report(write_dataset(tmp_path, records, segmentation=True))
    (thumb,) = _thumbnails(report)
    assert _near(thumb[48, 40], GRAY * 0.55 + _rgb(_DOG) * 0.45)  # class 3's colour: the dog's
    assert _near(thumb[100, 120], np.full(3, GRAY))  # background: not drawn


def test_a_mask_that_does_not_open_leaves_the_boxes_drawn(tmp_path, no_eval_crops):
    records = _records()
    records["train"][0] = with_values(records["train"][0], schema.OBJECT_MASK, [b"?", b"?"])
    first = _thumbnails(page.build_report(write_dataset(tmp_path, records)))[0]
    assert _near(first[48, 16], _rgb(_CAT)) and _near(first[48, 40], np.full(3, GRAY))


def test_the_report_charts_objects_per_class_per_image_and_box_sizes(tmp_path, no_eval_crops):
    report = page.build_report(write_dataset(tmp_path, _records()))
    found = _charts(report)
    per_class = _marks(found["objects per class"])
    assert sorted(per_class) == [("cat", "train", 1), ("cat", "validation", 1),
                                 ("dog", "train", 4), ("dog", "validation", 0)]  # fmt: skip
    # Images by their count of objects: b has 0, d 1, a 2, c 3.
    assert [v for _, _, v in _marks(found["objects per image"])] == [1, 1, 1, 1]
    sizes = _marks(found["box sizes"])
    # Boxes of 0.2 x 0.2 of 160 x 120 (768 px²) are small; a's cat (64 x 48 = 3072 px²) and
    # dog (48 x 48) are medium.
    assert ("small", "train", 3) in sizes and ("medium", "train", 2) in sizes
    assert ("large", "train", 0) in sizes and ("small", "validation", 1) in sizes
    assert '<td class=n data-count="negatives">1</td>' in report
    assert "<span id=label-map-size>2</span>" in report and "<span id=unmatched>2</span>" in report


def test_objects_per_image_share_bars_past_thirty_counts(tmp_path, no_eval_crops):
    many = [Obj((0.1, 0.1, 0.2, 0.2), 1)] * 70
    records = {"train": [example("many", many, masks=False), example("none", [])]}
    chart = _charts(page.build_report(write_dataset(tmp_path, records)))["objects per image"]
    marks = [m for m in chart.iter() if m.get("class") == "mark"]
    assert len(marks) == 24  # counts 0-70 three to a bar
    assert marks[0].find(f"{_NS}title").text.startswith("0–2: 1")
    assert marks[-1].find(f"{_NS}title").text.startswith("69–71: 1")


def test_a_dataset_without_annotations_reports_no_objects(tmp_path, no_eval_crops):
    data_dir = write_dataset(tmp_path, _records(), edit=lambda info: info.pop("annotations"))
    report = page.build_report(data_dir)
    assert "<h2>Objects" not in report and "objects-note" not in report
    assert "class=objects" not in report
    assert set(_charts(report)) == {"classes per split", "image sizes", "aspect ratios",
                                    "shard sizes"}  # fmt: skip
    first = _thumbnails(report)[0]
    assert _near(first[48, 16], np.full(3, GRAY))  # no box drawn
    rows = scan_dataset(data_dir, _info(data_dir))["records"]["train"]
    assert all(OBJECTS not in r for r in rows)


def _info(data_dir: str) -> dict:
    with open(os.path.join(data_dir, schema.DATASET_INFO)) as f:
        return json.load(f)


def test_the_scan_counts_objects_and_reads_every_value_of_a_list(tmp_path):
    data_dir = write_dataset(tmp_path, _records())
    rows = scan_dataset(data_dir, _info(data_dir))["records"]
    assert [r[OBJECTS] for r in rows["train"]] == [2, 0, 3]
    assert rows["train"][0][schema.HEIGHT] == HEIGHT  # the header fields as before
    record = _records()["train"][0].SerializeToString()
    lists = parse_example_lists(record, {schema.OBJECT_LABEL, schema.OBJECT_TEXT})
    assert lists == {schema.OBJECT_LABEL: [1, 3], schema.OBJECT_TEXT: [b"cat", b"dog"]}
    objects = read_objects(record)
    assert objects.boxes[0] == pytest.approx(_CAT_BOX) and objects.texts == ["cat", "dog"]
    assert len(objects.masks) == 2 and objects.segmentation == b""
