"""The one owner of the dataset's on-disk schema: Example feature keys, feature spec, file names.

Writer, reader, `verify` and the tests import from here; nobody spells a feature key twice.
This module must stay importable without Apache Beam (the reader runs in training jobs).
"""

from __future__ import annotations

import functools
import json
import math
import struct
from typing import Any

__all__ = [
    "SCHEMA_VERSION",
    "DATASET_INFO",
    "REJECTED",
    "DUPLICATES",
    "NEAR_DUPLICATES",
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
    "FRAME",
    "DTYPE",
    "VALUE_SCALE",
    "VALUE_OFFSET",
    "GROUP",
    "PHASH",
    "DICOM_KEYS",
    "GEO_KEYS",
    "TILE_KEYS",
    "TILE_X",
    "TILE_Y",
    "TILE_SOURCE_HEIGHT",
    "TILE_SOURCE_WIDTH",
    "OPTIONAL_FEATURES",
    "SOURCE_ID",
    "OBJECT_BBOX",
    "OBJECT_LABEL",
    "OBJECT_TEXT",
    "OBJECT_AREA",
    "OBJECT_IS_CROWD",
    "OBJECT_DIFFICULT",
    "OBJECT_TRUNCATED",
    "OBJECT_MASK",
    "SEGMENTATION",
    "SEGMENTATION_FORMAT",
    "OBJECT_FEATURES",
    "OBJECT_FEATURE_SPEC_JSON",
    "LABEL_MAP",
    "UNMATCHED_ANNOTATIONS",
    "OBJECTS_CHANGED",
    "ANNOTATION_STAGING",
    "STORE_MODES",
    "COMPRESSIONS",
    "FEATURE_SPEC_JSON",
    "feature_spec",
    "object_feature_spec",
    "pixel_layout",
    "pixel_layout_parts",
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
# --near_duplicates (not off): one cluster of near-copies a line (transforms/near_duplicates.py).
NEAR_DUPLICATES = "near_duplicates.jsonl"
# With --annotations: the Object Detection API's label map, annotations naming no listed image,
# and every object clipped or dropped on its way in.
LABEL_MAP = "label_map.pbtxt"
UNMATCHED_ANNOTATIONS = "unmatched_annotations.jsonl"
OBJECTS_CHANGED = "objects_changed.jsonl"
# A bucket run's staged objects (pipeline/launch_annotations.py), removed when it ends.
ANNOTATION_STAGING = ".imgrec-annotations"

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

# Features of some records only (a parse fills the default in the others).
# Images decoded to arrays (DICOM, TIFF; transforms/images/arrays.py): the frame or page this
# record holds (0: the first), the stored pixels' dtype ("" is uint8), and how stored values map
# back to the source's units (value = stored * scale + offset; DICOM: its modality values).
FRAME = "image/frame"
DTYPE = "image/dtype"
VALUE_SCALE = "image/value_scale"
VALUE_OFFSET = "image/value_offset"
# --group_by: a salted hash of the file's group (never the value itself: it may be a patient ID).
GROUP = "image/group"
# --near_duplicates (not off): the image's 64-bit perceptual hash (transforms/images/phash.py).
PHASH = "image/phash"
# DICOM tags kept (docs/dicom.md): never a patient's name, ID or birth date.
DICOM_KEYS = {
    name: f"dicom/{name}"
    for name in (
        "Modality",
        "BodyPartExamined",
        "PhotometricInterpretation",
        "BitsStored",
        "Rows",
        "Columns",
        "NumberOfFrames",
        "PixelSpacing",
        "RescaleSlope",
        "RescaleIntercept",
        "WindowCenter",
        "WindowWidth",
        "StudyInstanceUID",
        "SeriesInstanceUID",
        "SOPInstanceUID",
    )
}
# GeoTIFF georeferencing (transforms/images/tiff.py): the CRS ("EPSG:32633"), its EPSG code (0:
# none or user-defined), GDAL's geotransform and every GeoKey as JSON (strings keep the doubles
# exact), and whether pixels are areas or points.
GEO_KEYS = {
    "crs": ("geo/crs", "string", ""),
    "epsg": ("geo/epsg", "int64", 0),
    "transform": ("geo/transform", "string", ""),
    "raster_type": ("geo/raster_type", "string", ""),
    "keys": ("geo/keys", "string", ""),
    "nodata": ("geo/nodata", "string", ""),  # GDAL's nodata value as its tag writes it
}
# --tile: a chip's offset in its source (source pixels) and the source's sides; image/filename
# stays the source's, geo/transform is the chip's.
TILE_X = "image/tile/x"
TILE_Y = "image/tile/y"
TILE_SOURCE_HEIGHT = "image/tile/source_height"
TILE_SOURCE_WIDTH = "image/tile/source_width"
TILE_KEYS = (TILE_X, TILE_Y, TILE_SOURCE_HEIGHT, TILE_SOURCE_WIDTH)
# The dtype of each DICOM key's feature; a string otherwise.
_DICOM_TYPES = {
    "BitsStored": "int64",
    "Rows": "int64",
    "Columns": "int64",
    "NumberOfFrames": "int64",
    "PixelSpacing": "float",
    "RescaleSlope": "float",
    "RescaleIntercept": "float",
    "WindowCenter": "float",
    "WindowWidth": "float",
}

# (key, dtype, shape, default) of every optional feature.
OPTIONAL_FEATURES: tuple[tuple[str, str, tuple[int, ...], Any], ...] = (
    (FRAME, "int64", (), 0),
    (DTYPE, "string", (), ""),
    (VALUE_SCALE, "float", (), 1.0),
    (VALUE_OFFSET, "float", (), 0.0),
    (GROUP, "string", (), ""),
    (PHASH, "int64", (), 0),
    *(
        (
            key,
            _DICOM_TYPES.get(name, "string"),
            (2,) if name == "PixelSpacing" else (),
            {"string": "", "int64": 0, "float": 0.0}[_DICOM_TYPES.get(name, "string")],
        )
        for name, key in DICOM_KEYS.items()
    ),
    *((key, dtype, (), default) for key, dtype, default in GEO_KEYS.values()),
    *((key, "int64", (), 0) for key in TILE_KEYS),
)

# Objects (--annotations, --masks): exactly the keys the TensorFlow Object Detection API and TF
# Model Garden's detection and segmentation decoders read. Lists with one value per object
# (VarLenFeature); boxes normalised to [0, 1] of the stored image; one PNG per instance mask.
SOURCE_ID = "image/source_id"
OBJECT_BBOX = {side: f"image/object/bbox/{side}" for side in ("xmin", "ymin", "xmax", "ymax")}
OBJECT_LABEL = "image/object/class/label"
OBJECT_TEXT = "image/object/class/text"
OBJECT_AREA = "image/object/area"
OBJECT_IS_CROWD = "image/object/is_crowd"
OBJECT_DIFFICULT = "image/object/difficult"
OBJECT_TRUNCATED = "image/object/truncated"
OBJECT_MASK = "image/object/mask"
# A semantic label map (--masks): a PNG of class values at the stored image's size.
SEGMENTATION = "image/segmentation/class/encoded"
SEGMENTATION_FORMAT = "image/segmentation/class/format"
# key -> (dtype, per object: a list with one value per object; else one value per record).
# Written only by annotated runs: a dataset without --annotations keeps today's feature_spec.
OBJECT_FEATURES: dict[str, tuple[str, bool]] = {
    SOURCE_ID: ("string", False),
    **{key: ("float", True) for key in OBJECT_BBOX.values()},
    OBJECT_LABEL: ("int64", True),
    OBJECT_TEXT: ("string", True),
    OBJECT_AREA: ("float", True),
    OBJECT_IS_CROWD: ("int64", True),
    OBJECT_DIFFICULT: ("int64", True),
    OBJECT_TRUNCATED: ("int64", True),
    OBJECT_MASK: ("string", True),
    SEGMENTATION: ("string", False),
    SEGMENTATION_FORMAT: ("string", False),
}

# (key, dtype) of every feature each record has (a scalar FixedLenFeature).
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
    **{key: {"type": "FixedLenFeature", "shape": [], "dtype": dtype} for key, dtype in _FEATURES},
    **{
        key: {"type": "FixedLenFeature", "shape": list(shape), "dtype": dtype, "default": default}
        for key, dtype, shape, default in OPTIONAL_FEATURES
    },
}
_OPTIONAL = {key: (dtype, shape, default) for key, dtype, shape, default in OPTIONAL_FEATURES}
_ZERO = {"string": "", "int64": 0, "float": 0.0}
# What an annotated dataset adds to dataset_info.json["feature_spec"]: per-object lists parse as
# VarLenFeature (any number of objects, 0 included), the others as one value ("" when absent).
OBJECT_FEATURE_SPEC_JSON: dict[str, dict[str, Any]] = {
    key: (
        {"type": "VarLenFeature", "dtype": dtype}
        if per_object
        else {"type": "FixedLenFeature", "shape": [], "dtype": dtype, "default": _ZERO[dtype]}
    )
    for key, (dtype, per_object) in OBJECT_FEATURES.items()
}


