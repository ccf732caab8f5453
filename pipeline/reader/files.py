"""Which files a converted split has: dataset_info.json (at a versioned root's LATEST), its shards
checked to exist, exact steps per epoch, and the images' typical size. TensorFlow + core only."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import posixpath
from collections.abc import Sequence

import tensorflow as tf

from core import schema, shard_cache, versions

__all__ = [
    "ShardFile",
    "dataset_info",
    "load_split",
    "resolve_version",
    "split_files",
    "steps_per_epoch",
    "typical_min_side",
]

_log = logging.getLogger("pipeline.reader")

# Compression by shard-name suffix (CONTRACT.md: "GZIP adds .gz").
_COMPRESSION_BY_SUFFIX = {".gz": "GZIP", ".zz": "ZLIB", ".zlib": "ZLIB"}
# Without the converter's size statistics, records sampled from the split's first shard to
# decide DCT scaling (one small read).
_SIZE_SAMPLE_RECORDS = 64


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One shard of a split, as dataset_info.json lists it."""

    path: str  # absolute path or URI
    compression: str  # "", "GZIP" or "ZLIB", from the file name's suffix
    num_examples: int  # -1 when dataset_info.json does not say
    num_bytes: int = -1  # likewise


def split_files(
    data_dir: str, split: str, *, s3_endpoint_url: str | None = None
) -> tuple[dict, tuple[ShardFile, ...]]:
    """The split's entry in dataset_info.json and its shards, checked to exist.

    Args:
        data_dir: the converter's output directory (local path or URI: gs://, s3://, ...).
        split: a split name listed in dataset_info.json, e.g. "train".
        s3_endpoint_url: S3 endpoint for s3:// data (default: boto3's, or AWS_ENDPOINT_URL_S3).

    Returns:
        (the split's dict from dataset_info.json, its shards in listed order).

    Raises:
        schema.DatasetInfoError: `data_dir` has no readable dataset_info.json.
        ValueError: the split is not in dataset_info.json, or lists no shards.
        FileNotFoundError: a listed shard is missing, naming it.
    """
    store = shard_cache.open_store(data_dir, s3_endpoint_url)
    data_dir = resolve_version(data_dir, store)  # a versioned root reads LATEST's version
    _, split_info, shards = load_split(data_dir, split, store)
    return split_info, shards


def dataset_info(data_dir: str, *, s3_endpoint_url: str | None = None) -> dict:
    """dataset_info.json of `data_dir`, of LATEST's version on a versioned root (label names,
    splits, statistics), as `make_dataset` reads it.

    Raises:
        schema.DatasetInfoError: `data_dir` has no readable dataset_info.json.
    """
    store = shard_cache.open_store(data_dir, s3_endpoint_url)
    return store.load_dataset_info(resolve_version(data_dir, store))


def resolve_version(data_dir: str, store: shard_cache.Store) -> str:
    """A versioned root -> the version folder its LATEST pointer names, read through `store`
    (so s3:// roots resolve with the reader's own client); other folders as they are."""

    def read_text(uri: str) -> str | None:
        return store.read_bytes(uri).decode("utf-8", "replace") if store.exists(uri) else None

    return versions.resolve_dataset_dir(data_dir, read_text=read_text)


def load_split(
    data_dir: str, split: str, store: shard_cache.Store
) -> tuple[dict, dict, tuple[ShardFile, ...]]:
    """(dataset_info.json, the split's entry, its checked shards); see split_files."""
    info = store.load_dataset_info(data_dir)
    info_path = posixpath.join(data_dir.rstrip("/"), schema.DATASET_INFO)
    splits = info.get("splits") or {}
    if split not in splits:
        raise ValueError(
            f"unknown split {split!r}: {info_path} has splits {sorted(splits)}; pass one of them"
        )
    split_info = splits[split]
    listed = split_info.get("shards") or []
    if not listed:
        raise ValueError(f"split {split!r} in {info_path} lists no shards; re-run the conversion")
    shards = []
    for entry in listed:
        rel = entry["file"]
        suffix = os.path.splitext(rel)[1]
        shards.append(
            ShardFile(
                path=posixpath.join(data_dir.rstrip("/"), rel),
                compression=_COMPRESSION_BY_SUFFIX.get(suffix, ""),
                num_examples=int(entry.get("num_examples", -1)),
                num_bytes=int(entry.get("num_bytes", -1)),
            )
        )
    _check_shards_exist(data_dir, split, shards, store)
    return info, split_info, tuple(shards)


