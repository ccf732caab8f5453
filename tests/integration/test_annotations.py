"""`imgrec convert --annotations` in process, read back as a detection model's input pipeline
reads it: the same objects exported by CVAT as COCO, VOC and YOLO (and as an Ultralytics dataset)
give the same records; every record decodes with the TensorFlow Object Detection API's key
conventions, its instance masks equal pycocotools' own; boxes crossing the edge, annotations of
missing images, malformed files and ambiguous names; the images the annotations name without
--input, --split_from annotations, --masks label maps, EXIF-rotated photos; and a dataset without
--annotations keeps today's schema.

The real command line with default options: tests/e2e/test_annotations_cli.py.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools.coco import COCO

from core import schema
from tests.annotation_exports import (
    CROWD,
    POLYGON,
    Export,
    write_cvat_coco,
    write_cvat_voc,
    write_cvat_yolo,
    write_pycocotools_dataset,
    write_ultralytics,
)
from tests.runs import in_process, read_records

# Conversions here check records, not statistics or the HTML report: both left out (~1 s each).
_FAST = ("--no_analyze", "--no_report")
# Boxes that went through a tool's text (CVAT's 2-decimal COCO bbox, YOLO's '%.6f' and '%g'
# normalised centres) agree with each other to well within this, normalised.
_BOX_TOLERANCE = 1e-5

# The TensorFlow Object Detection API's tf.train.Example keys, spelled here as its decoders read
# them (object_detection/data_decoders/tf_example_decoder.py; TF Model Garden's
# official/vision/dataloaders/tf_example_decoder.py), not taken from core/schema.py: this decoder
# checks the names imgrec writes too. Object lists are VarLenFeatures (any number, 0 included).
_OD_SCALARS = {
    "image/encoded": "string",
    "image/format": "string",
    "image/filename": "string",
    "image/source_id": "string",
    "image/height": "int64",
    "image/width": "int64",
    "image/segmentation/class/encoded": "string",
    "image/segmentation/class/format": "string",
}
_OD_LISTS = {
    "image/object/bbox/xmin": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64",
    "image/object/class/text": "string",
    "image/object/area": "float",
    "image/object/is_crowd": "int64",
    "image/object/difficult": "int64",
    "image/object/mask": "string",
}


def od_api_decode(serialized: bytes) -> dict:
    """One record as the Object Detection API's decoder gives it: the image decoded with
    tf.io.decode_image, boxes [N, 4] in its (ymin, xmin, ymax, xmax) order, the per-object lists
    as arrays, each instance mask decoded with tf.io.decode_png ([N, H, W]), the semantic label
    map ([H, W, C]) or None."""
    import tensorflow as tf

    dtypes = {"string": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {
        key: tf.io.FixedLenFeature([], dtypes[dtype], default_value="" if dtype == "string" else 0)
        for key, dtype in _OD_SCALARS.items()
    }
    spec |= {key: tf.io.VarLenFeature(dtypes[dtype]) for key, dtype in _OD_LISTS.items()}
    parsed = tf.io.parse_single_example(serialized, spec)
    lists = {key: tf.sparse.to_dense(parsed[key]).numpy() for key in _OD_LISTS}
    image = tf.io.decode_image(parsed["image/encoded"], channels=3, expand_animations=False)
    height, width = int(parsed["image/height"]), int(parsed["image/width"])
    masks = [
        tf.io.decode_png(png, channels=1).numpy()[:, :, 0] for png in lists["image/object/mask"]
    ]
    segmentation = parsed["image/segmentation/class/encoded"].numpy()
    sides = ("ymin", "xmin", "ymax", "xmax")
    return {
        "filename": parsed["image/filename"].numpy().decode(),
        "source_id": parsed["image/source_id"].numpy().decode(),
        "format": parsed["image/format"].numpy().decode(),
        "height": height,
        "width": width,
        "image": image.numpy(),
        "boxes": np.stack([lists[f"image/object/bbox/{s}"] for s in sides], axis=-1).reshape(-1, 4),
        "xmin": lists["image/object/bbox/xmin"],
        "ymin": lists["image/object/bbox/ymin"],
        "xmax": lists["image/object/bbox/xmax"],
        "ymax": lists["image/object/bbox/ymax"],
        "classes": lists["image/object/class/label"],
        "texts": [t.decode() for t in lists["image/object/class/text"]],
        "area": lists["image/object/area"],
        "is_crowd": lists["image/object/is_crowd"],
        "difficult": lists["image/object/difficult"],
        "masks": np.stack(masks) if masks else np.zeros((0, height, width), np.uint8),
        "segmentation": tf.io.decode_png(segmentation).numpy() if segmentation else None,
        "segmentation_format": parsed["image/segmentation/class/format"].numpy().decode(),
    }


def check_conventions(record: dict) -> None:
    """What a detection input pipeline relies on: one value per object in every list, boxes
    inside [0, 1] with min <= max, the image and every mask at the record's height and width,
    masks of 0 and 1, none or one per object."""
    n = len(record["xmin"])
    for key in ("ymin", "xmax", "ymax", "classes", "texts", "area", "is_crowd", "difficult"):
        assert len(record[key]) == n, (record["filename"], key, len(record[key]), n)
    assert len(record["masks"]) in (0, n), record["filename"]
    boxes = record["boxes"]
    assert np.all((boxes >= 0) & (boxes <= 1)), (record["filename"], boxes)
    assert np.all(boxes[:, 0] <= boxes[:, 2]) and np.all(boxes[:, 1] <= boxes[:, 3]), boxes
    size = (record["height"], record["width"])
    assert record["image"].shape[:2] == size, record["filename"]
    assert record["masks"].shape[1:] == size, (record["filename"], record["masks"].shape)
    assert set(np.unique(record["masks"])) <= {0, 1}, record["filename"]
    if record["segmentation"] is not None:
        assert record["segmentation"].shape[:2] == size, record["filename"]


def od_api_records(out: str) -> dict[str, dict]:
    """Every record of the dataset in `out`, decoded (od_api_decode) and checked
    (check_conventions), by its image's base name; each with its "split"."""
    info = _info(out)
    records = {}
    for split, entry in info["splits"].items():
        count = 0
        for shard in entry["shards"]:
            for serialized in read_records(os.path.join(out, shard["file"])):
                record = od_api_decode(serialized) | {"split": split}
                check_conventions(record)
                name = os.path.basename(record["filename"])
                assert name not in records, name
                records[name] = record
                count += 1
        assert count == entry["num_examples"], split
    return records


