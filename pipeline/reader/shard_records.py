"""One shard's serialized records for the reader, with a record-count check that names a shard
that turns out corrupt, missing or unreadable. TensorFlow + core only."""

from __future__ import annotations

import json
import struct
from typing import NamedTuple

import tensorflow as tf

from core import dali_index, shard_markers, versions
from core.dali_index import RECORD_OVERHEAD

__all__ = ["Span", "read_shard"]

# Read-ahead per open shard: TF's 256 KB default costs a bucket round trip every few photos; 8 MB
# is what TF official models' ImageNet reader uses.
_READ_BUFFER_BYTES = 8 * 1024 * 1024

# ... and at least this much for a short read (a small piece of a shard).
_MIN_BUFFER_BYTES = 64 * 1024

# Records counted at a time by read_shard's count check: batches keep the check cheap, small
# ones bound the memory each open shard holds.
_COUNT_BATCH = 32
# Read attempts per shard beyond its expected batches (see read_shard): a read error ends the
# shard at once (TFRecordDataset moves past the file), so only a shard that cannot be opened
# uses them, and it fails after its expected batches plus these, not never.
_SPARE_READS = 4


class Span(NamedTuple):
    """Which records of a shard to read, as int64 tensors: from record `first` (at byte
    `offset`; -1: looked up with one small read, or read past in a compressed shard), `limit`
    records (-1: to the shard's end, whose count is then checked), `length` bytes (-1: not
    known; a known length bounds the read buffer)."""

    first: tf.Tensor
    offset: tf.Tensor
    limit: tf.Tensor
    length: tf.Tensor


