"""schema.make_example writes the bytes protobuf's deterministic serialization writes."""

from __future__ import annotations

import random

import pytest
import tensorflow as tf

from core import schema


def _protobuf(**fields) -> bytes:
    """The reference: the tf.train.Example built and serialized by protobuf."""

    def b(value):
        value = value.encode("utf-8") if isinstance(value, str) else value
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def i(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

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