def _info(out: str) -> dict:
    with open(os.path.join(out, schema.DATASET_INFO), encoding="utf-8") as f:
        return json.load(f)


def _lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _label_map(out: str) -> list[tuple[int, str]]:
    """(id, name) of each item of label_map.pbtxt, in file order."""
    with open(os.path.join(out, schema.LABEL_MAP), encoding="utf-8") as f:
        text = f.read()
    items = re.findall(r"item\s*\{([^}]*)\}", text)
    assert len(items) == text.count("item"), text
    return [
        (int(re.search(r"\bid:\s*(\d+)", item)[1]), re.search(r'\bname:\s*"([^"]*)"', item)[1])
        for item in items
    ]


def write_photo(path: Path, width: int, height: int, seed: int) -> None:
    """A JPEG of noise (no two alike: none is dropped as a duplicate)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, quality=90)


def write_images(export: Export, images, seed: int = 0) -> None:
    """The export's images where the tool keeps them, at the sizes the export gives them."""
    sizes = {name: (width, height) for name, width, height, *_ in images}
    for i, (name, path) in enumerate(sorted(export.image_paths.items())):
        if name in sizes:  # the others: images the test leaves missing
            write_photo(path, *sizes[name], seed=seed + i)


def _convert(*args, check: bool = True):
    return in_process("convert", *map(str, args), *_FAST, check=check)


def _xyxy(record: dict) -> np.ndarray:
    """The record's boxes as (xmin, ymin, xmax, ymax) rows."""
    return record["boxes"][:, [1, 0, 3, 2]]


# --- The same objects exported by CVAT as COCO, VOC and YOLO, and as an Ultralytics dataset. ---

# Class names in alphabetical order, the export's COCO ids 1..3 and YOLO's 0..2 in that order:
# COCO keeps its ids, YOLO class k is written as k + 1 and VOC's names get 1..3 in name order, so
# the four agree on every id.
LABELS = ("bicycle", "car", "person")
# Corners of at most 2 decimals: CVAT's COCO bbox keeps 2.
SCENE = (
    ("street.jpg", 160, 120, [("car", 12.5, 30.25, 70.75, 90.5), ("person", 100, 20, 140.5, 110)]),
    (
        "park.jpg",
        128,
        96,
        [("bicycle", 8, 8, 60.5, 50.25), ("person", 70.25, 10, 120, 90), ("car", 30, 60, 90, 95.5)],
    ),
    ("yard.jpg", 96, 64, []),
)
_WRITERS = {
    "cvat_coco": write_cvat_coco,
    "cvat_voc": write_cvat_voc,
    "cvat_yolo": write_cvat_yolo,
    "ultralytics": write_ultralytics,
}


