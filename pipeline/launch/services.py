"""The processes and folders a launch starts for its command, as one object handed down.

`local_services` is where the `imgrec` program's start-up ends and its command's work begins:
the Beam patches applied, the command's heavy modules imported (without the collector, then
frozen), and for a local conversion the processes started beside it: TFT's analysis process
(pipeline/launch/analysis_process.py) and the zygote its DirectRunner workers are forked from
(pipeline/launch/forked_workers.py). Both are forked once the request is read, with Beam and
TensorFlow imported and TensorFlow having run nothing; both end when the command ends. A library
caller (`pipeline.cli.main`) gets neither: its threads and handlers are its own, and the job
analyses in its own stages with Beam's own workers.

The `LocalServices` object goes to the runner's configuration (pipeline/launch/choose.py) and to
`pipeline.builder.build_pipeline`, which reads it and never starts or stops a process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile

from core.runners import is_direct_runner, is_local_runner
from pipeline.launch import patches, startup
from pipeline.launch.analysis_process import AnalysisProcess
from pipeline.launch.forked_workers import Zygote
from pipeline.launch.plan import LaunchPlan
from pipeline.launch.switches import Switches

__all__ = ["LocalServices", "can_fork_workers", "local_services", "wanted_processes"]


@dataclasses.dataclass
class LocalServices:
    """What runs beside one command: the analysis process, the zygote, the progress folder.

    The fields the builder reads (pipeline/builder.py, `RunServices`) are `analysis_handoff`,
    `progress_dir`, `type_inference` and `runner()`.
    """

    switches: Switches
    analysis: AnalysisProcess | None = None
    zygote: Zygote | None = None
    progress_dir: str | None = None  # where the workers' tallies go (pipeline/progress.py)

    @property
    def analysis_handoff(self) -> str | None:
        """The analysis process's hand-off folder; None: the job analyses in its own stages."""
        return self.analysis.handoff if self.analysis else None

    @property
    def type_inference(self) -> bool:
        """Whether Beam's construction-time type inference stays on (an A/B switch)."""
        return self.switches.type_inference

    @property
    def forks_workers(self) -> bool:
        return self.zygote is not None

    def runner(self, options):
        """The runner object for `beam.Pipeline(runner=...)`: imgrec's DirectRunner for Beam's
        (with the forked workers where they were started), None (Beam's choice) otherwise."""
        # Beam's imports here: the read commands and the no-change rerun start services Beam-free.
        from pipeline.runners.direct import DirectRunner

        if not is_direct_runner(_runner_name(options)):
            return None
        command = self.zygote.command() if self.zygote else None
        in_process = patches.in_process_pickles(self.switches)
        return DirectRunner(worker_command=command, in_process=in_process)

    def stop_workers(self) -> None:
        """No worker to fork in this run: free the zygote now."""
        if self.zygote:
            self.zygote.stop()
            self.zygote = None

    def stop(self) -> None:
        if self.analysis:
            self.analysis.stop()
            self.analysis = None
        self.stop_workers()
        if self.progress_dir:
            shutil.rmtree(self.progress_dir, ignore_errors=True)
            self.progress_dir = None


@contextlib.contextmanager
def local_services(plan: LaunchPlan, request=None):
    """Start what `plan` (and, for convert, its `request`: pipeline/launcher.py) asks for, then
    the command's work; stop both after. Yields the LocalServices."""
    services = LocalServices(plan.switches)
    fresh = plan.as_program and "tensorflow" not in sys.modules
    try:
        if plan.as_program:
            patches.install(plan.switches)  # before the forks: the children inherit them
        if fresh and plan.command == "verify":
            import tensorflow  # noqa: F401 - verify decodes every record with it
        if request is not None:
            _start_convert_services(services, plan, request, fresh)
        startup.finish()  # the start-up imports are done: the command's work begins
        yield services
    finally:
        services.stop()


def _start_convert_services(services: LocalServices, plan: LaunchPlan, request, fresh: bool):
    if not _runs_here(request):
        return
    services.progress_dir = tempfile.mkdtemp(prefix="imgrec-progress-")
    analysis, zygote = wanted_processes(plan, request)
    if fresh and analysis:
        services.analysis = AnalysisProcess.start(plan.switches)
    if fresh and zygote:
        import tensorflow  # noqa: F401 - imported once for the command and its workers

        services.zygote = Zygote.start()


def wanted_processes(plan: LaunchPlan, request) -> tuple[bool, bool]:
    """(the analysis process, the zygote): which of them the `imgrec` program starts for a
    conversion's request. Neither for a library caller, a dry run or a runner elsewhere."""
    if not plan.as_program or not _runs_here(request):
        return False, False
    analysis = plan.switches.analysis_process and _analyses_in_temp(request)
    direct = is_direct_runner(_runner_name(request.options))
    zygote = can_fork_workers(plan) and direct and request.may_fork
    return analysis, zygote


def can_fork_workers(plan: LaunchPlan) -> bool:
    """Whether DirectRunner's workers may be forked from a zygote in this launch: the `imgrec`
    program on Linux, unless IMGREC_FORKED_WORKERS=0 (pipeline/launch/forked_workers.py)."""
    return plan.as_program and plan.switches.forked_workers and sys.platform == "linux"


def _runs_here(request) -> bool:
    """Whether the conversion runs on this machine (not a dry run, not a distributed runner)."""
    return not request.dry_run and is_local_runner(_runner_name(request.options))


def _analyses_in_temp(request) -> bool:
    """Whether the job analyses with TFT's scratch in the system temp dir, where the analysis
    process was started (a local --temp_location: the job analyses in its own stages)."""
    if not request.config.analyze:
        return False
    from transforms.analyze import scratch_root

    scratch = os.path.realpath(scratch_root(request.options))
    return scratch == os.path.realpath(tempfile.gettempdir())


def _runner_name(options) -> str | None:
    from apache_beam.options.pipeline_options import StandardOptions

    return options.view_as(StandardOptions).runner
