"""Worker-side progress tallies: per-process counts in a folder the launcher polls.

Beam's metrics are not live on DirectRunner (they arrive when the job ends), and its
multi-process workers are separate processes. So the side channel is a folder named by the
IMGREC_PROGRESS_DIR environment variable, which worker processes inherit: each process keeps its
own running counts and rewrites `<pid>.json` there (atomically, at most twice a second and at
the end of every bundle). When the variable is unset (Dataflow workers, tests building pipelines
directly) tallies are free no-ops. The display that sums the files is `pipeline/progress.py`.
"""

from __future__ import annotations

import json
import os
import threading
import time

__all__ = ["PROGRESS_DIR_ENV", "STAGES", "flush", "read_counts", "reset", "tally"]

PROGRESS_DIR_ENV = "IMGREC_PROGRESS_DIR"
# What the display counts, in pipeline order.
STAGES = ("listed", "inspected", "written", "rejected", "duplicates")
# A worker rewrites its file at most this often: a few hundred tiny writes per minute per
# process at most, whatever the bundle sizes.
_FLUSH_EVERY_S = 0.5

_lock = threading.Lock()
_counts: dict[str, int] = {}
_last_flush = 0.0


def tally(stage: str, n: int = 1) -> None:
    """Add `n` to this process's count of `stage` (no-op without IMGREC_PROGRESS_DIR)."""
    if not n or PROGRESS_DIR_ENV not in os.environ:
        return
    with _lock:
        _counts[stage] = _counts.get(stage, 0) + int(n)
    if time.monotonic() - _last_flush >= _FLUSH_EVERY_S:
        flush()


def flush() -> None:
    """Write this process's counts to its file in the progress folder."""
    global _last_flush
    directory = os.environ.get(PROGRESS_DIR_ENV)
    if not directory:
        return
    with _lock:
        data = json.dumps(_counts)
        _last_flush = time.monotonic()
    path = os.path.join(directory, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # Progress is a display; the folder may be gone after the job ended.


def read_counts(directory: str) -> dict[str, int]:
    """Sum of every process's counts in `directory`."""
    total = dict.fromkeys(STAGES, 0)
    try:
        names = os.listdir(directory)
    except OSError:
        return total
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                counts = json.load(f)
        except (OSError, ValueError):
            continue  # Being replaced right now; the next poll reads it.
        for k, v in counts.items():
            total[k] = total.get(k, 0) + int(v)
    return total


def reset() -> None:
    """Forget this process's counts (a new job's progress folder starts from zero)."""
    with _lock:
        _counts.clear()
