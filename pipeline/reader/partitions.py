"""The training epoch order over a fixed number of partitions (MosaicML Streaming's canonical
nodes): each partition a contiguous run of the split's records with its own epoch order, each
global batch the concatenation of every partition's part of it, so a worker reads only the
partitions whose part of the batch it takes. TensorFlow + core only.

Partition p holds listed records `[starts[p], starts[p+1])` and gives columns
`[columns[p], columns[p+1])` of every global batch (`columns[p] = B*p // P`); its records in its
own order (pipeline/reader/epoch_order.py over its pieces) fill those columns step after step.
The starts give partition p at least `steps * width(p)` records (the epoch's `N // B` steps for
every partition) and spread the `N % B` records an epoch leaves out over the partitions.
Nothing depends on the number of workers: worker w of W takes columns `[B*w/W, B*(w+1)/W)` and
reads the partitions they overlap, whole ones when W divides P, else one more shared with a
neighbour (read by both, each keeping its columns).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from pipeline.reader.epoch_order import (
    EpochOrder,
    merged_listed,
    resume_from,
    resumed_inputs,
    shard_order,
    window_permutation,
)
from pipeline.reader.pieces import Pieces

__all__ = [
    "DEFAULT_PARTITIONS",
    "PartitionTables",
    "PartitionedOrder",
    "default_partitions",
    "partition",
    "partition_seed",
]

# Partitions by default at most: a power of two, so the usual host counts (2, 4, 8 ...) each read
# exactly 1/N of a split, other counts one partition more. The default is also at most
# `shards_at_once`: each partition reads one shard at a time, so one host reads as many at
# once, with as many read buffers, as the order in one partition does.
DEFAULT_PARTITIONS = 64

# Spreads one seed over the partitions' independent orders (any odd constant would do).
_PARTITION_STRIDE = 1_000_003


@dataclasses.dataclass(frozen=True)
class PartitionedOrder:
    """The split's epoch order as partitions (see the module docstring).

    orders: each partition's epoch order over its pieces (`units`).
    units: each partition's pieces of the listed split (pipeline/reader/pieces.py).
    starts: the listed record each partition starts at (P + 1 entries, the last N).
    columns: where each partition's part of a global batch starts (P + 1, the last B).
    steps: global steps per epoch.
    steps_per_window: global steps whose records each window permutes together.
    """

    orders: tuple[EpochOrder, ...]
    units: tuple[Pieces, ...]
    starts: tuple[int, ...]
    columns: tuple[int, ...]
    steps: int
    steps_per_window: int

    @property
    def count(self) -> int:
        return len(self.orders)

    @property
    def global_batch_size(self) -> int:
        return self.columns[-1]

    def width(self, p: int) -> int:
        """Records partition `p` gives each global batch."""
        return self.columns[p + 1] - self.columns[p]

    def owned(self, num_pipelines: int, pipeline_id: int) -> tuple[range, int, int]:
        """(partitions pipeline `pipeline_id` of `num_pipelines` reads, the first and one past
        the last of its columns among theirs): its part of each global batch."""
        batch = self.global_batch_size
        low = batch * pipeline_id // num_pipelines
        high = batch * (pipeline_id + 1) // num_pipelines
        mine = [
            p for p in range(self.count) if self.columns[p] < high and self.columns[p + 1] > low
        ]
        first = self.columns[mine[0]]
        return range(mine[0], mine[-1] + 1), low - first, high - first

    @property
    def lanes(self) -> int:
        """Pieces each partition reads at once (a partition of fewer has fewer open)."""
        return max(order.lanes for order in self.orders)

    def all_units(self) -> Pieces:
        """Every partition's pieces end to end: partition p's piece i is piece `bases[p] + i`."""
        fields = ("shard", "first", "count", "offset", "length")
        joined = {f: tuple(v for unit in self.units for v in getattr(unit, f)) for f in fields}
        return Pieces(**joined, lanes=self.units[0].lanes, cut=self.units[0].cut)

    def bases(self) -> list[int]:
        """Where each partition's pieces begin in `all_units`."""
        return [int(v) for v in np.cumsum([0] + [len(u.count) for u in self.units])[:-1]]

    def epoch_records(self, epoch: int) -> list[int]:
        """The listed-order index of every record of the epoch's steps, step after step (tests,
        benchmarks): each partition's own order cut into its columns."""
        parts = []
        for p, order in enumerate(self.orders):
            local = np.asarray(order.epoch_records(epoch)[: self.steps * self.width(p)])
            parts.append((local + self.starts[p]).reshape(self.steps, self.width(p)))
        return [int(v) for v in np.concatenate(parts, axis=1).reshape(-1)]


