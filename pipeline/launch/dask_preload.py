"""`dask worker --preload pipeline.launch.dask_preload`: imgrec's worker start-up in Dask's workers.

`dask worker` imports every `--preload` module twice: in its nanny (which only checks the preload's
arguments and runs no task) and in the worker process, which then calls `dask_setup(worker)`.
So this module imports nothing itself, and `dask_setup` runs the start-up
(pipeline/launch/worker_start.py) in the worker only. `dask scheduler --preload` does the same in
the scheduler, which imports the stages when it unpickles a job's task graph.
"""

from __future__ import annotations

__all__ = ["dask_setup"]


def dask_setup(server) -> None:  # noqa: ARG001 - Dask passes the worker or scheduler
    """Dask's preload hook: imgrec's worker start-up in this process."""
    import pipeline.launch.worker_start  # noqa: F401 - its import is the start-up
