"""The progress side channel (worker files summed by the launcher) and Dataflow counter polling."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

from apache_beam.metrics.execution import MetricKey, MetricResult
from apache_beam.metrics.metricbase import MetricName

from core import tallies
from pipeline import progress
from tests.runs import ROOT as ROOT_PATH
from tests.servers import wait_until

ROOT = str(ROOT_PATH)


def test_counts_from_other_processes_are_summed(tmp_path):
    code = (
        "import sys\nfrom core import tallies\nfolder = sys.argv[1]\n"
        "tallies.tally(folder, 'listed', 10)\ntallies.tally(folder, 'inspected', 4)\n"
        "tallies.flush(folder)\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    for _ in range(2):
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], env=env, check=True, timeout=120
        )
    counts = tallies.read_counts(str(tmp_path))
    assert counts["listed"] == 20 and counts["inspected"] == 8 and counts["written"] == 0


def test_each_run_counts_into_its_own_folder(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    tallies.tally(str(first), "listed", 5)
    tallies.tally(str(second), "listed", 2)
    tallies.flush(str(first))
    tallies.flush(str(second))
    assert tallies.read_counts(str(first))["listed"] == 5
    assert tallies.read_counts(str(second))["listed"] == 2
    tallies.reset(str(first))
    tallies.reset(str(second))


def test_plain_lines_when_not_a_terminal(tmp_path):
    stream = io.StringIO()
    (tmp_path / "1.json").write_text('{"listed": 50, "inspected": 25}')
    with progress.Progress(str(tmp_path), plain_every_s=0.05, stream=stream):
        # Several lines, however long a loaded machine keeps the display thread waiting.
        assert wait_until(lambda: stream.getvalue().count("\n") >= 3, 60)
    lines = stream.getvalue().splitlines()
    assert lines and all(ln.startswith("imgrec: progress: listed 50  inspected 25") for ln in lines)
    assert "ETA" in lines[-1] and "images/s" in lines[-1]


class _FakeResult:
    def __init__(self, counters):
        self._counters = counters
        self.queries = 0

    def metrics(self):
        return self

    def query(self, _filter):
        self.queries += 1
        return {"counters": self._counters, "distributions": [], "gauges": []}


def _counter(step, name, committed):
    return MetricResult(MetricKey(step, MetricName("imgrec", name)), committed, committed)


def test_dataflow_counters_are_summed_and_printed_while_waiting():
    result = _FakeResult(
        [
            _counter("List", "files_matched", 100),
            _counter("Inspect", "inspected_ok", 60),
            _counter("Inspect", "rejected_truncated", 2),
            _counter("Write", "rejected_unreadable", 1),
            _counter("Write", "written", 40),
        ]
    )
    counts = progress.remote_counts(result)
    assert counts["files_matched"] == 100 and counts["written"] == 40
    assert progress.remote_text(counts) == (
        "listed 100  inspected 60  written 40  rejected 3  duplicates 0"
    )
    stream = io.StringIO()
    queried = result.queries
    with progress.poll_remote(result, stream, every_s=0.05):
        # Polled three times (not a fixed sleep: a loaded machine may not run the thread).
        assert wait_until(lambda: result.queries >= queried + 3, 60)
    # Unchanged counters are printed once.
    assert (
        stream.getvalue()
        == "imgrec: progress: listed 100  inspected 60  written 40  rejected 3  duplicates 0\n"
    )
