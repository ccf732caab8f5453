"""Worker-side progress tallies: per-process counts in a folder the launcher polls.

Beam's metrics are not live on DirectRunner (they arrive when the job ends), and its
multi-process workers are separate processes. So the side channel is a folder the launch makes
for the run (pipeline/launch/services.py) and hands to the counting DoFns
(transforms/count_progress.py) as a value: each process keeps its own running counts and
rewrites `<pid>.json` there (atomically, at most twice a second and at the end of every bundle).
The display that sums the files is `pipeline/progress.py`.
"""

from __future__ import annotations

import json
import os
import threading
import time

__all__ = ["STAGES", "flush", "read_counts", "reset", "tally"]

# What the display counts, in pipeline order.
STAGES = ("listed", "inspected", "written", "rejected", "duplicates")
# A worker rewrites its file at most this often: a few hundred tiny writes per minute per
# process at most, whatever the bundle sizes.
_FLUSH_EVERY_S = 0.5

_lock = threading.Lock()
_counts: dict[str, dict[str, int]] = {}  # folder -> this process's counts for it
_last_flush = 0.0


def tally(folder: str, stage: str, n: int = 1) -> None:
    """Add `n` to this process's count of `stage` for the run whose progress folder is `folder`."""
    if not n:
        return
    with _lock:
        counts = _counts.setdefault(folder, {})
        counts[stage] = counts.get(stage, 0) + int(n)
    if time.monotonic() - _last_flush >= _FLUSH_EVERY_S:
        flush(folder)


def flush(folder: str) -> None:
    """Write this process's counts to its file in the progress folder."""
    global _last_flush
    with _lock:
        data = json.dumps(_counts.get(folder, {}))
        _last_flush = time.monotonic()
    path = os.path.join(folder, f"{os.getpid()}.json")
    try:
        with open(path + ".tmp", "w") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # Progress is a display; the folder may be gone after the job ended.


def read_counts(folder: str) -> dict[str, int]:
    """Sum of every process's counts in `folder`."""
    total = dict.fromkeys(STAGES, 0)
    try:
        names = os.listdir(folder)
    except OSError:
        return total
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                counts = json.load(f)
        except (OSError, ValueError):
            continue  # Being replaced right now; the next poll reads it.
        for k, v in counts.items():
            total[k] = total.get(k, 0) + int(v)
    return total


def reset(folder: str) -> None:
    """Forget this process's counts for `folder` (its run has ended)."""
    with _lock:
        _counts.pop(folder, None)
