"""Dedupe: keep one file per distinct content (sha256); the others become Duplicate records."""

from __future__ import annotations

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

__all__ = ["DropNamed", "DropNamedFn", "FindDuplicates", "named"]

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
        images = self.keep(batch, dropped)
        if images:
            yield images

    def keep(self, batch: list, dropped) -> list:
        """The batch's images not in `dropped`; the others counted."""
        images = [r for r in batch if r.path not in dropped]
        if len(images) < len(batch):
            self._dropped.inc(len(batch) - len(images))
        return images


def named(rows) -> pvalue.AsDict:
    """Duplicate rows (a PCollection) as the {path: duplicate_of} side input DropNamedFn reads."""
    return pvalue.AsDict(
        rows | "DroppedPaths" >> beam.Map(lambda d: (d["path"], d["duplicate_of"]))
    )


class FindDuplicates(beam.PTransform):
    """[InspectedImage] -> Duplicate rows: for each content hash seen twice, every file but the
    one first by key. Hashes and names go through a pre-combined shuffle."""

    def expand(self, inspected):
        return (
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


class DropNamed(beam.PTransform):
    """[InspectedImage] -> the batches without the files of `rows` (Duplicate rows), counted in
    the metric `counter`: the (usually short) list comes back as a side input that filters the
    images where they are."""

    def __init__(self, rows, counter: str = "duplicates"):
        super().__init__()
        self._rows, self._counter = rows, counter

    def expand(self, images):
        return images | "Drop" >> beam.ParDo(DropNamedFn(self._counter), dropped=named(self._rows))
