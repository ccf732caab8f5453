"""The one owner of the dataset's on-disk schema: Example feature keys, feature spec, file names.

Writer, reader, `verify` and the tests import from here; nobody spells a feature key twice.
This module must stay importable without Apache Beam (the reader runs in training jobs).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "DATASET_INFO",
    "REJECTED",
    "DUPLICATES",
    "ENCODED",
    "FORMAT",
    "HEIGHT",
    "WIDTH",
    "CHANNELS",
    "LABEL",
    "LABEL_TEXT",
    "FILENAME",
    "SHA256",
    "VERSION",
    "TRANSCODED_FROM",
    "TRANSCODE_REASON",
    "RAW_FORMAT",
    "STORE_MODES",
    "COMPRESSIONS",
    "FEATURE_SPEC_JSON",
    "feature_spec",
    "shard_name",
    "shard_suffix",
    "make_example",
    "load_dataset_info",
    "parse_dataset_info",
    "DatasetInfoError",
]

# Bumped whenever a feature key, its type or the dataset_info.json layout changes incompatibly.
SCHEMA_VERSION = 1

# Output directory layout (see shared/CONTRACT.md).
DATASET_INFO = "dataset_info.json"
REJECTED = "rejected.jsonl"
DUPLICATES = "duplicates.jsonl"

# tf.train.Example feature keys.
ENCODED = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
CHANNELS = "image/channels"
LABEL = "image/class/label"
LABEL_TEXT = "image/class/text"
FILENAME = "image/filename"
SHA256 = "image/key/sha256"
VERSION = "schema_version"
# Empty unless the stored bytes were re-encoded: the source format ("webp", "jpeg", ...) and why
# ("exif_orientation", "unsupported_format", "cmyk", "max_side", ...; several joined with ",").
TRANSCODED_FROM = "image/transcoded_from"
TRANSCODE_REASON = "image/transcode_reason"

# image/format of records stored with --store pixels (or smart): image/encoded holds uint8 pixels
# in height x width x channels order, decoded with tf.io.decode_raw + reshape.
RAW_FORMAT = "raw"
# dataset_info.json["store"] (--store): how images are stored; the reader dispatches on it.
STORE_MODES = ("encoded", "pixels", "smart")
# --compression: of whole shard files; the name says which (shard_suffix).
COMPRESSIONS = ("none", "gzip")

# (key, kind, dtype) of every feature; kind "fixed" is a scalar FixedLenFeature.
_FEATURES: tuple[tuple[str, str], ...] = (
    (ENCODED, "string"),
    (FORMAT, "string"),
    (HEIGHT, "int64"),
    (WIDTH, "int64"),
    (CHANNELS, "int64"),
    (LABEL, "int64"),
    (LABEL_TEXT, "string"),
    (FILENAME, "string"),
    (SHA256, "string"),
    (VERSION, "int64"),
    (TRANSCODED_FROM, "string"),
    (TRANSCODE_REASON, "string"),
)

# JSON-friendly description written to dataset_info.json["feature_spec"].
FEATURE_SPEC_JSON: dict[str, dict[str, Any]] = {
    key: {"type": "FixedLenFeature", "shape": [], "dtype": dtype} for key, dtype in _FEATURES
}


def feature_spec(keys: tuple[str, ...] | None = None) -> dict:
    """The `tf.io.parse_example` spec of the Example schema.

    Args:
        keys: only these features (default: all).

    Returns:
        A dict of feature key to `tf.io.FixedLenFeature`.
    """
    import tensorflow as tf  # Deferred: callers that only need key names skip the TF import.

    dtypes = {"string": tf.string, "int64": tf.int64}
    defaults = {"string": "", "int64": 0}
    return {
        key: tf.io.FixedLenFeature([], dtypes[dtype], default_value=defaults[dtype])
        for key, dtype in _FEATURES
        if keys is None or key in keys
    }


def shard_name(split: str, index: int, num_shards: int, suffix: str = "") -> str:
    """Relative path of one shard: `train/train-00003-of-00016.tfrecord`."""
    return f"{split}/{split}-{index:05d}-of-{num_shards:05d}.tfrecord{suffix}"


def shard_suffix(compression: str) -> str:
    """The shard name's suffix after `.tfrecord` (CONTRACT.md: GZIP adds .gz)."""
    return ".gz" if compression == "gzip" else ""


def make_example(
    *,
    encoded: bytes,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    label: int,
    label_text: str,
    filename: str,
    sha256: str,
    transcoded_from: str = "",
    transcode_reason: str = "",
) -> bytes:
    """Serialize one image as a `tf.train.Example`, deterministically (same input, same bytes).

    Returns:
        The serialized Example.
    """
    from tensorflow.core.example import example_pb2, feature_pb2

    def b(value: str | bytes) -> feature_pb2.Feature:
        if isinstance(value, str):
            value = value.encode("utf-8")
        return feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=[value]))

    def i(value: int) -> feature_pb2.Feature:
        return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[int(value)]))

    features = {
        ENCODED: b(encoded),
        FORMAT: b(image_format),
        HEIGHT: i(height),
        WIDTH: i(width),
        CHANNELS: i(channels),
        LABEL: i(label),
        LABEL_TEXT: b(label_text),
        FILENAME: b(filename),
        SHA256: b(sha256),
        VERSION: i(SCHEMA_VERSION),
        TRANSCODED_FROM: b(transcoded_from),
        TRANSCODE_REASON: b(transcode_reason),
    }
    example = example_pb2.Example(features=feature_pb2.Features(feature=features))
    # Map fields serialize in arbitrary order unless asked: determinism is a product promise.
    return example.SerializeToString(deterministic=True)


class DatasetInfoError(ValueError):
    """dataset_info.json is missing, unreadable or of an unknown schema version."""


def load_dataset_info(data_dir: str) -> dict:
    """Read and check `DIR/dataset_info.json` (local path, or gs:// through TensorFlow's gfile).

    Raises:
        DatasetInfoError: naming the directory and what to do.
    """
    import tensorflow as tf

    path = data_dir.rstrip("/") + "/" + DATASET_INFO
    if not tf.io.gfile.exists(path):
        raise DatasetInfoError(
            f"{path} not found: {data_dir!r} is not a converted dataset "
            "(run `imgrec convert --output DIR` first, or check the path)"
        )
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
    except tf.errors.OpError as e:
        raise DatasetInfoError(f"{path} is unreadable ({e}); re-run the conversion") from e
    return parse_dataset_info(text, path)


def parse_dataset_info(text: str, path: str) -> dict:
    """Parse and check the text of a dataset_info.json read from `path` (any store).

    Raises:
        DatasetInfoError: naming `path` and what to do.
    """
    try:
        info = json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetInfoError(f"{path} is unreadable ({e}); re-run the conversion") from e
    version = info.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DatasetInfoError(
            f"{path} has schema_version {version!r}; this imgrec reads version {SCHEMA_VERSION}"
        )
    return info
