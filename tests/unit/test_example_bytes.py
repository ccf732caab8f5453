"""schema.make_example writes the bytes protobuf's deterministic serialization writes."""

from __future__ import annotations

import random

import pytest
import tensorflow as tf

from core import schema


def _utf8(value):
    return value.encode("utf-8") if isinstance(value, str) else value


def _list_feature(dtype: str, values) -> tf.train.Feature:
    """The protobuf Feature holding `values` (a list) as `dtype` ("string", "int64", "float")."""
    if dtype == "string":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[_utf8(v) for v in values]))
    if dtype == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _protobuf(extra: dict | None = None, **fields) -> bytes:
    """The reference: the tf.train.Example built and serialized by protobuf."""

    def b(value):
        return _list_feature("string", [value])

    def i(value):
        return _list_feature("int64", [value])

    feature = {
        schema.ENCODED: b(fields["encoded"]),
        schema.FORMAT: b(fields["image_format"]),
        schema.HEIGHT: i(fields["height"]),
        schema.WIDTH: i(fields["width"]),
        schema.CHANNELS: i(fields["channels"]),
        schema.LABEL: i(fields["label"]),
        schema.LABEL_TEXT: b(fields["label_text"]),
        schema.FILENAME: b(fields["filename"]),
        schema.SHA256: b(fields["sha256"]),
        schema.VERSION: i(schema.SCHEMA_VERSION),
        schema.TRANSCODED_FROM: b(fields.get("transcoded_from", "")),
        schema.TRANSCODE_REASON: b(fields.get("transcode_reason", "")),
    }
    for key, value in (extra or {}).items():
        dtype, per_object = schema.OBJECT_FEATURES[key]
        feature[key] = _list_feature(dtype, value if per_object else [value])
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


# Lengths at each varint boundary (1, 2, 3 bytes) and integers across int64's range.
_LENGTHS = [0, 1, 115, 116, 126, 127, 128, 129, 16_383, 16_384, 16_390, 2_097_152]
_INTS = [0, 1, 127, 128, 300, 2**31, 2**53 + 1, 2**63 - 1, -1, -2, -(2**63)]
_TEXTS = ["", "jpeg", "x" * 127, "x" * 128, "chat/cät/猫", "a\nb\x00c", "%E9 é"]


def _fields(rng: random.Random) -> dict:
    return {
        "encoded": rng.randbytes(rng.choice(_LENGTHS)),
        "image_format": rng.choice(_TEXTS),
        "height": rng.choice(_INTS),
        "width": rng.choice(_INTS),
        "channels": rng.choice(_INTS),
        "label": rng.choice(_INTS),
        "label_text": rng.choice(_TEXTS),
        "filename": rng.choice([*_TEXTS, b"\xff\xfe/not-utf8.jpg", b""]),
        "sha256": rng.choice(["ab" * 32, ""]),
        "transcoded_from": rng.choice(_TEXTS),
        "transcode_reason": rng.choice(_TEXTS),
    }


@pytest.mark.parametrize("seed", range(4))
def test_the_bytes_equal_protobufs_deterministic_serialization(seed):
    rng = random.Random(seed)
    for _ in range(150):
        fields = _fields(rng)
        assert schema.make_example(**fields) == _protobuf(**fields), fields | {"encoded": "..."}


def test_what_tensorflow_parses_back_is_what_was_written():
    fields = _fields(random.Random(7)) | {"label": -1, "encoded": b"\x00" * 300}
    parsed = tf.io.parse_single_example(schema.make_example(**fields), schema.feature_spec())
    assert parsed[schema.ENCODED].numpy() == b"\x00" * 300
    assert parsed[schema.LABEL].numpy() == -1
    assert parsed[schema.HEIGHT].numpy() == fields["height"]
    assert parsed[schema.VERSION].numpy() == schema.SCHEMA_VERSION
    text = fields["label_text"]
    assert parsed[schema.LABEL_TEXT].numpy() == text.encode("utf-8")


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70])
def test_an_integer_outside_int64_is_refused_as_protobuf_refuses_it(value):
    fields = _fields(random.Random(1)) | {"height": value}
    with pytest.raises(ValueError):
        _protobuf(**fields)
    with pytest.raises(ValueError, match="int64"):
        schema.make_example(**fields)


