"""`imgrec verify` on annotated datasets (records with the Object Detection API's keys): a good
dataset passes, and each planted problem is named by shard and record, or by split."""

from __future__ import annotations

import numpy as np
import pytest

from core import schema
from pipeline.verify import main, verify_dataset
from tests.object_records import (
    HEIGHT,
    WIDTH,
    Obj,
    example,
    png,
    shard_file,
    with_values,
    write_dataset,
)

pytestmark = pytest.mark.unit

_TRAIN = shard_file("train")


def _records() -> dict[str, list]:
    """Two splits: three objects of both classes, a negative, one object in validation."""
    return {
        "train": [
            example("a", [Obj((0.1, 0.2, 0.5, 0.6), 1), Obj((0.5, 0.5, 0.9, 0.9), 3)]),
            example("b", []),
            example("c", [Obj((0.0, 0.0, 1.0, 1.0), 3)]),
        ],
        "validation": [example("d", [Obj((0.2, 0.2, 0.4, 0.4), 1)])],
    }


def _problems(tmp_path, change=None, **kwargs) -> list[str]:
    """The problems verify names after `change` edits train's record 0."""
    records = _records()
    if change is not None:
        records["train"][0] = change(records["train"][0])
    report = verify_dataset(write_dataset(tmp_path, records, **kwargs))
    return report.problems


def test_a_good_annotated_dataset_verifies(tmp_path, capsys):
    data_dir = write_dataset(tmp_path, _records())
    report = verify_dataset(data_dir)
    assert report.ok, report.problems
    assert report.records == 4
    assert main([data_dir]) == 0
    assert "imgrec verify: OK: 4 records in 2 shards" in capsys.readouterr().out


def test_a_label_map_of_segmentation_classes_verifies(tmp_path):
    records = {"train": [example("a", [Obj((0.1, 0.2, 0.5, 0.6), 3)], segmentation=True)]}
    report = verify_dataset(write_dataset(tmp_path, records, segmentation=True))
    assert report.ok, report.problems


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            lambda ex: with_values(ex, schema.OBJECT_BBOX["xmax"], [1.5, 0.9]),
            "object 0 (cat): box xmax 1.5 outside [0, 1]",
        ),
        (
            lambda ex: with_values(ex, schema.OBJECT_BBOX["ymin"], [0.7, 0.5]),
            "object 0 (cat): box ymin 0.7 > ymax 0.6",
        ),
        (
            lambda ex: with_values(ex, schema.OBJECT_LABEL, [1, 2]),
            "object 1: class id 2 is not in the label map (1, 3)",
        ),
        (
            lambda ex: with_values(ex, schema.OBJECT_TEXT, [b"cat", b"cat"]),
            "object 1: class/text 'cat', the label map names id 3 'dog'",
        ),
        (
            lambda ex: with_values(ex, schema.OBJECT_AREA, [12.0]),
            "per-object lists differ in length: class/label 2, area 1",
        ),
        (
            lambda ex: with_values(ex, schema.OBJECT_IS_CROWD, [0, 2]),
            "object 1 (dog): is_crowd 2 (flags are 0/1, area >= 0)",
        ),
    ],
    ids=["outside", "min_over_max", "unknown_label", "text", "lengths", "crowd_flag"],
)
def test_a_planted_object_problem_is_named_by_shard_and_record(tmp_path, change, expected):
    assert _problems(tmp_path, change) == [f"{_TRAIN}: record 0: {expected}"]


def _masks(*arrays: np.ndarray):
    return lambda ex: with_values(ex, schema.OBJECT_MASK, [png(a) for a in arrays])


_GOOD_MASK = np.zeros((HEIGHT, WIDTH), np.uint8)


@pytest.mark.parametrize(
    "change, expected",
    [
        (
            _masks(np.zeros((60, 80), np.uint8), _GOOD_MASK),
            "object 0 (cat): mask is 60x80, the image 120x160 (height x width)",
        ),
        (
            _masks(_GOOD_MASK, np.full((HEIGHT, WIDTH), 255, np.uint8)),
            "object 1 (dog): mask holds 255; expected only 0 and 1",
        ),
        (
            lambda ex: with_values(ex, schema.OBJECT_MASK, [b"not a png", png(_GOOD_MASK)]),
            "object 0 (cat): mask does not decode (",
        ),
        (_masks(_GOOD_MASK), "per-object lists differ in length: class/label 2, mask 1"),
    ],
    ids=["size", "not_0_1", "not_a_png", "count"],
)
def test_a_broken_instance_mask_is_named(tmp_path, change, expected):
    problems = [p for p in _problems(tmp_path, change) if not p.startswith("split ")]
    assert len(problems) == 1 and problems[0].startswith(f"{_TRAIN}: record 0: {expected}"), (
        problems
    )


def test_a_record_of_many_bad_boxes_is_one_line(tmp_path):
    boxes = [Obj((0.1, 0.1, 1.2, 0.5), 1)] * 5
    records = {"train": [example("many", boxes)]}
    (problem,) = verify_dataset(write_dataset(tmp_path, records)).problems
    assert problem == (
        f"{_TRAIN}: record 0: object 0 (cat): box xmax 1.2 outside [0, 1] (and 4 more objects)"
    )


def test_a_label_map_of_the_wrong_size_or_values_is_named(tmp_path):
    label_map = np.full((HEIGHT, WIDTH), 7, np.uint8)

    def change(ex):
        ex = with_values(ex, schema.SEGMENTATION, [png(label_map[:10])])
        return with_values(ex, schema.SEGMENTATION_FORMAT, [b"png"])

    records = _records()
    records["train"][0] = change(records["train"][0])
    records["train"][1] = with_values(records["train"][1], schema.SEGMENTATION, [png(label_map)])
    records["train"][1] = with_values(records["train"][1], schema.SEGMENTATION_FORMAT, [b"png"])
    problems = verify_dataset(write_dataset(tmp_path, records, segmentation=True)).problems
    assert problems == [
        f"{_TRAIN}: record 0: label map is 10x160x1, the image 120x160x1",
        f"{_TRAIN}: record 1: label map holds values [7] of no class (known: 0, 1, 3, 255)",
    ]


def test_object_counts_that_disagree_with_dataset_info_are_named(tmp_path, capsys):
    def edit(info):
        info["annotations"]["splits"]["train"] |= {"objects": 4, "negatives": 0}
        del info["annotations"]["splits"]["validation"]

    data_dir = write_dataset(tmp_path, _records(), edit=edit)
    assert verify_dataset(data_dir).problems == [
        "split train: 3 objects in the records, dataset_info's annotations say 4",
        "split train: 1 negatives in the records, dataset_info's annotations say 0",
        "split validation: 1 objects in the records, "
        "dataset_info's annotations.splits does not list the split",
    ]
    assert main([data_dir]) == 1
    assert "imgrec verify: FAILED: 3 problems" in capsys.readouterr().err


def test_no_decode_skips_the_masks_not_the_boxes(tmp_path):
    records = _records()
    records["train"][0] = _masks(np.zeros((6, 8), np.uint8), _GOOD_MASK)(records["train"][0])
    records["train"][2] = with_values(records["train"][2], schema.OBJECT_BBOX["xmin"], [-0.5])
    report = verify_dataset(write_dataset(tmp_path, records), decode=False)
    assert report.problems == [f"{shard_file('train')}: record 2: object 0 (dog): box xmin -0.5 "
                               "outside [0, 1]"]  # fmt: skip