def feature_spec(keys: tuple[str, ...] | None = None) -> dict:
    """The `tf.io.parse_example` spec of the Example schema.

    Args:
        keys: only these features (default: all).

    Returns:
        A dict of feature key to `tf.io.FixedLenFeature`.
    """
    import tensorflow as tf  # Deferred: callers that only need key names skip the TF import.

    dtypes = {"string": tf.string, "int64": tf.int64, "float": tf.float32}
    defaults = {"string": "", "int64": 0}
    spec = {
        key: tf.io.FixedLenFeature([], dtypes[dtype], default_value=defaults[dtype])
        for key, dtype in _FEATURES
        if keys is None or key in keys
    }
    for key, (dtype, shape, default) in _OPTIONAL.items():
        if keys is None or key in keys:
            value = [default] * shape[0] if shape else default
            spec[key] = tf.io.FixedLenFeature(list(shape), dtypes[dtype], default_value=value)
    return spec


def object_feature_spec(keys: tuple[str, ...] | None = None) -> dict:
    """The `tf.io.parse_example` spec of the object features (OBJECT_FEATURES).

    Args:
        keys: only these features (default: all).

    Returns:
        A dict of feature key to `tf.io.VarLenFeature` (per-object lists: parsed as a
        SparseTensor) or `tf.io.FixedLenFeature` of a string defaulting to "".
    """
    import tensorflow as tf  # Deferred, as in feature_spec.

    dtypes = {"string": tf.string, "int64": tf.int64, "float": tf.float32}
    return {
        key: (
            tf.io.VarLenFeature(dtypes[dtype])
            if per_object
            else tf.io.FixedLenFeature([], dtypes[dtype], default_value=_ZERO[dtype])
        )
        for key, (dtype, per_object) in OBJECT_FEATURES.items()
        if keys is None or key in keys
    }


