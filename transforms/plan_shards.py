"""Plan shards: per split, a shard count from the byte target, and each file's shard by key hash."""

from __future__ import annotations

import math

import apache_beam as beam

from transforms.elements import InspectedImage, WriterEntry
from transforms.keys import int_hash

__all__ = ["PlanShards", "num_shards_for"]


def num_shards_for(
    total_bytes: int, num_files: int, target_shard_mb: float, min_shards: int
) -> int:
    """Shards for a split: enough to keep each near the byte target, at least `min_shards`,
    never more than there are files (an empty shard helps nobody)."""
    by_bytes = math.ceil(total_bytes / (target_shard_mb * 1e6))
    return max(1, min(num_files, max(min_shards, by_bytes)))


class _SplitTotals(beam.CombineFn):
    """(bytes, files) per batch -> (bytes, files)."""

    def create_accumulator(self):
        return (0, 0)

    def add_input(self, acc, totals):
        return acc[0] + totals[0], acc[1] + totals[1]

    def merge_accumulators(self, accs):
        accs = list(accs)
        return sum(a[0] for a in accs), sum(a[1] for a in accs)

    def extract_output(self, acc):
        return acc


def _batch_totals(batch: list[InspectedImage]):
    """[InspectedImage] -> (split, (bytes, files)) per split in the batch."""
    totals = {}
    for r in batch:
        b, n = totals.get(r.split, (0, 0))
        totals[r.split] = (b + r.size, n + 1)
    return totals.items()


class _ConcatFn(beam.CombineFn):
    """Lists of records -> one list (the shard's records, in no particular order)."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, records):
        acc.extend(records)
        return acc

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for acc in accumulators:
            merged.extend(acc)
        return merged

    def extract_output(self, acc):
        return acc


def _write_order(shard: tuple[str, int], plan: dict[str, int]) -> tuple:
    """The order each batch emits its shards in: the splits with the most shards first, then
    by index; so the shards' keys first reach the group in about this order.

    Only the local runner's speed depends on it: FnApiRunner hands the grouped shards to its
    worker processes round-robin in the order their keys first reached the group, so the large
    splits' shards (the slowest to write) alternate between the workers first, then the small
    splits' do (docs/benchmarks.md). The shards themselves do not change: each writer orders
    its own records.
    """
    split, index = shard
    return -plan[split], split, index


class PlanShards(beam.PTransform):
    """[InspectedImage] -> {"groups": ((split, index), [WriterEntry]), "plan": {split: num_shards}}.

    A file's shard is a salted hash of its key modulo the split's shard count: no global sort,
    no single worker holding the listing, and the same key lands in the same shard wherever the
    dataset lives.
    """

    def __init__(self, config):
        super().__init__()
        self._target_mb = config.target_shard_mb
        self._min_shards = config.min_shards
        self._seed = config.seed

    def expand(self, images):
        target_mb, min_shards, seed = self._target_mb, self._min_shards, self._seed
        plan = (
            images
            | "SizeBySplit" >> beam.FlatMap(_batch_totals)
            | "SumBySplit" >> beam.CombinePerKey(_SplitTotals())
            # (split, (bytes, files))
            | "ShardCount"
            >> beam.Map(
                lambda kv: (kv[0], num_shards_for(kv[1][0], kv[1][1], target_mb, min_shards))
            )
            | "PlanDict" >> beam.combiners.ToDict()
        )

        def assign(batch, plan_dict):
            by_shard = {}
            for record in batch:
                n = plan_dict[record.split]
                key = (record.split, int_hash("shard", seed, record.key) % n)
                by_shard.setdefault(key, []).append(WriterEntry.of(record))
            return sorted(by_shard.items(), key=lambda kv: _write_order(kv[0], plan_dict))

        groups = (
            images
            | "AssignShard" >> beam.FlatMap(assign, beam.pvalue.AsSingleton(plan))
            # ((split, index), [WriterEntry]): names and metadata only, never bytes. A combine
            # rather than a GroupByKey: Beam pre-combines each bundle's records per shard, so
            # the shuffle carries one list per shard per bundle instead of one element per file.
            | "GroupByShard" >> beam.CombinePerKey(_ConcatFn())
        )
        return {"groups": groups, "plan": plan}