@pytest.fixture(scope="module")
def same_objects(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    """tool -> (output folder, decoded records): each export converted with only --annotations."""
    root = tmp_path_factory.mktemp("same_objects")
    runs = {}
    for tool, writer in _WRITERS.items():
        export = writer(root / tool, SCENE, labels=LABELS)
        write_images(export, SCENE)  # the same pixels in every export
        out = root / f"{tool}-out"
        _convert("--annotations", export.annotations, "--output", out)
        runs[tool] = (str(out), od_api_records(str(out)))
    return runs


@pytest.mark.parametrize("tool", sorted(_WRITERS))
def test_each_tools_export_gives_the_objects_drawn(same_objects, tool):
    out, records = same_objects[tool]
    assert sorted(records) == sorted(name for name, *_ in SCENE)
    for name, width, height, objects in SCENE:
        record = records[name]
        assert (record["width"], record["height"]) == (width, height)
        expected = np.array(
            [(x0 / width, y0 / height, x1 / width, y1 / height) for _, x0, y0, x1, y1 in objects]
        ).reshape(-1, 4)
        np.testing.assert_allclose(_xyxy(record), expected, atol=_BOX_TOLERANCE, err_msg=name)
        assert record["texts"] == [obj[0] for obj in objects], name
        assert record["classes"].tolist() == [LABELS.index(obj[0]) + 1 for obj in objects]
        assert len(record["masks"]) == 0  # boxes only: no instance masks
    assert _label_map(out) == [(i, name) for i, name in enumerate(LABELS, start=1)]
    annotations = _info(out)["annotations"]
    assert annotations["label_map"] == [{"id": i, "name": n} for i, n in enumerate(LABELS, 1)]
    assert annotations["num_annotated_images"] == len(SCENE)
    assert annotations["num_unmatched_annotations"] == 0
    assert sum(s["negatives"] for s in annotations["splits"].values()) == 1  # yard.jpg


def test_the_four_exports_give_the_same_records(same_objects):
    _, reference = same_objects["cvat_coco"]
    for tool, (_, records) in same_objects.items():
        for name, record in records.items():
            np.testing.assert_allclose(
                record["boxes"], reference[name]["boxes"], atol=_BOX_TOLERANCE, err_msg=tool
            )
            assert record["texts"] == reference[name]["texts"], (tool, name)
            assert record["classes"].tolist() == reference[name]["classes"].tolist(), tool


# --- COCO masks (polygons, CVAT's uncompressed RLE, pycocotools' compressed RLE) and boxes. ---

MASKED = [
    (
        "shapes.jpg",
        120,
        96,
        [
            ("car", 10, 12, 50, 60, POLYGON),
            ("person", 60, 20, 110, 90),
            ("car", 20, 64, 44, 90, CROWD),
        ],
    ),
    ("diamond.jpg", 96, 80, [("person", 15.5, 10.25, 70.5, 66.75, POLYGON)]),
]
RLE = [("rle.jpg", 112, 84, [("person", 10, 10, 60, 70, POLYGON), ("car", 64, 8, 100, 40, CROWD)])]


@pytest.fixture(scope="module")
def masked(tmp_path_factory):
    """Two COCO files (CVAT's and a pycocotools user's) and an image neither names, converted
    with default options: (out, the COCO files, the image no annotation names)."""
    root = tmp_path_factory.mktemp("masked")
    cvat = write_cvat_coco(root / "cvat", MASKED, labels=("car", "person"))
    write_images(cvat, MASKED, seed=10)
    rle = write_pycocotools_dataset(root / "rle", RLE, labels=("car", "person"))
    write_images(rle, RLE, seed=20)
    plain = root / "more" / "plain.jpg"
    write_photo(plain, 80, 64, seed=30)
    out = root / "out"
    _convert(
        "--input", root / "cvat" / "images" / "*.jpg", "--input", root / "rle" / "images" / "*.jpg",
        "--input", plain, "--annotations", cvat.annotations, "--annotations", rle.annotations,
        "--output", out,
    )  # fmt: skip
    return str(out), (cvat.annotations, rle.annotations), plain


def _nearest(record: dict, index: int, coco: COCO, image_id: int) -> dict:
    """The annotation of `image_id` whose bbox is the record's object `index`'s box."""
    image = coco.imgs[image_id]
    box = _xyxy(record)[index] * ([image["width"], image["height"]] * 2)
    anns = coco.loadAnns(coco.getAnnIds(imgIds=[image_id]))
    corners = [np.array(a["bbox"][:2] + [a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]])
               for a in anns]  # fmt: skip
    best = int(np.argmin([np.abs(c - box).max() for c in corners]))
    assert np.abs(corners[best] - box).max() < 0.02, (record["filename"], box, corners)
    return anns[best]


