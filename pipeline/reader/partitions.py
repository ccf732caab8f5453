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

import numpy as np

from pipeline.reader.epoch_order import EpochOrder
from pipeline.reader.pieces import Pieces

__all__ = [
    "DEFAULT_PARTITIONS",
    "PartitionedOrder",
    "default_partitions",
    "partition",
    "partition_seed",
]

# Partitions by default (at most): a power of two, so the usual host counts (2, 4, 8, ... 64)
# each read exactly 1/N of a split; other counts read one partition more (1/64 of the split).
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

    def epoch_records(self, epoch: int) -> list[int]:
        """The listed-order index of every record of the epoch's steps, step after step (tests,
        benchmarks): each partition's own order cut into its columns."""
        parts = []
        for p, order in enumerate(self.orders):
            local = np.asarray(order.epoch_records(epoch)[: self.steps * self.width(p)])
            parts.append((local + self.starts[p]).reshape(self.steps, self.width(p)))
        return [int(v) for v in np.concatenate(parts, axis=1).reshape(-1)]


def default_partitions(num_units: int, global_batch_size: int) -> int:
    """The partitions when none are asked for: the largest power of two that is at most
    DEFAULT_PARTITIONS, the split's units (a partition of one piece or more) and the global
    batch (a partition gives each batch a record or more)."""
    most = max(1, min(DEFAULT_PARTITIONS, num_units, global_batch_size))
    return 1 << (most.bit_length() - 1)


def partition(
    template: EpochOrder, pieces: Pieces, global_batch_size: int, count: int, steps_per_window: int
) -> PartitionedOrder:
    """`template` (the whole split's order over `pieces`) in `count` partitions: each gets the
    template's lanes divided among them (one at least), its seed, and windows of
    `steps_per_window` steps of its part. One partition is the template itself.

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
        unit = _within(pieces, starts[p], starts[p + 1])
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


def _within(pieces: Pieces, low: int, high: int) -> Pieces:
    """The pieces of listed records `[low, high)`: whole pieces, and the parts of the (at most
    two) pieces cut at its edges, whose byte offset is looked up when read (-1)."""
    rows = []
    start = 0
    for shard, first, count, offset, length in zip(
        pieces.shard, pieces.first, pieces.count, pieces.offset, pieces.length, strict=True
    ):
        begin, end = max(low, start), min(high, start + count)
        if begin < end:
            whole = begin == start and end == start + count
            rows.append(
                (
                    shard,
                    first + begin - start,
                    end - begin,
                    offset if begin == start else -1,
                    length if whole else -1,
                )
            )
        start += count
    shard, first, count, offset, length = zip(*rows, strict=True)
    return Pieces(shard, first, count, offset, length, pieces.lanes, pieces.cut)
