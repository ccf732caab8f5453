"""`dask worker --preload pipeline.runners.dask_preload`: imgrec's worker start-up, in Dask's workers only.

`dask worker` imports every `--preload` module twice: in its own command-line process (the
nanny, which starts and watches the worker and runs no task), to check the preload's arguments
(`distributed.preloading.validate_preload_argv`), and again in the worker process it starts,
which then calls the module's `dask_setup(worker)` before it registers with the scheduler.
`pipeline.runners.worker_start` does its work when it is imported, so as a preload it had each nanny
import TensorFlow and the stages too: 2.7 s of CPU and 706 MB resident per nanny, against
0.56 s and 60 MB with this module (bench/ablations/dask_preload.py; tests/e2e/test_dask.py checks the
nanny loads no TensorFlow). This module imports
nothing when it is imported; `dask_setup` imports `pipeline.runners.worker_start` in the worker.

`dask scheduler --preload pipeline.runners.dask_preload` does the same in the scheduler, which imports
the stages (and with them TensorFlow) when it unpickles the first job's task graph: with the
preload it does so at start-up, without the garbage collector and without Keras (run_dask.sh).
"""

from __future__ import annotations

__all__ = ["dask_setup"]


def dask_setup(server) -> None:  # noqa: ARG001 - Dask passes the worker or scheduler
    """Dask's preload hook: imgrec's start-up (pipeline/runners/worker_start.py) in this process."""
    import pipeline.runners.worker_start  # noqa: F401 - its import is the start-up