# Object features (--annotations): per-object lists of every length, values at int64's and
# float32's edges, masks of lengths at each varint boundary.
_FLOATS = [0.0, -0.0, 1.0, 0.1, 1 / 3, -2.5, 3.4e38, 1e30, 1e-45, float("inf"), float("-inf")]
_OBJECT_COUNTS = [0, 1, 2, 15, 16, 17, 300, 2_100]


def _object_extra(rng: random.Random, count: int) -> dict:
    """Every OBJECT_FEATURES key, `count` objects of random values of each key's type."""
    values = {
        "float": lambda: rng.choice(_FLOATS),
        "int64": lambda: rng.choice(_INTS),
        "string": lambda: rng.choice([*_TEXTS, rng.randbytes(rng.choice(_LENGTHS[:9]))]),
    }
    extra = {}
    for key, (dtype, per_object) in schema.OBJECT_FEATURES.items():
        extra[key] = [values[dtype]() for _ in range(count)] if per_object else values[dtype]()
    return extra


@pytest.mark.parametrize("count", _OBJECT_COUNTS)
def test_object_features_are_protobufs_bytes_for_any_number_of_objects(count):
    rng = random.Random(count)
    for _ in range(20 if count < 300 else 3):
        fields, extra = _fields(rng), _object_extra(rng, count)
        assert schema.make_example(**fields, extra=extra) == _protobuf(extra, **fields)


def test_empty_lists_are_written_as_protobuf_writes_an_empty_list():
    fields = _fields(random.Random(3))
    extra = {key: [] for key, (_, per_object) in schema.OBJECT_FEATURES.items() if per_object}
    example = schema.make_example(**fields, extra=extra)
    assert example == _protobuf(extra, **fields)
    # An empty FloatList / Int64List / BytesList is an empty message inside its Feature field.
    for key, feature in [(schema.OBJECT_AREA, b"\x12\x00"), (schema.OBJECT_LABEL, b"\x1a\x00")]:
        assert b"\x0a" + bytes([len(key)]) + key.encode() + b"\x12\x02" + feature in example
    assert schema.OBJECT_TEXT.encode() + b"\x12\x02\x0a\x00" in example


@pytest.mark.parametrize("length", _LENGTHS)
def test_masks_of_every_length_class_are_protobufs_bytes(length):
    rng = random.Random(length)
    fields = _fields(rng)
    for masks in ([rng.randbytes(length)], [rng.randbytes(length), b"", rng.randbytes(length)]):
        extra = {schema.OBJECT_MASK: masks, schema.SEGMENTATION: rng.randbytes(length)}
        assert schema.make_example(**fields, extra=extra) == _protobuf(extra, **fields)


def test_large_and_negative_values_and_float32_overflow_are_protobufs_bytes():
    fields = _fields(random.Random(5))
    extra = {
        schema.OBJECT_LABEL: [-1, -(2**63), 2**63 - 1, 0, 2**31, -128],
        schema.OBJECT_IS_CROWD: [1, 0, -1],
        schema.OBJECT_AREA: [1e40, -1e40, 3.5e38, 1e-50, 2**24 + 1, 123456789.123],
        schema.OBJECT_BBOX["xmin"]: [float("nan"), 0.5, -0.0],
    }
    assert schema.make_example(**fields, extra=extra) == _protobuf(extra, **fields)


