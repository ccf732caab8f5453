"""The epoch order in partitions (pipeline/reader/partitions.py), as pure functions: which
records each partition holds, which partitions each worker reads, the default count, and the
global batches they make. The reader over shards in process: tests/integration/
test_reader_partitions.py; killed and resumed clusters: tests/e2e/test_resume.py."""

from __future__ import annotations

import pytest

from pipeline.reader.epoch_order import EpochOrder
from pipeline.reader.partitions import default_partitions, partition
from pipeline.reader.pieces import Pieces

pytestmark = pytest.mark.unit

COUNTS = (3, 17, 5, 9, 11, 2, 8, 1, 30, 14)  # 100 records in 10 shards


def _plan(counts=COUNTS, batch=24, count=8, locate=None, lanes=4):
    n = len(counts)
    pieces = Pieces(tuple(range(n)), (0,) * n, counts, (0,) * n, (-1,) * n, lanes, True)
    template = EpochOrder(counts, seed=9, lanes=lanes, window=batch, permute=False)
    return partition(template, pieces, batch, count, 2, locate)


def test_partitions_hold_disjoint_runs_of_records_enough_for_every_step():
    plan = _plan()
    assert plan.starts[0] == 0 and plan.starts[-1] == sum(COUNTS)
    assert plan.columns == (0, 3, 6, 9, 12, 15, 18, 21, 24)
    for p in range(plan.count):
        held = plan.starts[p + 1] - plan.starts[p]
        assert held == sum(plan.units[p].count) >= plan.steps * plan.width(p)


def test_an_epoch_is_every_partitions_part_of_each_step_each_record_once():
    plan = _plan()
    for epoch in (0, 1):
        records = plan.epoch_records(epoch)
        assert len(records) == len(set(records)) == plan.steps * 24
        steps = [records[s * 24 : (s + 1) * 24] for s in range(plan.steps)]
        for p in range(plan.count):  # column range p holds partition p's records only
            low, high = plan.starts[p], plan.starts[p + 1]
            cols = range(plan.columns[p], plan.columns[p + 1])
            assert all(low <= step[c] < high for step in steps for c in cols)
    assert plan.epoch_records(0) != plan.epoch_records(1)


def test_one_partition_is_the_whole_splits_order():
    plan = _plan(count=1)
    template = EpochOrder(COUNTS, seed=9, lanes=4, window=24, permute=False)
    assert plan.epoch_records(3) == template.epoch_records(3)[: plan.steps * 24]


@pytest.mark.parametrize(
    ("workers", "owned"),
    [
        (1, [(range(0, 8), 0, 24)]),
        (2, [(range(0, 4), 0, 12), (range(4, 8), 0, 12)]),
        (4, [(range(2 * w, 2 * w + 2), 0, 6) for w in range(4)]),
        # 3 does not divide 8: a worker also reads a partition it shares, for its columns
        (3, [(range(0, 3), 0, 8), (range(2, 6), 2, 10), (range(5, 8), 1, 9)]),
    ],
)
def test_a_worker_reads_the_partitions_its_columns_come_from(workers, owned):
    plan = _plan()
    assert [plan.owned(workers, w) for w in range(workers)] == owned


def test_a_cut_piece_is_read_at_the_bytes_its_shards_marker_gives():
    """A partition edge inside shard 1 (records 0-16 at bytes 100*r): the pieces on each side
    start and end at those records' bytes; without a marker, the offset is looked up (-1)."""
    offsets = {1: [100 * r for r in range(18)]}
    plan = _plan(count=2, locate=offsets.get)
    assert plan.starts == (0, 50, 100)
    left, right = plan.units
    assert (left.shard[-1], left.first[-1], left.count[-1], left.length[-1]) == (6, 0, 3, -1)
    assert (right.shard[0], right.first[0], right.count[0]) == (6, 3, 5)
    plan = _plan(count=8, locate=offsets.get)
    first, second = plan.units[0], plan.units[1]
    assert (first.shard[-1], first.first[-1], first.count[-1]) == (1, 0, 9)
    assert (first.offset[-1], first.length[-1]) == (0, 900)
    assert (second.shard[0], second.first[0], second.offset[0], second.length[0]) == (
        1,
        9,
        900,
        800,
    )
    unknown = _plan(count=8).units[1]
    assert (unknown.offset[0], unknown.length[0]) == (-1, -1)


@pytest.mark.parametrize(
    ("units", "batch", "at_once", "count"),
    [(1024, 256, 32, 32), (1024, 256, 128, 64), (10, 24, 32, 8), (5, 16, 32, 4), (3, 2, 32, 2),
     (1, 8, 32, 1), (400, 256, 20, 16)],
)  # fmt: skip
def test_the_default_count_is_a_power_of_two_the_units_and_batch_allow(
    units, batch, at_once, count
):
    assert default_partitions(units, batch, at_once) == count


def test_more_partitions_than_the_batch_has_records_are_refused():
    with pytest.raises(ValueError, match="partitions=25.*between 1 and global_batch_size"):
        _plan(count=25)