def test_instance_masks_equal_pycocotools_ann_to_mask(masked):
    out, sources, _ = masked
    records = od_api_records(out)
    checked = 0
    for source in sources:
        coco = COCO()
        coco.dataset = json.loads(Path(source).read_text(encoding="utf-8"))
        coco.createIndex()
        for image_id, image in coco.imgs.items():
            record = records[image["file_name"]]
            anns = coco.getAnnIds(imgIds=[image_id])
            assert len(record["texts"]) == len(anns) == len(record["masks"]), image
            assert record["source_id"] == str(image_id)
            for index in range(len(anns)):
                ann = _nearest(record, index, coco, image_id)
                assert record["texts"][index] == coco.cats[ann["category_id"]]["name"]
                assert record["classes"][index] == ann["category_id"]  # COCO's ids kept
                assert record["is_crowd"][index] == ann["iscrowd"]
                assert record["area"][index] == pytest.approx(ann["area"], rel=1e-6)
                mask = record["masks"][index]
                if ann["segmentation"]:
                    np.testing.assert_array_equal(mask, coco.annToMask(ann), err_msg=str(ann))
                else:  # a box among polygons: its box filled (integer corners here)
                    x, y, w, h = (round(v) for v in ann["bbox"])
                    expected = np.zeros_like(mask)
                    expected[y : y + h, x : x + w] = 1
                    np.testing.assert_array_equal(mask, expected, err_msg=str(ann))
                checked += 1
    assert checked == 6


def test_a_box_among_polygons_is_named_mask_from_box(masked):
    out, (cvat, _), _ = masked
    shapes = os.path.join(os.path.dirname(os.path.dirname(cvat)), "images", "shapes.jpg")
    changed = _lines(os.path.join(out, schema.OBJECTS_CHANGED))
    # CVAT numbers annotations from 1: shapes.jpg's box is its second.
    assert changed == [{"path": shapes, "annotation": 2, "what": "mask_from_box"}]


def test_an_image_no_annotation_names_is_kept_as_a_negative(masked):
    out, sources, plain = masked
    record = od_api_records(out)["plain.jpg"]
    assert record["texts"] == [] and len(record["boxes"]) == 0 and len(record["masks"]) == 0
    info = _info(out)
    assert info["num_written"] == 4 and info["num_rejected"] == 0
    annotations = info["annotations"]
    assert annotations["formats"] == ["coco"]
    assert sorted(annotations["sources"]) == sorted(map(str, sources))
    assert annotations["label_map"] == [{"id": 1, "name": "car"}, {"id": 2, "name": "person"}]
    assert annotations["relabel"] == "keep" and annotations["instance_masks"] is True
    assert annotations["num_annotated_images"] == 3
    assert annotations["objects_changed_by_what"] == {"mask_from_box": 1}
    splits = annotations["splits"].values()
    assert sum(s["negatives"] for s in splits) == 1
    assert sum(s["objects"] for s in splits) == sum(s["masks"] for s in splits) == 6
    assert info["feature_spec"] == schema.FEATURE_SPEC_JSON | schema.OBJECT_FEATURE_SPEC_JSON
    assert _label_map(out) == [(1, "car"), (2, "person")]


def test_relabel_contiguous_and_no_instance_masks(tmp_path):
    images = [("pair.jpg", 96, 72, [("car", 4, 4, 40, 40, POLYGON), ("person", 50, 8, 90, 70)])]
    export = write_cvat_coco(tmp_path, images, labels=("car", "person"))
    write_images(export, images)
    document = json.loads(export.annotations.read_text(encoding="utf-8"))
    ids = {1: 5, 2: 9}  # COCO's ids need not be contiguous
    for category in document["categories"]:
        category["id"] = ids[category["id"]]
    for annotation in document["annotations"]:
        annotation["category_id"] = ids[annotation["category_id"]]
    export.annotations.write_text(json.dumps(document), encoding="utf-8")
    out = tmp_path / "out"
    _convert("--annotations", export.annotations, "--relabel", "contiguous",
             "--no_instance_masks", "--output", out)  # fmt: skip
    record = od_api_records(str(out))["pair.jpg"]
    assert record["classes"].tolist() == [1, 2] and record["texts"] == ["car", "person"]
    assert len(record["masks"]) == 0
    assert _label_map(str(out)) == [(1, "car"), (2, "person")]
    annotations = _info(str(out))["annotations"]
    assert annotations["relabel"] == "contiguous" and annotations["instance_masks"] is False
    assert annotations["label_map"] == [{"id": 1, "name": "car"}, {"id": 2, "name": "person"}]
    # --overwrite with a run without --annotations leaves none of their files behind.
    _convert("--input", export.image_paths["pair.jpg"], "--overwrite", "--output", out)
    left = {schema.LABEL_MAP, schema.OBJECTS_CHANGED, schema.UNMATCHED_ANNOTATIONS} & set(
        os.listdir(out)
    )
    assert not left and "annotations" not in _info(str(out))