def pixel_layout(dtype: str, channels: int) -> str:
    """A record's key in dataset_info.json's per-split pixel_layouts: "uint16x13" (image/dtype,
    "" being uint8, by image/channels)."""
    return f"{dtype or 'uint8'}x{int(channels)}"


def pixel_layout_parts(layout: str) -> tuple[str, int]:
    """("uint16", 13) of the pixel layout "uint16x13"."""
    dtype, _, channels = layout.rpartition("x")
    return dtype, int(channels)


def shard_name(split: str, index: int, num_shards: int, suffix: str = "") -> str:
    """Relative path of one shard: `train/train-00003-of-00016.tfrecord`."""
    return f"{split}/{split}-{index:05d}-of-{num_shards:05d}.tfrecord{suffix}"


def shard_suffix(compression: str) -> str:
    """The shard name's suffix after `.tfrecord` (CONTRACT.md: GZIP adds .gz)."""
    return ".gz" if compression == "gzip" else ""


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of `n`; a negative int64 as its 64-bit two's complement."""
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_VARINTS = tuple(_varint(n) for n in range(128))


def _length(n: int) -> bytes:
    return _SMALL_VARINTS[n] if n < 128 else _varint(n)


def _bytes_feature(value: str | bytes) -> tuple[bytes, bytes]:
    """Feature{bytes_list: BytesList{value: [value]}} as (the bytes before `value`, `value`)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    inner = b"\x0a" + _length(len(value))  # BytesList.value, field 1, length-delimited
    return b"\x0a" + _length(len(inner) + len(value)) + inner, value  # Feature.bytes_list


def _int64(value: int) -> bytes:
    """The varint of one Int64List value.

    Raises:
        ValueError: `value` is outside int64 (as protobuf refuses it).
    """
    value = int(value)
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"{value} is outside the int64 range of a tf.train.Int64List")
    return _varint(value)


def _int64_feature(value: int) -> tuple[bytes, bytes]:
    """Feature{int64_list: Int64List{value: [value]}} (packed, as proto3 repeats scalars).

    Raises:
        ValueError: `value` is outside int64 (as protobuf refuses it).
    """
    packed = _int64(value)
    int_list = b"\x0a" + _length(len(packed)) + packed
    return b"\x1a" + _length(len(int_list)) + int_list, b""  # Feature.int64_list, field 3


def _float_feature(values) -> tuple[bytes, bytes]:
    """Feature{float_list: FloatList{value: values}} (packed float32, little-endian)."""
    try:
        packed = struct.pack(f"<{len(values)}f", *values)
    except OverflowError:  # protobuf stores a double beyond float32 as +-inf; struct refuses it
        packed = struct.pack(f"<{len(values)}f", *map(_float32, values))
    # proto3 writes no packed field for an empty list: the FloatList is empty, Feature b"\x12\x00".
    float_list = b"\x0a" + _length(len(packed)) + packed if packed else b""
    return b"\x12" + _length(len(float_list)) + float_list, b""  # Feature.float_list, field 2


def _float32(value: float) -> float:
    """`value` as a C cast to float32 rounds it: beyond float32's range, infinity."""
    try:
        struct.pack("<f", value)
    except OverflowError:
        return math.copysign(math.inf, value)
    return value


