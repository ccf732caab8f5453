"""Dedupe: keep one file per distinct content (sha256); the others become Duplicate records."""

from __future__ import annotations

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

__all__ = ["DropDuplicates"]


class _KeepFirstFn(beam.DoFn):
    """(sha256, [InspectedImage]) -> the one with the smallest (key, path); the rest DUPLICATES."""

    DUPLICATES = "duplicates"

    def __init__(self):
        self._dropped = Metrics.counter("imgrec", "duplicates")

    def process(self, element):
        sha256, items = element
        # Deterministic survivor whatever order the shuffle delivers in: the smallest key.
        ordered = sorted(items, key=lambda r: (r["key"], r["path"]))
        yield ordered[0]
        for dup in ordered[1:]:
            self._dropped.inc()
            yield pvalue.TaggedOutput(self.DUPLICATES, {
                "path": dup["path"], "duplicate_of": ordered[0]["path"], "sha256": sha256})


class DropDuplicates(beam.PTransform):
    """InspectedImage -> {"unique": InspectedImage, "duplicates": Duplicate}."""

    def expand(self, inspected):
        out = (
            inspected
            | "KeyBySha256" >> beam.Map(lambda r: (r["sha256"], r))
            # (sha256, [InspectedImage]): names and metadata only, never bytes.
            | "GroupBySha256" >> beam.GroupByKey()
            | "KeepFirst" >> beam.ParDo(_KeepFirstFn()).with_outputs(
                _KeepFirstFn.DUPLICATES, main="unique")
        )
        return {"unique": out.unique, "duplicates": out[_KeepFirstFn.DUPLICATES]}
