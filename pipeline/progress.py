"""Live progress of a running conversion: the launcher's display of the workers' tallies.

Beam's metrics are not live on DirectRunner (they arrive when the job ends), and its
multi-process workers are separate processes. So the side channel is a folder the launch makes
for a local run (pipeline/launch/services.py) and the job's counting steps are given: each
process keeps its own running counts and rewrites `<pid>.json` there (atomically, at most twice
a second and at the end of every bundle); the launcher sums the files while the job runs.

The worker side (tally, flush, the folder's format) is `core/tallies.py`;
`transforms/count_progress.py` holds the PTransform that calls `tally`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time

from apache_beam.metrics.metric import MetricsFilter

from core import tallies
from core.tallies import read_counts

__all__ = [
    "Progress",
    "live",
    "poll_remote",
    "remote_counts",
]

# Display refresh in place on a terminal (elsewhere a plain line every `plain_every_s`, which
# the launch passes from its switches: pipeline/launch/switches.py).
_TTY_REFRESH_S = 0.25


def _rate_eta(counts: dict, started: float | None) -> tuple[float, float | None]:
    """(images/s, seconds left): work is inspecting then writing each listed file.

    `started`: when the first file was listed (start-up time is not the job's speed).
    """
    if started is None:
        return 0.0, None
    listed = counts["listed"]
    done = counts["inspected"] + counts["written"] + counts["rejected"] + counts["duplicates"]
    elapsed = max(time.monotonic() - started, 1.0)  # no wild rate from the first poll
    rate = counts["inspected"] / elapsed
    todo = 2 * listed - done  # Rejects and duplicates end early: never counted twice.
    if done <= 0 or listed <= 0:
        return rate, None
    return rate, max(0.0, todo * elapsed / done)


def _text(counts: dict, started: float | None) -> str:
    rate, eta = _rate_eta(counts, started)
    eta_text = "?" if eta is None else time.strftime("%M:%S", time.gmtime(eta))
    return (
        f"listed {counts['listed']}  inspected {counts['inspected']}  written {counts['written']}"
        f"  rejected {counts['rejected']}  duplicates {counts['duplicates']}  "
        f"{rate:.0f} images/s  ETA {eta_text}"
    )


class Progress:
    """Polls a progress folder on a thread and shows the counts on `stream`.

    On a terminal one line is redrawn in place (rich); otherwise a plain `imgrec: progress ...`
    line is printed every `plain_every_s` seconds.
    """

    def __init__(self, directory: str, plain_every_s: float, stream=None):
        self.directory = directory
        # The terminal itself when quiet.Capture tees stderr: redraws stay out of the log.
        stream = stream or sys.stderr
        self.stream = getattr(stream, "terminal", stream)
        self.plain_every_s = plain_every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="imgrec-progress", daemon=True)
        self._started = None  # set when the first file is listed
        self._live = None

    def __enter__(self) -> Progress:
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress

            console = Console(file=self.stream, force_terminal=True)
            self._live = RichProgress(
                TextColumn("imgrec:"),
                BarColumn(bar_width=20),
                TextColumn("{task.description}"),
                console=console,
                transient=True,
                auto_refresh=False,
            )
            self._task = self._live.add_task(_text(read_counts(self.directory), self._started))
            self._live.start()
        self._thread.start()
        return self

    def _show(self) -> None:
        counts = read_counts(self.directory)
        if self._started is None and counts["listed"]:
            self._started = time.monotonic()
        text = _text(counts, self._started)
        if self._live is not None:
            total = max(1, 2 * counts["listed"])
            done = counts["inspected"] + counts["written"] + counts["rejected"]
            done += counts["duplicates"]
            self._live.update(self._task, description=text, total=total, completed=done)
            self._live.refresh()
        else:
            print(f"imgrec: progress: {text}", file=self.stream, flush=True)

    def _run(self) -> None:
        every = _TTY_REFRESH_S if self._live is not None else self.plain_every_s
        while not self._stop.wait(every):
            self._show()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self._live is not None:
            self._live.stop()  # transient: the line is cleared for the summary


@contextlib.contextmanager
def live(folder: str | None, plain_every_s: float, stream=None):
    """Show the counts the job's workers write to `folder` while the enclosed job runs; nothing
    without a folder (a dry run, a distributed runner)."""
    if folder is None:
        yield None
        return
    try:
        with Progress(folder, plain_every_s, stream) as progress:
            yield progress
    finally:
        tallies.flush(folder)  # In-process (one worker) counts, should the last bundle not have.
        tallies.reset(folder)


# Dataflow: how often the launcher asks the job for its counters (each ask is one API call;
# Dataflow itself updates them about every 30 s).
_REMOTE_EVERY_S = 30.0


def remote_counts(result) -> dict[str, int]:
    """imgrec's counters of a running job (summed over steps), from `result.metrics()`."""
    query = result.metrics().query(MetricsFilter().with_namespace("imgrec"))
    counts: dict[str, int] = {}
    for c in query.get("counters", []):
        value = c.committed if c.committed is not None else c.attempted
        counts[c.key.metric.name] = counts.get(c.key.metric.name, 0) + int(value or 0)
    return counts


def remote_text(counts: dict[str, int]) -> str:
    """One line from the job's counters: listed, inspected, written, rejected, duplicates."""
    rejected = sum(v for k, v in counts.items() if k.startswith("rejected_"))
    return (
        f"listed {counts.get('files_matched', 0)}  inspected {counts.get('inspected_ok', 0)}  "
        f"written {counts.get('written', 0)}  rejected {rejected}  "
        f"duplicates {counts.get('duplicates', 0)}"
    )


@contextlib.contextmanager
def poll_remote(result, stream=None, every_s: float = _REMOTE_EVERY_S):
    """While the enclosed wait runs, print the remote job's counters every `every_s` seconds."""
    stream = stream or sys.stderr
    stop = threading.Event()

    def run() -> None:
        last = None
        while not stop.wait(every_s):
            try:
                text = remote_text(remote_counts(result))
            except Exception:  # noqa: BLE001 - a display: a failed poll waits for the next one
                continue
            if text != last:
                print(f"imgrec: progress: {text}", file=stream, flush=True)
                last = text

    thread = threading.Thread(target=run, name="imgrec-remote-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