# --- Boxes crossing the edge, annotations naming a missing image, --unannotated reject. ---


@pytest.fixture(scope="module")
def bad_boxes(tmp_path_factory):
    """edge.jpg (100 x 80) has a car crossing its right edge, one wholly outside and a person
    inside; gone.jpg is named but not there; stray.jpg is listed but named by no annotation."""
    root = tmp_path_factory.mktemp("bad_boxes")
    images = [
        ("edge.jpg", 100, 80, [("car", 70, 10, 130, 50), ("car", 110, 10, 150, 40),
                               ("person", 10, 10, 40, 60)]),
        ("ok.jpg", 80, 64, [("person", 5, 5, 40, 40)]),
        ("gone.jpg", 80, 64, [("car", 10, 10, 30, 30), ("person", 1, 1, 20, 20)]),
    ]  # fmt: skip
    export = write_cvat_coco(root, images, labels=("car", "person"))
    write_images(export, images[:2])
    write_photo(root / "images" / "stray.jpg", 64, 64, seed=7)
    out = root / "out"
    # 1 of 3 annotated images is missing and 1 of 3 listed files rejected: allowed here.
    proc = _convert(
        "--input", root / "images" / "*.jpg", "--annotations", export.annotations,
        "--unannotated", "reject", "--max_bad_fraction", "0.5", "--output", out,
    )  # fmt: skip
    return str(out), root, export, proc


def test_a_box_crossing_the_edge_is_clipped_one_outside_dropped(bad_boxes):
    out, root, _, proc = bad_boxes
    record = od_api_records(out)["edge.jpg"]
    np.testing.assert_allclose(
        _xyxy(record), [[0.7, 10 / 80, 1.0, 50 / 80], [0.1, 10 / 80, 0.4, 60 / 80]], atol=1e-6
    )
    assert record["texts"] == ["car", "person"]
    edge = str(root / "images" / "edge.jpg")
    assert _lines(os.path.join(out, schema.OBJECTS_CHANGED)) == [
        {"path": edge, "annotation": 1, "what": "clipped"},
        {"path": edge, "annotation": 2, "what": "no_area_inside"},
    ]
    annotations = _info(out)["annotations"]
    assert annotations["objects_changed_by_what"] == {"clipped": 1, "no_area_inside": 1}
    splits = annotations["splits"].values()
    assert sum(s["boxes_clipped"] for s in splits) == 1
    assert sum(s["dropped"].get("no_area_inside", 0) for s in splits) == 1
    assert sum(s["objects"] for s in splits) == 3
    summary = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[1:] if line}
    assert summary["boxes"][:3] == ["1", "clipped,", "1"], proc.stdout
    assert summary["objects"][0] == "3", proc.stdout


def test_an_annotation_naming_a_missing_image_is_listed_unmatched(bad_boxes):
    out, _, export, proc = bad_boxes
    assert _lines(os.path.join(out, schema.UNMATCHED_ANNOTATIONS)) == [
        {"image": "gone.jpg", "num_objects": 2, "source": str(export.annotations)}
    ]
    info = _info(out)
    assert info["annotations"]["num_unmatched_annotations"] == 1
    unmatched = [line for line in proc.stdout.splitlines() if line.split()[:1] == ["unmatched"]]
    assert len(unmatched) == 1 and unmatched[0].split()[1] == "1", proc.stdout


def test_unannotated_reject_rejects_an_image_no_annotation_names(bad_boxes):
    out, root, _, _ = bad_boxes
    rejected = _lines(os.path.join(out, schema.REJECTED))
    assert [(r["path"], r["reason"]) for r in rejected] == [
        (str(root / "images" / "stray.jpg"), "no_annotation")
    ]
    info = _info(out)
    assert info["num_listed"] == 3 and info["num_written"] == 2 and info["num_rejected"] == 1
    assert sorted(od_api_records(out)) == ["edge.jpg", "ok.jpg"]


