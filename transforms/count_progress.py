"""CountProgress: tallies elements of a PCollection into the live progress display."""

from __future__ import annotations

from collections.abc import Callable

import apache_beam as beam

from core import tallies

__all__ = ["CountProgress"]


class _TallyFn(beam.DoFn):
    """Element -> nothing; adds `size(element)` to the process's count of `stage`."""

    def __init__(self, folder: str, stage: str, size: Callable):
        self._folder = folder
        self._stage = stage
        self._size = size

    def process(self, element):
        tallies.tally(self._folder, self._stage, self._size(element))
        return ()

    def finish_bundle(self):
        tallies.flush(self._folder)


class CountProgress(beam.PTransform):
    """A side branch that counts what flows through a PCollection; outputs nothing.

    Args:
        folder: the run's progress folder (core/tallies.py), made by the launch.
        stage: one of tallies.STAGES.
        size: element -> how many files it stands for (1 per reject, len(batch) per batch,
            a shard's num_examples).
    """

    def __init__(self, folder: str, stage: str, size: Callable = lambda _: 1):
        super().__init__()
        self._folder = folder
        self._stage = stage
        self._size = size

    def expand(self, pcoll):
        return pcoll | "Tally" >> beam.ParDo(_TallyFn(self._folder, self._stage, self._size))
