"""Shard markers: `DIR/.imgrec/shards/<shard>.json`, written beside each finished shard.

A marker holds the shard's ShardInfo (under "shard"), the plan it was written for, and, for an
uncompressed shard, one RecordLocation per record in shard order: the next run splices unchanged
records from them (transforms/splice_records.py), and the reader seeks to a record with one
small read instead of walking the shard (pipeline/reader/shard_records.py). The marker is
written after its shard is in place, atomically, so a listed offset points into a whole shard.
Imports neither Beam nor TensorFlow at module level (the reader's seek uses it; the converter's
helpers that read and place markers import `core.storage` inside the functions).
"""

from __future__ import annotations

import json
import posixpath
from typing import NamedTuple

__all__ = [
    "RECORDS_KEY",
    "SETTINGS_KEY",
    "SHARD_KEY",
    "RecordLocation",
    "marker_name",
    "marker_of_shard",
    "plan_marker_path",
    "read_shard_info",
    "record_offset",
    "record_offsets",
]

SHARD_KEY = "shard"  # the shard's ShardInfo as a dict
RECORDS_KEY = "records"  # one RecordLocation (a JSON list) per record
SETTINGS_KEY = "record_settings"  # digest of what decides a record's bytes besides its file

_FOLDER = ".imgrec/shards"


class RecordLocation(NamedTuple):
    """One record's line in its shard marker: what it was made from, and where it sits."""

    path: str
    sha256: str  # of the source file
    transcode: str  # the source's transcode reasons (inspection's)
    label: str
    label_id: int
    offset: int  # of the record's frame in the (uncompressed) shard
    length: int  # of the whole frame
    format: str  # image/format as stored
    stored_transcode: str  # image/transcode_reason: the source's reasons and the --store one


def marker_name(split: str, index: int, num_shards: int) -> str:
    """The marker of shard `index` of `num_shards` of `split`, relative to the dataset folder."""
    return f"{_FOLDER}/{split}-{index:05d}-of-{num_shards:05d}.json"


def plan_marker_path(output: str, split: str, index: int, num_shards: int) -> str:
    """The shard's marker under the dataset folder `output` (any store): a resumable run reuses a
    finished shard only if the same files, in the same order, with the same settings would be
    written again."""
    from core import storage

    return storage.join(output, *marker_name(split, index, num_shards).split("/"))


def read_shard_info(path: str) -> dict | None:
    """The JSON marker at `path` (any store), or None if there is none or it is unreadable."""
    from core import storage

    if not storage.exists(path):
        return None
    try:
        return json.loads(storage.read_bytes(path))
    except (storage.ReadError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def marker_of_shard(shard_path: str) -> str:
    """The marker of the shard at `shard_path` (`DIR/<split>/<name>.tfrecord[.gz]`)."""
    split_dir, name = posixpath.split(shard_path)
    stem = name.partition(".tfrecord")[0]
    return posixpath.join(posixpath.dirname(split_dir), _FOLDER, stem + ".json")


def record_offsets(marker: dict, shard_path: str, shard_size: int) -> list[int] | None:
    """Byte offset of every record of the shard at `shard_path` (`shard_size` bytes), then the
    shard's end; None when `marker` does not describe that shard as it is (another file or
    size, no record locations)."""
    shard = marker.get(SHARD_KEY) or {}
    records = marker.get(RECORDS_KEY)
    described = (
        records is not None
        and shard_path.endswith("/" + str(shard.get("file")))
        and shard.get("num_bytes") == shard_size
    )
    if not described:
        return None
    return [int(RecordLocation._make(r).offset) for r in records] + [shard_size]


def record_offset(marker: dict, shard_path: str, shard_size: int, index: int) -> int | None:
    """Byte offset of record `index` (the shard's end for `index` = its record count); None as
    for `record_offsets`, or for an index outside the shard."""
    offsets = record_offsets(marker, shard_path, shard_size)
    return offsets[index] if offsets is not None and 0 <= index < len(offsets) else None