class PartitionTables:
    """The partitions' seeds and widths as int64 tensors indexed by partition: one traced
    function serves every partition."""

    def __init__(self, plan: PartitionedOrder):
        count = plan.count
        self.seeds = tf.constant([o.seed % 2**62 for o in plan.orders], tf.int64)
        self.widths = tf.constant([plan.width(p) for p in range(count)], tf.int64)
        self.permute = plan.orders[0].permute
        self.plan = plan
        self.bases = tf.constant(plan.bases(), tf.int64)
        self.num_units = tf.constant([len(u.count) for u in plan.units], tf.int64)
        self.starts = tf.constant(plan.starts[:-1], tf.int64)

    def resume_inputs(self, p, epoch, start) -> tuple[tf.Tensor, tf.Tensor]:
        """Partition `p`'s interleave input from its merged position `start` on: (int64 [K]
        pieces of `all_units`, int64 [K] records to skip), as EpochOrder.resume_inputs."""
        order = shard_order(tf.gather(self.seeds, p), epoch, tf.gather(self.num_units, p))

        def resumed(order, start, p):
            partition = self.plan.orders[int(p)]
            return resumed_inputs(partition.counts, partition.lanes, order.numpy(), int(start))

        units, skips = resume_from(order, start, resumed, tf.cast(p, tf.int64))
        return units + tf.gather(self.bases, p), skips

    def merged_records(self, p, epoch) -> tf.Tensor:
        """int64 [records of p]: the listed index of each of partition `p`'s merged positions,
        as EpochOrder.merged_records (+ the partition's start)."""
        order = shard_order(tf.gather(self.seeds, p), epoch, tf.gather(self.num_units, p))

        def merged(order, p):
            partition = self.plan.orders[int(p)]
            return merged_listed(partition.counts, partition.lanes, order.numpy())

        merged = tf.py_function(merged, [order, tf.cast(p, tf.int64)], tf.int64)
        return tf.ensure_shape(merged, [None]) + tf.gather(self.starts, p)

    def permutation(self, p, epoch, window, size) -> tf.Tensor:
        """int64 [size]: partition `p`'s window `window`, merged positions in final order."""
        return window_permutation(tf.gather(self.seeds, p), epoch, window, size)


def default_partitions(num_units: int, global_batch_size: int, shards_at_once: int) -> int:
    """The partitions when none are asked for: the largest power of two that is at most
    DEFAULT_PARTITIONS, `shards_at_once`, the split's units (a partition of one piece or more)
    and the global batch (a partition gives each batch a record or more)."""
    most = max(1, min(DEFAULT_PARTITIONS, shards_at_once, num_units, global_batch_size))
    return 1 << (most.bit_length() - 1)


def partition(
    template: EpochOrder,
    pieces: Pieces,
    global_batch_size: int,
    count: int,
    steps_per_window: int,
    locate: Callable[[int], Sequence[int] | None] | None = None,
) -> PartitionedOrder:
    """`template` (the whole split's order over `pieces`) in `count` partitions: each gets the
    template's lanes divided among them (one at least), its seed, and windows of
    `steps_per_window` steps of its part. One partition is the template itself. `locate(i)`:
    the byte offset of every record of listed shard i and its end (None: not known), for
    the pieces a partition's edge cuts: read from there to there, not to the shard's end.

    Raises:
        ValueError: `count` is not between 1 and the global batch size.
    """
    batch = global_batch_size
    if not 1 <= count <= batch:
        raise ValueError(
            f"Order(partitions={count}): each partition gives every global batch a record or "
            f"more, so between 1 and global_batch_size ({batch}); None picks one"
        )
    total = template.num_examples
    steps, left_out = divmod(total, batch)
    columns = [batch * p // count for p in range(count + 1)]
    starts = [steps * c + left_out * c // batch for c in columns]
    orders, units = [], []
    for p in range(count):
        unit = _within(pieces, starts[p], starts[p + 1], locate)
        units.append(unit)
        orders.append(
            EpochOrder(
                counts=unit.count,
                seed=partition_seed(template.seed, p, count),
                lanes=max(1, template.lanes // count),
                window=steps_per_window * (columns[p + 1] - columns[p]),
                permute=template.permute,
            )
        )
    return PartitionedOrder(
        tuple(orders), tuple(units), tuple(starts), tuple(columns), steps, steps_per_window
    )


def partition_seed(seed: int, p: int, count: int) -> int:
    """Partition `p`'s seed drawn from `seed` (one partition: `seed` itself, today's order)."""
    if count == 1:
        return seed
    return (seed * _PARTITION_STRIDE + 7919 * (p + 1)) % 2**62


def _within(pieces: Pieces, low: int, high: int, locate) -> Pieces:
    """The pieces of listed records `[low, high)`: whole pieces, and the parts of the (at most
    two) pieces cut at its edges, at the byte offsets `locate` knows (else -1: the offset is
    looked up when read, and the read goes on to the shard's end)."""
    rows = []
    start = 0
    for shard, first, count, offset, length in zip(
        pieces.shard, pieces.first, pieces.count, pieces.offset, pieces.length, strict=True
    ):
        begin, end = max(low, start), min(high, start + count)
        if begin < end:
            row = (shard, first + begin - start, end - begin, offset, length)
            if begin != start or end != start + count:
                row = _cut(row, begin == start, locate)
            rows.append(row)
        start += count
    shard, first, count, offset, length = zip(*rows, strict=True)
    return Pieces(shard, first, count, offset, length, pieces.lanes, pieces.cut)


def _cut(row: tuple, same_start: bool, locate) -> tuple:
    """A piece's row `(shard, first, count, offset, length)` cut to its records, with its
    bytes when `locate` knows the shard's record offsets."""
    shard, first, count, offset, _ = row
    offsets = locate(shard) if locate is not None else None
    if offsets is None:
        return shard, first, count, offset if same_start else -1, -1
    return shard, first, count, offsets[first], offsets[first + count] - offsets[first]