def test_more_unmatched_than_max_bad_fraction_fails_the_run(tmp_path):
    images = [(f"{n}.jpg", 64, 48, [("car", 4, 4, 30, 30)]) for n in ("a", "b", "c", "lost")]
    export = write_cvat_coco(tmp_path, images)
    write_images(export, images[:3])
    out = tmp_path / "out"
    # 1 of 4 annotated images not found: over the default --max_bad_fraction (5 %).
    argv = ["--input", tmp_path / "images" / "*.jpg", "--annotations", export.annotations]
    proc = _convert(*argv, "--output", out, check=False)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    unmatched = out / schema.UNMATCHED_ANNOTATIONS
    assert str(unmatched) in proc.stderr, proc.stderr
    assert _lines(str(unmatched)) == [
        {"image": "lost.jpg", "num_objects": 1, "source": str(export.annotations)}
    ]
    assert not (out / schema.DATASET_INFO).exists()


# --- Malformed annotation files: exit 2, one line naming the file and where, nothing written. ---


def _coco_unknown_category(folder: Path) -> tuple[Path, Path, str]:
    images = [("a.jpg", 64, 48, [("car", 4, 4, 30, 30)])]
    export = write_cvat_coco(folder, images)
    write_images(export, images)
    document = json.loads(export.annotations.read_text(encoding="utf-8"))
    document["annotations"][0] |= {"id": 42, "category_id": 7}
    export.annotations.write_text(json.dumps(document), encoding="utf-8")
    return export.annotations, export.annotations, "annotation id 42"


def _coco_bad_json(folder: Path) -> tuple[Path, Path, str]:
    path = folder / "instances_default.json"
    path.write_text('{"images": [\n  {"id": 1, "file_name": "a.jpg",}\n]}\n', encoding="utf-8")
    return path, path, "line 2"


def _voc_bad_xml(folder: Path) -> tuple[Path, Path, str]:
    path = folder / "a.xml"
    path.write_text("<annotation>\n<filename>a.jpg</filename>\n<object>\n</annotation>\n")
    return path, path, "line 4"


def _yolo_bad_line(folder: Path) -> tuple[Path, Path, str]:
    images = [("a.jpg", 64, 48, [("car", 4, 4, 30, 30), ("car", 30, 10, 60, 40)])]
    export = write_ultralytics(folder, images)
    write_images(export, images)
    label = folder / "labels" / "train" / "a.txt"
    first, _ = label.read_text().splitlines()
    label.write_text(f"{first}\n0 0.5 abc 0.2 0.2\n")
    return export.annotations, label, "line 2"