def read_shard(
    path: tf.Tensor,
    compression: tf.Tensor,
    expected: tf.Tensor,
    check_counts: bool,
    data_dir: str = "",
    span: Span | None = None,
) -> tf.data.Dataset:
    """Serialized records of one shard; a shard that is corrupt, missing or unreadable fails
    with its name, after a bounded number of read attempts.

    TFRecordDataset's own DataLossError ("corrupted record at 12") does not say which file. So
    read errors end the shard early (`ignore_errors` logs the original error), and a count check
    against dataset_info.json after the shard's last record fails naming the shard. The count
    runs on small batches of records: per-record bookkeeping would cost more than the read.

    `ignore_errors` retries its input until it yields or ends, and TFRecordDataset retries a
    file it could not open (deleted, permission lost) on every call instead of moving past it:
    together they spun forever on a shard deleted under a running reader. Every call is
    therefore zipped behind a finite counter, asked first, so a shard that cannot be opened ends
    after its expected batches plus `_SPARE_READS`, with zero records, which the count check
    turns into the error naming it.

    With a `span`, only its records are read (see Span), and counted.
    """
    if span is None:
        records = tf.data.TFRecordDataset(
            path, compression_type=compression, buffer_size=_READ_BUFFER_BYTES
        )
    else:
        records = _records_in(path, compression, span)
        expected = tf.where(span.limit >= 0, span.limit, expected - span.first)
    if not check_counts:
        return records  # no ignore_errors: a read error stops iteration as TensorFlow raised it
    batches = records.batch(_COUNT_BATCH)
    attempts = tf.data.Dataset.range((expected + _COUNT_BATCH - 1) // _COUNT_BATCH + _SPARE_READS)
    # (attempt number, batch of records): ends when the shard ends or the attempts run out.
    batches = tf.data.Dataset.zip((attempts, batches)).ignore_errors(log_warning=True)
    # One empty batch marks the end of the shard.
    batches = batches.concatenate(
        tf.data.Dataset.from_tensors((tf.constant(-1, tf.int64), tf.constant([], tf.string)))
    )
    advice = _unreadable_shard_advice(data_dir)

    def count(n: tf.Tensor, attempt_batch):
        _, batch = attempt_batch
        size = tf.shape(batch, out_type=tf.int64)[0]
        ok = tf.logical_or(size > 0, tf.equal(n, expected))
        # Built per batch of records, not per record: cheap enough to read well on failure.
        message = tf.strings.join(
            [
                "imgrec reader: shard ",
                path,
                " is corrupt, truncated, missing or unreadable: read ",
                tf.strings.as_string(n),
                " of ",
                tf.strings.as_string(expected),
                advice,
            ]
        )
        with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
            return n + size, tf.identity(batch)

    return batches.scan(tf.constant(0, tf.int64), count).unbatch()


def _records_in(path: tf.Tensor, compression: tf.Tensor, span: Span) -> tf.data.Dataset:
    """The shard's records in `span`. Call it inside a dataset function only (as the reader
    does): TensorFlow 2.21 does not serialize the kernel's offsets, so a top-level dataset of
    it fails when tf.data rewrites the graph."""
    first, known = tf.cast(span.first, tf.int64), tf.cast(span.offset, tf.int64)
    uncompressed = tf.equal(compression, "")
    look_up = tf.logical_and(uncompressed, tf.logical_and(first > 0, known < 0))
    start = tf.cond(
        look_up,
        lambda: tf.ensure_shape(tf.py_function(_byte_offset, [path, first], tf.int64), []),
        lambda: tf.maximum(known, 0),
    )
    # TFRecordDataset's kernel takes a start offset per file; its Python class does not.
    variant = tf.raw_ops.TFRecordDatasetV2(
        filenames=tf.reshape(path, [1]),
        compression_type=compression,
        buffer_size=_buffer_bytes(span.length),
        byte_offsets=tf.reshape(start, [1]),
    )
    records = tf.data.experimental.from_variant(variant, tf.TensorSpec([], tf.string))
    seeked = tf.logical_and(uncompressed, tf.logical_or(look_up, known >= 0))
    return records.skip(tf.where(seeked, tf.constant(0, tf.int64), first)).take(span.limit)


def _buffer_bytes(length: tf.Tensor) -> tf.Tensor:
    """The read buffer for reading `length` bytes (<= 0: not known): a piece smaller than the
    buffer is read once, not a whole buffer's worth of the shard."""
    full = tf.constant(_READ_BUFFER_BYTES, tf.int64)
    length = tf.cast(length, tf.int64)
    return tf.where(length > 0, tf.clip_by_value(length, _MIN_BUFFER_BYTES, full), full)


def _byte_offset(path: tf.Tensor, skip: tf.Tensor) -> int:
    """Byte offset of record `skip` of an uncompressed shard, from one small read: its shard
    marker (core/shard_markers.py) or its DALI index (`--dali_index`). Without either (shards
    copied without them), each frame's 8-byte length is read and the data jumped over; on a
    bucket that walk fetches the skipped part of this one shard."""
    name = path.numpy().decode()
    if int(skip) == 0:
        return 0
    for listed in (_marker_offset, _indexed_offset):
        offset = listed(name, int(skip))
        if offset is not None:
            return offset
    return _walked_offset(name, int(skip))


def _walked_offset(name: str, skip: int) -> int:
    """Record `skip`'s offset found frame by frame (frame = length + its crc + data + data crc)."""
    offset = 0
    with tf.io.gfile.GFile(name, "rb") as f:
        for _ in range(skip):
            f.seek(offset)
            head = f.read(8)
            if len(head) != 8:
                raise ValueError(f"imgrec reader: shard {name} ends before record {skip}")
            offset += struct.unpack("<Q", head)[0] + RECORD_OVERHEAD
    return offset


def _marker_offset(name: str, skip: int) -> int | None:
    """Record `skip`'s offset from the shard's marker, or None without one that describes it."""
    marker = shard_markers.marker_of_shard(name)
    try:
        with tf.io.gfile.GFile(marker, "rb") as f:
            body = json.loads(f.read())
        size = tf.io.gfile.stat(name).length
    except (tf.errors.OpError, ValueError):  # no marker, or not one this reader understands
        return None
    return shard_markers.record_offset(body, name, size, skip) if isinstance(body, dict) else None


def _indexed_offset(name: str, skip: int) -> int | None:
    """Record `skip`'s offset from `<shard>.idx` (core/dali_index.py), or None without one."""
    index = dali_index.index_name(name)
    if not tf.io.gfile.exists(index):
        return None
    with tf.io.gfile.GFile(index, "rb") as f:
        lines = f.read().splitlines()
    if skip > len(lines):
        raise ValueError(f"imgrec reader: {index} lists {len(lines)} records, not {skip + 1}")
    if skip == len(lines):  # the end of the shard
        offset, size = lines[-1].split()
        return int(offset) + int(size)
    return int(lines[skip].split()[0])


def _unreadable_shard_advice(data_dir: str) -> str:
    """The end of read_shard's error: the dataset, and what to do (restart, for a pruned version)."""
    where = f" of dataset {data_dir}" if data_dir else ""
    version = data_dir.rstrip("/").rpartition("/")[2]
    if versions.is_version_name(version):
        hint = (
            f"; if version {version} was pruned (--keep_versions) or removed while this job ran, "
            "restart the job: it reads the version LATEST names now (docs/scheduling.md)"
        )
    else:
        hint = ""
    return (
        " records" + where + " (the read error is logged above); if the shard is "
        "there, re-convert it or run `imgrec verify`" + hint
    )