def test_object_features_sort_among_the_optional_features():
    fields = _fields(random.Random(6))
    extra = {schema.SOURCE_ID: "397133", schema.GROUP: "g", schema.FRAME: 3}
    extra |= {schema.OBJECT_TEXT: ["cat", "dog"], schema.SEGMENTATION_FORMAT: "png"}
    reference = tf.train.Example()
    reference.ParseFromString(_protobuf(**fields))
    feature = reference.features.feature
    feature[schema.GROUP].bytes_list.value.append(b"g")
    feature[schema.FRAME].int64_list.value.append(3)
    feature[schema.SOURCE_ID].bytes_list.value.append(b"397133")
    feature[schema.OBJECT_TEXT].bytes_list.value.extend([b"cat", b"dog"])
    feature[schema.SEGMENTATION_FORMAT].bytes_list.value.append(b"png")
    expected = reference.SerializeToString(deterministic=True)
    assert schema.make_example(**fields, extra=extra) == expected


@pytest.mark.parametrize("value", ["cat", b"cat", 3, 1.5])
def test_a_single_value_for_a_per_object_key_is_refused(value):
    key = {str: schema.OBJECT_TEXT, bytes: schema.OBJECT_MASK, int: schema.OBJECT_LABEL}
    key = key.get(type(value), schema.OBJECT_AREA)
    with pytest.raises(ValueError, match=f"{key} holds one value per object: give a list"):
        schema.make_example(**_fields(random.Random(1)), extra={key: value})


def test_an_int_outside_int64_in_a_list_is_refused():
    with pytest.raises(ValueError, match="int64"):
        schema.make_example(**_fields(random.Random(1)), extra={schema.OBJECT_LABEL: [1, 2**63]})


def test_what_the_object_spec_parses_back_is_what_was_written():
    fields = _fields(random.Random(8))
    extra = {
        schema.SOURCE_ID: "397133",
        schema.OBJECT_BBOX["xmin"]: [0.25, 0.5],
        schema.OBJECT_LABEL: [1, 18],
        schema.OBJECT_TEXT: ["person", "dög"],
        schema.OBJECT_MASK: [b"\x89PNG", b""],
        schema.OBJECT_DIFFICULT: [],
    }
    parsed = tf.io.parse_single_example(
        schema.make_example(**fields, extra=extra), schema.object_feature_spec()
    )
    assert set(parsed) == set(schema.OBJECT_FEATURES)
    dense = {key: tf.sparse.to_dense(v).numpy().tolist() for key, v in parsed.items()
             if isinstance(v, tf.SparseTensor)}  # fmt: skip
    assert dense[schema.OBJECT_BBOX["xmin"]] == [0.25, 0.5]
    assert dense[schema.OBJECT_LABEL] == [1, 18]
    assert dense[schema.OBJECT_TEXT] == [b"person", "dög".encode()]
    assert dense[schema.OBJECT_MASK] == [b"\x89PNG", b""]
    assert dense[schema.OBJECT_DIFFICULT] == [] and dense[schema.OBJECT_AREA] == []
    assert parsed[schema.SOURCE_ID].numpy() == b"397133"
    assert parsed[schema.SEGMENTATION].numpy() == b""  # absent: the default


def test_the_object_spec_json_describes_the_object_spec():
    spec = schema.object_feature_spec()
    assert set(schema.OBJECT_FEATURE_SPEC_JSON) == set(spec) == set(schema.OBJECT_FEATURES)
    dtypes = {"string": tf.string, "int64": tf.int64, "float": tf.float32}
    for key, described in schema.OBJECT_FEATURE_SPEC_JSON.items():
        assert type(spec[key]).__name__ == described["type"]
        assert spec[key].dtype == dtypes[described["dtype"]]
        if described["type"] == "FixedLenFeature":
            assert spec[key].default_value == described["default"] == ""
    assert schema.object_feature_spec((schema.OBJECT_MASK,)) == {
        schema.OBJECT_MASK: tf.io.VarLenFeature(tf.string)
    }


def test_a_dataset_without_annotations_keeps_todays_feature_spec():
    assert not set(schema.OBJECT_FEATURES) & set(schema.FEATURE_SPEC_JSON)
    assert not set(schema.OBJECT_FEATURES) & set(schema.feature_spec())