@pytest.mark.parametrize(
    "make", [_coco_unknown_category, _coco_bad_json, _voc_bad_xml, _yolo_bad_line]
)
def test_a_malformed_annotation_file_exits_2_naming_it(tmp_path, make):
    folder = tmp_path / "ann"
    folder.mkdir()
    annotations, path, where = make(folder)
    write_photo(tmp_path / "pics" / "a.jpg", 64, 48, seed=1)
    out = tmp_path / "out"
    argv = ["--annotations", annotations, "--output", out]
    proc = _convert("--input", tmp_path / "pics" / "*.jpg", *argv, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imgrec: "), proc.stderr
    assert str(path) in lines[0] and where in lines[0], lines[0]
    assert not out.exists() or not any(out.iterdir()), sorted(os.listdir(out))


def test_an_ambiguous_base_name_fails_naming_both_files(tmp_path):
    first, second = tmp_path / "x" / "a.jpg", tmp_path / "y" / "a.jpg"
    write_photo(first, 64, 48, seed=1)
    write_photo(second, 64, 48, seed=2)
    # annotations/instances_default.json names "a.jpg": not beside it, nor in tmp_path or
    # tmp_path/images; two listed files end with the name.
    export = write_cvat_coco(tmp_path, [("a.jpg", 64, 48, [("car", 4, 4, 30, 30)])])
    out = tmp_path / "out"
    proc = _convert(
        "--input", first, "--input", second, "--annotations", export.annotations, "--output", out,
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    assert str(first) in proc.stderr and str(second) in proc.stderr, proc.stderr
    assert not (out / schema.DATASET_INFO).exists()


# --- The images the annotations name (no --input), --split_from annotations. ---


@pytest.fixture(scope="module")
def coco_folder(tmp_path_factory) -> Path:
    """COCO's layout: annotations/instances_train.json (t0-t2) and instances_val.json (v0, v1)
    beside images/, which also holds unnamed.jpg."""
    root = tmp_path_factory.mktemp("coco_folder")
    splits = {
        "train": [(f"t{i}.jpg", 96, 72, [("car", 8 + i, 8, 50, 60)]) for i in range(3)],
        "val": [(f"v{i}.jpg", 96, 72, [("person", 10, 10 + i, 60, 50)]) for i in range(2)],
    }
    for split, images in splits.items():
        export = write_cvat_coco(root, images, labels=("car", "person"))
        write_images(export, images, seed=len(split))
        export.annotations.rename(export.annotations.with_name(f"instances_{split}.json"))
    write_photo(root / "images" / "unnamed.jpg", 96, 72, seed=99)
    return root


def test_without_input_the_named_images_go_to_their_files_splits(coco_folder, tmp_path):
    out = tmp_path / "out"
    _convert("--annotations", coco_folder / "annotations", "--split_from", "annotations",
             "--output", out)  # fmt: skip
    records = od_api_records(str(out))
    by_split = {}
    for name, record in records.items():
        by_split.setdefault(record["split"], set()).add(name)
    assert by_split == {"train": {"t0.jpg", "t1.jpg", "t2.jpg"}, "validation": {"v0.jpg", "v1.jpg"}}
    info = _info(str(out))
    assert info["num_listed"] == 5 and info["num_rejected"] == 0  # unnamed.jpg is not listed
    splits = info["annotations"]["splits"]
    assert {k: (v["images"], v["objects"]) for k, v in splits.items()} == {
        "train": (3, 3),
        "validation": (2, 2),
    }
    assert splits["train"]["per_class"] == {"car": 3}
    assert records["v1.jpg"]["texts"] == ["person"]


def test_split_from_annotations_rejects_images_no_annotation_names(coco_folder, tmp_path):
    out = tmp_path / "out"
    _convert(
        "--input", coco_folder / "images" / "*.jpg",
        "--annotations", coco_folder / "annotations" / "instances_val.json",
        "--split_from", "annotations", "--max_bad_fraction", "0.9", "--output", out,
    )  # fmt: skip
    records = od_api_records(str(out))
    assert {name: r["split"] for name, r in records.items()} == {
        "v0.jpg": "validation",
        "v1.jpg": "validation",
    }
    rejected = _lines(str(out / schema.REJECTED))
    assert sorted((os.path.basename(r["path"]), r["reason"]) for r in rejected) == [
        (name, "no_annotation") for name in ("t0.jpg", "t1.jpg", "t2.jpg", "unnamed.jpg")
    ]


# --- --masks: semantic label maps. ---


def test_masks_pairs_label_map_pngs_and_rejects_the_wrong_size(tmp_path):
    images = [(f"{n}.jpg", 64, 48, [("car", 4, 4, 30, 30)]) for n in "abcd"]
    export = write_cvat_coco(tmp_path, images)
    write_images(export, images)
    masks = tmp_path / "masks"
    masks.mkdir()
    gray = np.zeros((48, 64), np.uint8)
    gray[4:30, 4:30], gray[30:, 40:] = 1, 2
    Image.fromarray(gray, mode="L").save(masks / "a.png")
    indexed = np.zeros((48, 64), np.uint8)
    indexed[10:40, 20:60], indexed[0:5, :] = 3, 1
    palette = Image.fromarray(indexed, mode="P")
    palette.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * (256 - 4) * 3)
    palette.save(masks / "b.png")
    Image.fromarray(np.ones((24, 32), np.uint8), mode="L").save(masks / "c.png")  # half size
    out = tmp_path / "out"
    _convert(
        "--input", tmp_path / "images" / "*.jpg", "--annotations", export.annotations,
        "--masks", f"{masks}/{{stem}}.png", "--max_bad_fraction", "0.6", "--output", out,
    )  # fmt: skip
    records = od_api_records(str(out))
    assert sorted(records) == ["a.jpg", "b.jpg"]
    for name, expected in (("a.jpg", gray), ("b.jpg", indexed)):
        assert records[name]["segmentation_format"] == "png"
        # The class values themselves (a palette PNG's indices, not its colours), one channel.
        np.testing.assert_array_equal(records[name]["segmentation"], expected[:, :, None])
    rejected = _lines(str(out / schema.REJECTED))
    assert sorted((os.path.basename(r["path"]), r["reason"]) for r in rejected) == [
        ("c.jpg", "mask_size_mismatch"),
        ("d.jpg", "mask_missing"),
    ]


# --- EXIF orientation 6: boxes in the displayed frame, or in the raw frame by the raw size. ---

# The photo as shown: 80 wide, 120 tall; stored by the camera rotated (raw 120 x 80, orientation
# 6: rotate 90 degrees clockwise to show). Boxes on 8-pixel JPEG blocks, so the red is crisp.
_SHOWN_W, _SHOWN_H = 80, 120
_RED = (230, 20, 20)


def _rotated_photo(path: Path, box: tuple[int, int, int, int], seed: int) -> None:
    """A photo showing a red rectangle at `box` (x0, y0, x1, y1, displayed pixels), stored raw
    with EXIF orientation 6."""
    rng = np.random.default_rng(seed)
    shown = np.zeros((_SHOWN_H, _SHOWN_W, 3), np.uint8)
    shown[:, :, 0] = rng.integers(0, 60, shown.shape[:2])
    shown[:, :, 1:] = rng.integers(90, 160, (*shown.shape[:2], 2))
    x0, y0, x1, y1 = box
    shown[y0:y1, x0:x1] = _RED
    raw = np.ascontiguousarray(np.rot90(shown))  # counter-clockwise: orientation 6 undoes it
    exif = Image.Exif()
    exif[0x0112] = 6
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(raw).save(path, quality=95, exif=exif)


def _raw_box(box: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """A displayed box in the raw frame: raw x is the shown y, raw y the shown width less x."""
    x0, y0, x1, y1 = box
    return y0, _SHOWN_W - x1, y1, _SHOWN_W - x0


def test_exif_rotated_photos_boxes_land_on_the_upright_pixels(tmp_path):
    shown_box, raw_box = (16, 24, 56, 72), (24, 48, 64, 104)
    _rotated_photo(tmp_path / "images" / "shown.jpg", shown_box, seed=1)
    _rotated_photo(tmp_path / "images" / "raw.jpg", raw_box, seed=2)
    with Image.open(tmp_path / "images" / "raw.jpg") as check:  # the file is as a camera's
        assert check.size == (_SHOWN_H, _SHOWN_W) and check.getexif()[0x0112] == 6
    images = [
        ("shown.jpg", _SHOWN_W, _SHOWN_H, [("cup", *shown_box)]),  # as browsers and CVAT show it
        ("raw.jpg", _SHOWN_H, _SHOWN_W, [("cup", *_raw_box(raw_box))]),  # width/height: raw
    ]
    export = write_cvat_coco(tmp_path, images)
    out = tmp_path / "out"
    _convert("--annotations", export.annotations, "--output", out)
    records = od_api_records(str(out))
    for name, (x0, y0, x1, y1) in (("shown.jpg", shown_box), ("raw.jpg", raw_box)):
        record = records[name]
        assert (record["width"], record["height"]) == (_SHOWN_W, _SHOWN_H), name
        expected = [[x0 / _SHOWN_W, y0 / _SHOWN_H, x1 / _SHOWN_W, y1 / _SHOWN_H]]
        np.testing.assert_allclose(_xyxy(record), expected, atol=1e-6, err_msg=name)
        # The stored image is upright, and the box is where its red is.
        pixels = record["image"].astype(int)
        red = (pixels[:, :, 0] > 160) & (pixels[:, :, 1] < 90) & (pixels[:, :, 2] < 90)
        rows, cols = np.nonzero(red)
        found = (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1)
        box = _xyxy(record)[0] * [_SHOWN_W, _SHOWN_H, _SHOWN_W, _SHOWN_H]
        np.testing.assert_allclose(found, box, atol=1.5, err_msg=name)
        inside = red[round(box[1]) : round(box[3]), round(box[0]) : round(box[2])]
        assert inside.mean() > 0.95, (name, inside.mean())


# --- No --annotations: today's records and dataset_info.json. ---


def test_a_dataset_without_annotations_has_no_object_keys(tmp_path):
    import tensorflow as tf

    for i in range(3):
        write_photo(tmp_path / "photos" / f"p{i}.jpg", 72, 56, seed=i)
    out = tmp_path / "out"
    _convert("--input", tmp_path / "photos" / "*.jpg", "--output", out)
    info = _info(str(out))
    assert "annotations" not in info
    assert info["feature_spec"] == schema.FEATURE_SPEC_JSON
    object_keys = set(schema.OBJECT_FEATURES)
    count = 0
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for serialized in read_records(str(out / shard["file"])):
                keys = set(tf.train.Example.FromString(serialized).features.feature)
                assert not keys & object_keys, keys & object_keys
                count += 1
    assert count == info["num_written"] == 3
    for name in (schema.LABEL_MAP, schema.OBJECTS_CHANGED, schema.UNMATCHED_ANNOTATIONS):
        assert not (out / name).exists(), name
