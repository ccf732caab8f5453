"""Where the `imgrec` program's start-up ends and its command's work begins: the Beam patches
applied, the command's heavy modules imported (without the collector, then frozen), and for a
local conversion the processes started beside it: TFT's analysis process and the zygote its
DirectRunner workers are forked from.

Both are forked once the command line has been checked, with Beam and TensorFlow imported and
TensorFlow having run nothing (its thread pools would not exist in a child); both end when the
command ends. A library caller (`pipeline.cli.main`) gets neither: its threads and handlers are
its own, and the job analyses in its own stages with Beam's own workers.
"""

from __future__ import annotations

import contextlib
import sys

from pipeline.launch import analysis_process, forked_workers, patches, startup
from pipeline.launch.plan import LaunchPlan

__all__ = ["local_processes"]


@contextlib.contextmanager
def local_processes(plan: LaunchPlan):
    """Start what `plan` asks for (the program only), then the command's work; stop both after."""
    fresh = plan.as_program and "tensorflow" not in sys.modules
    try:
        if plan.as_program:
            patches.install()  # before the forks: the children inherit them
        if fresh and plan.command == "verify":
            import tensorflow  # noqa: F401 - verify decodes every record with it
        if fresh and plan.command == "convert" and plan.convert.analysis_process:
            analysis_process.start()
        if fresh and plan.command == "convert" and plan.convert.forked_workers:
            import tensorflow  # noqa: F401 - imported once for the command and its workers

            forked_workers.start()
        startup.finish()  # the start-up imports are done: the command's work begins
        yield
    finally:
        analysis_process.stop()
        forked_workers.stop()
