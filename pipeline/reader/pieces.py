"""The units training deals to its lanes: whole shards, or, in a split of fewer shards than
are read at once, pieces of them.

Reading a few shards at once, a global batch holds runs of neighbouring records; with whole
shards as the units those runs, and so the batches, would be much the same every epoch. Cut
into pieces dealt in a new order each epoch, a small split gets new neighbours in every
batch without permuting a large window (docs/training.md). A piece is opened at its first
record's byte offset, known when the dataset is made from the shard markers the converter
writes (core/shard_markers.py): no per-piece lookup while reading. TensorFlow + core only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence

import tensorflow as tf

from core import shard_markers

__all__ = ["Pieces", "cut_shards", "record_offsets", "split_pieces"]

_log = logging.getLogger("pipeline.reader")

# A piece holds about this many bytes of records (two read buffers) ...
_PIECE_BYTES = 16 * 2**20
# ... and a small split has at least this many pieces per lane.
_PIECES_PER_LANE = 16


@dataclasses.dataclass(frozen=True)
class Pieces:
    """The training split as runs of records, in listed order: piece i is records
    `[first[i], first[i] + count[i])` of listed shard `shard[i]`, bytes `[offset[i],
    offset[i] + length[i])` of it (length -1: not known).

    `lanes`: pieces read at once, as many as there are shards, at most `shards_at_once` (an
    open lane beyond the shards costs CPU and mixes nothing). `cut`: the shards were cut, or
    there are at least `shards_at_once` of them: either way one global batch mixes enough.
    """

    shard: tuple[int, ...]
    first: tuple[int, ...]
    count: tuple[int, ...]
    offset: tuple[int, ...]
    length: tuple[int, ...]
    lanes: int
    cut: bool


def split_pieces(shards: Sequence, store, num_bytes: int, shards_at_once: int) -> Pieces:
    """The split's pieces: whole shards when there are `shards_at_once` or more, or when a
    shard cannot be cut (compressed, or without a marker that describes it as it is)."""
    counts = [s.num_examples for s in shards]
    lanes = max(1, min(shards_at_once, len(shards)))
    if len(shards) >= shards_at_once:
        return _whole(shards, lanes, cut=True)
    offsets = [record_offsets(s, store) for s in shards]
    uncut = [s.path for s, o in zip(shards, offsets, strict=True) if o is None]
    if uncut:
        _log.info(
            "training reads %d shard(s) whole (compressed, or no shard marker), e.g. %s: "
            "batches are mixed over the shuffle buffer's window instead",
            len(uncut),
            uncut[0],
        )
        return _whole(shards, lanes, cut=False)
    return cut_shards(counts, offsets, num_bytes, lanes)


def cut_shards(
    counts: Sequence[int], offsets: Sequence[Sequence[int]], num_bytes: int, lanes: int
) -> Pieces:
    """Shards of `counts` records (record r of shard i at byte `offsets[i][r]`, its end at
    `offsets[i][counts[i]]`; `num_bytes` in all) cut into pieces of about `_PIECE_BYTES`, and
    at least `_PIECES_PER_LANE` per lane."""
    total = sum(counts)
    record_bytes = max(1, num_bytes // max(1, total))
    size = max(1, min(_PIECE_BYTES // record_bytes, total // (lanes * _PIECES_PER_LANE)))
    pieces = []
    for index, (count, starts) in enumerate(zip(counts, offsets, strict=True)):
        for first in range(0, count, size):
            last = min(first + size, count)
            pieces.append((index, first, last - first, starts[first], starts[last] - starts[first]))
    if not pieces:  # a split of empty shards
        n = len(counts)
        return Pieces(tuple(range(n)), (0,) * n, (0,) * n, (0,) * n, (0,) * n, lanes, cut=True)
    return Pieces(*zip(*pieces, strict=True), lanes, cut=True)


def _whole(shards: Sequence, lanes: int, cut: bool) -> Pieces:
    n = len(shards)
    counts, lengths = (tuple(s.num_examples for s in shards), tuple(s.num_bytes for s in shards))
    return Pieces(tuple(range(n)), (0,) * n, counts, (0,) * n, lengths, lanes, cut)


def record_offsets(shard, store) -> list[int] | None:
    """Every record's byte offset in `shard` from its marker, or None when it cannot be cut."""
    if shard.compression or shard.num_bytes < 0:
        return None
    try:
        body = json.loads(store.read_bytes(shard_markers.marker_of_shard(shard.path)))
    except (OSError, tf.errors.OpError, ValueError):  # no marker, or not one we understand
        return None
    if not isinstance(body, dict):
        return None
    offsets = shard_markers.record_offsets(body, shard.path, shard.num_bytes)
    if offsets is None or len(offsets) != shard.num_examples + 1:
        return None
    return offsets