def _int64_list_feature(values) -> tuple[bytes, bytes]:
    """Feature{int64_list: Int64List{value: values}} (packed varints; empty: b"\x1a\x00").

    Raises:
        ValueError: a value outside int64.
    """
    packed = b"".join(map(_int64, values))
    int_list = b"\x0a" + _length(len(packed)) + packed if packed else b""
    return b"\x1a" + _length(len(int_list)) + int_list, b""


def _bytes_list_feature(values) -> tuple[bytes, bytes]:
    """Feature{bytes_list: BytesList{value: values}}: one length-delimited entry per value."""
    parts = []
    for value in values:
        if isinstance(value, str):
            value = value.encode("utf-8")
        parts += (b"\x0a", _length(len(value)), value)
    bytes_list = b"".join(parts)
    return b"\x0a" + _length(len(bytes_list)), bytes_list


def _optional_feature(key: str, value) -> tuple[bytes, bytes]:
    """One optional or object feature's Feature, typed as OPTIONAL_FEATURES / OBJECT_FEATURES say.

    Raises:
        ValueError: `key` is neither (add it to core/schema.py), or `value` is not its type.
    """
    if key in OBJECT_FEATURES:
        return _object_feature(key, value)
    if key not in _OPTIONAL:
        raise ValueError(f"{key!r} is not an Example feature: add it to core/schema.py")
    dtype, shape, _ = _OPTIONAL[key]
    if not shape:
        return _scalar_feature(dtype, value)
    values = list(value)
    if len(values) != shape[0]:
        raise ValueError(f"{key} holds {shape} values, got {value!r}")
    return _float_feature([float(v) for v in values])


