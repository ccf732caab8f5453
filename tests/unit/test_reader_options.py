"""make_dataset's grouped options: at most 12 parameters, and the keywords they replaced still
work for one release, each with a DeprecationWarning naming its new place."""

from __future__ import annotations

import inspect

import pytest
import tensorflow as tf

from pipeline.reader import Classification, Detection, Order, Pixels, Storage, make_dataset
from pipeline.reader.options import DEFAULT_ORDER, DEFAULT_PIXELS, DEFAULT_STORAGE, resolve_options

pytestmark = pytest.mark.unit


def _groups() -> dict:
    return {"pixels": DEFAULT_PIXELS, "order": DEFAULT_ORDER, "storage": DEFAULT_STORAGE}


def test_make_dataset_takes_at_most_twelve_parameters():
    parameters = inspect.signature(make_dataset).parameters.values()
    named = [p for p in parameters if p.kind != inspect.Parameter.VAR_KEYWORD]
    assert len(named) <= 12, [p.name for p in named]


def test_old_keywords_land_in_their_group_with_a_warning_naming_it():
    with pytest.warns(DeprecationWarning, match=r"pixels=Pixels\(dtype=\.\.\.\)"):
        name, options, groups = resolve_options(
            "classification", _groups(), {"dtype": tf.uint16, "cache_dir": "/c", "repeat": True}
        )
    assert name == "classification" and options == Classification()
    assert groups["pixels"] == Pixels(dtype=tf.uint16)
    assert groups["storage"] == Storage(cache_dir="/c")
    assert groups["order"] == Order(repeat=True)


def test_old_classification_keywords_go_to_the_task():
    with pytest.warns(DeprecationWarning, match=r"task=Classification\(extra_features=\.\.\.\)"):
        name, options, _ = resolve_options("classification", _groups(), {"extra_features": ["k"]})
    assert options == Classification(extra_features=["k"])
    with pytest.raises(TypeError, match="classification options, not detection's"):
        resolve_options("detection", _groups(), {"postprocess": print})


def test_tasks_by_name_or_options_and_unknown_keywords():
    assert resolve_options("segmentation", _groups(), {})[:2] == (
        "segmentation",
        Detection(kind="segmentation"),
    )
    assert resolve_options(Detection(masks=True), _groups(), {})[0] == "detection"
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        resolve_options("classification", _groups(), {"colour": 1})
    with pytest.raises(ValueError, match="task must be"):
        resolve_options("regression", _groups(), {})
    with pytest.raises(ValueError, match="box_format"):
        Detection(box_format="whxy")