def _check_shards_exist(
    data_dir: str, split: str, shards: Sequence[ShardFile], store: shard_cache.Store
) -> None:
    """One directory listing per folder (cheap on object stores) instead of a stat per shard."""
    present: dict[str, set[str]] = {}
    missing = []
    for shard in shards:
        folder, name = posixpath.split(shard.path)
        if folder not in present:
            present[folder] = set(store.listdir(folder))
        if name not in present[folder]:
            missing.append(shard.path)
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise FileNotFoundError(
            f"split {split!r} of {data_dir}: {len(missing)} shard(s) listed in "
            f"{schema.DATASET_INFO} are missing: {shown}; re-run the conversion (or copy the "
            f"whole output directory), then `imgrec verify {data_dir}`"
        )


def steps_per_epoch(
    data_dir: str,
    split: str,
    global_batch_size: int,
    *,
    drop_remainder: bool = True,
    s3_endpoint_url: str | None = None,
) -> int:
    """Global steps in one pass over the split, exactly, from dataset_info.json.

    Args:
        data_dir: the converter's output directory.
        split: split name, e.g. "train".
        global_batch_size: examples per step over all replicas.
        drop_remainder: True (training) counts full batches only; False (evaluation) counts
            the last partial batch too.
        s3_endpoint_url: S3 endpoint for s3:// data, as for make_dataset.

    Returns:
        The number of steps.

    Raises:
        ValueError: unknown split, non-positive batch size, or (with drop_remainder) a split
            smaller than one batch.
    """
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    store = shard_cache.open_store(data_dir, s3_endpoint_url)
    data_dir = resolve_version(data_dir, store)
    info = store.load_dataset_info(data_dir)
    splits = info.get("splits") or {}
    if split not in splits:
        raise ValueError(
            f"unknown split {split!r}: {data_dir} has splits {sorted(splits)}; pass one of them"
        )
    n = int(splits[split]["num_examples"])
    if not drop_remainder:
        return math.ceil(n / global_batch_size)
    if n < global_batch_size:
        raise ValueError(
            f"split {split!r} has {n} examples, fewer than one global batch of "
            f"{global_batch_size}: lower the batch size or pass drop_remainder=False"
        )
    return n // global_batch_size


def typical_min_side(
    info: dict, shard: ShardFile, local_copies: shard_cache.ShardCache | None = None
) -> int:
    """Median shorter side of the images: from the converter's statistics, else sampled (with a
    cache, from the first records of `shard`, read without downloading the whole shard)."""
    stats = info.get("statistics") or {}
    height = (stats.get("height_quantiles") or {}).get("p50")
    width = (stats.get("width_quantiles") or {}).get("p50")
    if height and width:
        return int(min(height, width))
    if local_copies is not None:
        sample = local_copies.head_sample(shard.path, shard.compression, _SIZE_SAMPLE_RECORDS)
        shard = ShardFile(path=sample, compression="", num_examples=-1)
    return _sampled_min_side(shard)


def _sampled_min_side(shard: ShardFile) -> int:
    """Median shorter side of the JPEGs among the first records of `shard` (0 if none)."""
    records = tf.data.TFRecordDataset(shard.path, compression_type=shard.compression)
    sides: list[int] = []
    try:
        for side in _jpeg_min_sides(records.take(_SIZE_SAMPLE_RECORDS)):
            sides.append(side)
    except tf.errors.OpError as e:
        # The pipeline reads the shard again and fails there with the shard's name; here we
        # only lose the size hint, so decode at full scale (from the sides read before it).
        _log.warning("could not sample image sizes from %s (%s)", shard.path, e.message)
    return _median(sides)


def median_jpeg_min_side(records) -> int:
    """Median shorter side of the JPEGs among serialized `records` (raw-pixel records and other
    formats do not count, as in the reader's own sample); 0 if there are none."""
    return _median(list(_jpeg_min_sides(records)))


def _median(sides: list[int]) -> int:
    return int(sorted(sides)[len(sides) // 2]) if sides else 0


def _jpeg_min_sides(records):
    """The shorter side of each JPEG among `records` (serialized Examples), as they are read."""
    spec = schema.feature_spec(keys=(schema.ENCODED, schema.FORMAT))
    for record in records:
        features = tf.io.parse_single_example(record, spec)
        encoded = features[schema.ENCODED]
        if features[schema.FORMAT] != schema.RAW_FORMAT and bool(tf.io.is_jpeg(encoded)):
            height, width, _ = tf.io.extract_jpeg_shape(encoded).numpy()
            yield min(height, width)
