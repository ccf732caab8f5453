"""core/schema.py beyond the names (tests/integration/test_contract.py): the parse spec's
defaults and subsets, and dataset_info.json errors that name the path and the fix (mutants
bench/MUTATION.md found alive)."""

from __future__ import annotations

import json

import pytest
import tensorflow as tf
from tensorflow.core.example import example_pb2, feature_pb2

from core import schema


def test_the_spec_parses_an_example_without_the_optional_features_to_defaults():
    # Written before the transcode features existed: they parse as "" (and ints as 0).
    feature = {schema.ENCODED: feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[b"x"]))}
    raw = example_pb2.Example(features=feature_pb2.Features(feature=feature)).SerializeToString()
    parsed = tf.io.parse_single_example(raw, schema.feature_spec())
    assert parsed[schema.TRANSCODED_FROM].numpy() == b""
    assert parsed[schema.TRANSCODE_REASON].numpy() == b""
    assert parsed[schema.LABEL].numpy() == 0 and parsed[schema.HEIGHT].numpy() == 0


def test_the_spec_can_be_asked_for_a_subset_of_keys():
    spec = schema.feature_spec((schema.ENCODED, schema.LABEL))
    assert sorted(spec) == sorted([schema.ENCODED, schema.LABEL])
    assert spec[schema.LABEL].dtype == tf.int64 and spec[schema.ENCODED].dtype == tf.string
    assert len(schema.feature_spec()) == len(schema.FEATURE_SPEC_JSON)


def test_a_missing_dataset_info_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(schema.DatasetInfoError) as e:
        schema.load_dataset_info(str(tmp_path) + "/")
    assert str(e.value) == (
        f"{tmp_path}/dataset_info.json not found: {str(tmp_path) + '/'!r} is not a converted "
        "dataset (run `imgrec convert --output DIR` first, or check the path)"
    )


def test_an_unreadable_dataset_info_names_the_path(tmp_path):
    (tmp_path / schema.DATASET_INFO).write_text("{not json")
    with pytest.raises(schema.DatasetInfoError) as e:
        schema.load_dataset_info(str(tmp_path))
    message = str(e.value)
    assert message.startswith(f"{tmp_path}/dataset_info.json is unreadable (")
    assert message.endswith("); re-run the conversion")


def test_a_dataset_info_of_another_schema_version_is_refused_by_name(tmp_path):
    (tmp_path / schema.DATASET_INFO).write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(schema.DatasetInfoError) as e:
        schema.load_dataset_info(str(tmp_path))
    assert str(e.value) == (
        f"{tmp_path}/dataset_info.json has schema_version 99; this imgrec reads version 1"
    )
    good = {"schema_version": schema.SCHEMA_VERSION, "num_listed": 0}
    (tmp_path / schema.DATASET_INFO).write_text(json.dumps(good))
    assert schema.load_dataset_info(str(tmp_path)) == good


def test_interrupted_finds_ctrl_c_however_beam_wrapped_it():
    from core.errors import interrupted

    wrapped = RuntimeError("KeyboardInterrupt [while running 'Inspect/ReadHashDecode']")
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ValueError("stage failed") from e
    except ValueError as e:
        chained = e
    assert interrupted(KeyboardInterrupt()) and interrupted(wrapped) and interrupted(chained)
    assert not interrupted(RuntimeError("decoder failed")) and not interrupted(ValueError())
