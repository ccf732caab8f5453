"""Dedupe: keep one file per distinct content (sha256); the others become Duplicate records."""

from __future__ import annotations

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

__all__ = ["DropDuplicates", "DropNamedFn"]

# Content hashes are spread over this many combine keys. Few keys let Beam pre-combine inside
# each bundle (one shuffle element per key per bundle instead of one per file); 64 keeps each
# key's final merge at 1/64 of the listing and still spreads the merge over workers.
_BUCKETS = 64


class _DuplicatesCombineFn(beam.CombineFn):
    """(sha256, key, path) -> [Duplicate]: for every hash seen twice, all but the smallest key.

    The accumulator maps sha256 -> [(key, path)], so only names and hashes are held.
    """

    def create_accumulator(self):
        return {}

    def add_input(self, acc, entry):
        sha256, key, path = entry
        acc.setdefault(sha256, []).append((key, path))
        return acc

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for acc in accumulators:
            for sha256, entries in acc.items():
                merged.setdefault(sha256, []).extend(entries)
        return merged

    def extract_output(self, acc):
        duplicates = []
        for sha256, entries in acc.items():
            if len(entries) < 2:
                continue
            # Deterministic survivor whatever order the shuffle delivers in: the smallest key.
            entries.sort()
            survivor = entries[0][1]
            duplicates += [
                {"path": path, "duplicate_of": survivor, "sha256": sha256}
                for _, path in entries[1:]
            ]
        return duplicates


class DropNamedFn(beam.DoFn):
    """[InspectedImage] -> the batch without the files named in `dropped` (a side input), counted
    in the metric `counter` (exact and near duplicates)."""

    def __init__(self, counter: str = "duplicates"):
        self._dropped = Metrics.counter("imgrec", counter)

    def process(self, batch, dropped):
        kept = [r for r in batch if r.path not in dropped]
        if len(kept) < len(batch):
            self._dropped.inc(len(batch) - len(kept))
        if kept:
            yield kept


class DropDuplicates(beam.PTransform):
    """[InspectedImage] -> {"unique": [InspectedImage], "duplicates": Duplicate}.

    Hashes and names go through a pre-combined shuffle; the (usually short) list of duplicates
    comes back as a side input that filters the images where they are.
    """

    def expand(self, inspected):
        duplicates = (
            inspected
            | "HashKeyPath"
            >> beam.FlatMap(
                lambda batch: [
                    (int(r.sha256[:8], 16) % _BUCKETS, (r.sha256, r.key, r.path)) for r in batch
                ]
            )
            # (bucket, (sha256, key, path)) -> (bucket, [Duplicate])
            | "FindDuplicates" >> beam.CombinePerKey(_DuplicatesCombineFn())
            | "Flatten" >> beam.FlatMap(lambda kv: kv[1])
        )
        dropped = duplicates | "DroppedPaths" >> beam.Map(lambda d: (d["path"], d["duplicate_of"]))
        unique = inspected | "DropDuplicates" >> beam.ParDo(
            DropNamedFn(), dropped=pvalue.AsDict(dropped)
        )
        return {"unique": unique, "duplicates": duplicates}
