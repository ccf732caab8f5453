"""`imgrec convert --annotations` through the real command line, in fresh processes, with default
options: a CVAT COCO export, a CVAT Pascal VOC export and an Ultralytics YOLO dataset of the same
scene each convert with nothing but --annotations and --output, every record decodes with the
Object Detection API's keys, and `imgrec verify` passes; a malformed annotation file exits 2 with
one `imgrec:` line and writes nothing.

The conversions' details (the same objects through every tool, masks against pycocotools, bad
boxes, splits, EXIF): tests/integration/test_annotations.py, in process.
"""

from __future__ import annotations

import collections
import json
import os
import re

import pytest

from core import schema
from tests.annotation_exports import (
    CROWD,
    POLYGON,
    write_cvat_coco,
    write_cvat_voc,
    write_ultralytics,
)
from tests.integration.test_annotations import od_api_records, write_images, write_photo
from tests.runs import cli

pytestmark = pytest.mark.e2e

# One scene, exported as each tool does: CVAT's VOC keeps the boxes only, Ultralytics drops the
# crowd region (convert_coco skips iscrowd), CVAT's COCO keeps all three shapes. dock.jpg's boat
# crosses the right edge (clipped); sea.jpg has no objects.
SCENE = (
    (
        "harbour.jpg",
        160,
        120,
        [
            ("boat", 10, 20, 90, 80, POLYGON),
            ("person", 100, 30, 130, 100),
            ("boat", 96, 104, 150, 118, CROWD),
        ],
    ),
    ("quay.jpg", 128, 96, [("person", 8.5, 10.25, 40, 90.75), ("dog", 60, 50, 120, 90)]),
    ("sea.jpg", 96, 72, []),
    ("dock.jpg", 120, 90, [("boat", 0, 45, 130, 90)]),
)
_KEPT = {
    "coco": (None, POLYGON, CROWD),  # None: a box (the writers' default shape)
    "voc": (None,),
    "yolo": (None, POLYGON),
}
_WRITERS = {"coco": write_cvat_coco, "voc": write_cvat_voc, "yolo": write_ultralytics}


def _expected(fmt: str) -> dict[str, list[str]]:
    """image -> the class texts of its objects the format's export keeps, in order."""
    return {
        name: [obj[0] for obj in objects if (obj[5] if len(obj) > 5 else None) in _KEPT[fmt]]
        for name, _, _, objects in SCENE
    }


@pytest.fixture(scope="module")
def default_runs(tmp_path_factory) -> dict[str, tuple[str, object]]:
    """format -> (output folder, the finished `imgrec convert` process): default options."""
    runs = {}
    for fmt, writer in _WRITERS.items():
        root = tmp_path_factory.mktemp(fmt)
        export = writer(root / "export", SCENE)
        write_images(export, SCENE)
        out = str(root / "out")
        runs[fmt] = out, cli("convert", "--annotations", str(export.annotations), "--output", out)
    return runs


def _label_map(out: str) -> dict[int, str]:
    with open(os.path.join(out, schema.LABEL_MAP), encoding="utf-8") as f:
        text = f.read()
    pairs = re.findall(r'item\s*\{\s*id:\s*(\d+)\s*name:\s*"([^"]*)"\s*\}', text)
    assert len(pairs) == text.count("item"), text
    return {int(i): name for i, name in pairs}


@pytest.mark.parametrize("fmt", sorted(_WRITERS))
def test_an_export_converts_with_default_options_and_verifies(default_runs, fmt):
    out, proc = default_runs[fmt]
    expected = _expected(fmt)
    num_objects = sum(map(len, expected.values()))
    # Only imgrec's own lines on the terminal.
    assert all(line.startswith("imgrec") for line in proc.stderr.splitlines() if line.strip()), (
        proc.stderr[-3000:]
    )
    summary = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[1:] if line}
    assert summary["objects"][0] == str(num_objects), proc.stdout
    assert summary["boxes"][:3] == ["1", "clipped,", "0"], proc.stdout  # dock.jpg's boat

    with open(os.path.join(out, schema.DATASET_INFO), encoding="utf-8") as f:
        info = json.load(f)
    assert info["num_written"] == len(SCENE) and info["num_rejected"] == 0
    annotations = info["annotations"]
    assert annotations["formats"] == [fmt]
    assert sum(s["objects"] for s in annotations["splits"].values()) == num_objects
    assert sum(s["negatives"] for s in annotations["splits"].values()) == 1  # sea.jpg
    assert os.path.exists(os.path.join(out, "report.html"))  # default options: the report too

    records = od_api_records(out)  # every record, decoded as the OD API's decoder does
    label_map = _label_map(out)
    assert sorted(label_map.values()) == sorted({t for ts in expected.values() for t in ts})
    for name, texts in expected.items():
        record = records[name]
        assert collections.Counter(record["texts"]) == collections.Counter(texts), (fmt, name)
        for label, text in zip(record["classes"], record["texts"], strict=True):
            assert label_map[int(label)] == text, (fmt, name)
    # Instance masks where the export has a polygon or RLE: harbour.jpg's boat.
    assert len(records["harbour.jpg"]["masks"]) == (
        0 if fmt == "voc" else len(expected["harbour.jpg"])
    )

    verified = cli("verify", out)
    assert "OK" in verified.stdout and f"{len(SCENE)} records" in verified.stdout, verified.stdout


def test_inspect_prints_the_object_counts(default_runs):
    out, _ = default_runs["coco"]
    shown = cli("inspect", out).stdout
    objects = [line.split() for line in shown.splitlines() if line.split()[:1] == ["objects"]]
    assert objects and objects[0][1] == str(sum(map(len, _expected("coco").values()))), shown


def test_a_malformed_coco_file_exits_2_with_one_line_and_writes_nothing(tmp_path):
    write_photo(tmp_path / "images" / "a.jpg", 64, 48, seed=3)
    broken = tmp_path / "annotations" / "instances_default.json"
    broken.parent.mkdir()
    broken.write_text(
        '{"images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],\n'
        ' "annotations": [{"id": 1, "image_id": 1, "bbox": [1, 2, 3 4]}]}\n',
        encoding="utf-8",
    )
    out = tmp_path / "out"
    proc = cli(
        "convert", "--input", str(tmp_path / "images" / "*.jpg"), "--annotations", str(broken),
        "--output", str(out), check=False,
    )  # fmt: skip
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("imgrec: "), proc.stderr
    assert str(broken) in lines[0] and "line 2" in lines[0], lines[0]
    assert not out.exists() or not any(out.iterdir()), sorted(os.listdir(out))