# Per-object features by dtype: a list of any length (0 included) in one Feature.
_LIST_FEATURES = {"string": _bytes_list_feature, "int64": _int64_list_feature}


def _object_feature(key: str, value) -> tuple[bytes, bytes]:
    """One OBJECT_FEATURES feature: a list per object for per-object keys, else one value.

    Raises:
        ValueError: a per-object key given a single value (a str or bytes, a number).
    """
    dtype, per_object = OBJECT_FEATURES[key]
    if not per_object:
        return _scalar_feature(dtype, value)
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(f"{key} holds one value per object: give a list, got {value!r}")
    if dtype == "float":
        return _float_feature([float(v) for v in value])
    return _LIST_FEATURES[dtype](value)


def _scalar_feature(dtype: str, value) -> tuple[bytes, bytes]:
    """One value's Feature of `dtype`."""
    if dtype == "string":
        return _bytes_feature(value)
    if dtype == "int64":
        return _int64_feature(value)
    return _float_feature([float(value)])


# Each map entry's key field (Features.feature is map<string, Feature>; an entry is
# {key: 1, value: 2}); deterministic serialization writes the entries in key order.
@functools.lru_cache(maxsize=256)
def _entry_keys(extra_keys: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Entry keys, in key order, of a record with every record's features and `extra_keys`
    (image/phash, image/group, a format's own): each set built once, found by its extras."""
    keys = sorted({*(key for key, _ in _FEATURES), *extra_keys})
    return {key: b"\x0a" + _length(len(key.encode())) + key.encode() for key in keys}


_ENTRY_KEYS = _entry_keys()


def make_example(
    *,
    encoded: bytes,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    label: int,
    label_text: str,
    filename: str | bytes,
    sha256: str,
    transcoded_from: str = "",
    transcode_reason: str = "",
    extra: dict | None = None,
) -> bytes:
    """Serialize one image as a `tf.train.Example`, deterministically (same input, same bytes).

    The bytes are those of protobuf's deterministic serialization of the tf.train.Example
    (map entries in key order), written out here because that is cheaper than building and
    serializing the message with protobuf. tests/unit/test_example_bytes.py compares the two on
    edge values.

    Args:
        extra: optional features this record has: {key of OPTIONAL_FEATURES: value}, and
            {key of OBJECT_FEATURES: value}, a list with one value per object (possibly
            empty) for per-object keys, one value for the others.

    Returns:
        The serialized Example.
    """
    features = {
        ENCODED: _bytes_feature(encoded),
        FORMAT: _bytes_feature(image_format),
        HEIGHT: _int64_feature(height),
        WIDTH: _int64_feature(width),
        CHANNELS: _int64_feature(channels),
        LABEL: _int64_feature(label),
        LABEL_TEXT: _bytes_feature(label_text),
        FILENAME: _bytes_feature(filename),
        SHA256: _bytes_feature(sha256),
        VERSION: _int64_feature(SCHEMA_VERSION),
        TRANSCODED_FROM: _bytes_feature(transcoded_from),
        TRANSCODE_REASON: _bytes_feature(transcode_reason),
    }
    entry_keys = _ENTRY_KEYS
    if extra:
        features.update((key, _optional_feature(key, value)) for key, value in extra.items())
        entry_keys = _entry_keys(tuple(extra))
    parts = [b"\x0a", b""]  # Example.features, field 1; its length goes in parts[1]
    total = 0
    for key, key_field in entry_keys.items():
        head, value = features[key]
        size = len(head) + len(value)
        entry = key_field + b"\x12" + _length(size)  # the entry's value: field 2, the Feature
        entry = b"\x0a" + _length(len(entry) + size) + entry  # Features.feature, field 1
        parts += (entry, head, value)
        total += len(entry) + size
    parts[1] = _length(total)
    return b"".join(parts)


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
