"""Which runner a conversion runs on, and the DirectRunner's workers: in-process or processes."""

from __future__ import annotations

import dataclasses
import os

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
)

from core.runners import is_direct_runner, is_local_runner
from pipeline.options import ConvertConfig, ConvertOptions
from pipeline.runners import dask_runner

__all__ = [
    "AUTO_PROCESSES_MIN_FILES",
    "FORKED_PROCESSES_MIN_FILES",
    "WORKER_START_PLUGIN",
    "configure_runner",
    "uses_worker_processes",
]

# Without --workers, a DirectRunner job runs in-process below this many listed files: each worker
# process starts its own Beam and TensorFlow before converting anything, which pays off only
# for large inputs (docs/benchmarks.md). Counting stops here, so the preflight never lists a
# huge input to the end.
AUTO_PROCESSES_MIN_FILES = 20_000
# The same threshold where the `imgrec` program forks its worker processes ready-imported
# (pipeline/launch/forked_workers.py): they start in milliseconds.
FORKED_PROCESSES_MIN_FILES = 3_000
# The module worker processes import first (--beam_plugins; pipeline/launch/worker_start.py).
WORKER_START_PLUGIN = "pipeline.launch.worker_start"


def configure_runner(
    options: PipelineOptions,
    argv: list[str],
    config: ConvertConfig,
    num_files: int = 0,
    forked: bool = False,
):
    """Default to DirectRunner, choosing its workers; returns the config to run.

    Without --workers: one in-process worker for inputs under FORKED_PROCESSES_MIN_FILES files
    (`num_files`, counted by the preflight) where the command forks its workers ready-imported
    (`forked`: pipeline/launch/forked_workers.py),
    under AUTO_PROCESSES_MIN_FILES where Beam starts them, else one worker process per core.
    Several workers run as processes, not threads: Beam's per-element Python work contends for
    the GIL. One worker runs in-process and decodes on one thread per core (decoders release
    the GIL).
    """
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = "DirectRunner"
    decode_threads = 1  # Distributed runners run one SDK process per core already.
    if dask_runner.is_dask(standard.runner):
        standard.runner = dask_runner.DASK_RUNNER  # Beam's, with fixes (docs/runners.md)
    if is_direct_runner(standard.runner) or standard.runner == "BundleBasedDirectRunner":
        direct = options.view_as(DirectOptions)
        cores = os.cpu_count() or 1
        forked = forked and is_direct_runner(standard.runner)
        least = FORKED_PROCESSES_MIN_FILES if forked else AUTO_PROCESSES_MIN_FILES
        workers = options.view_as(ConvertOptions).workers or (cores if num_files >= least else 1)
        if not any(a.startswith("--direct_num_workers") for a in argv):
            direct.direct_num_workers = workers
        if not any(a.startswith("--direct_running_mode") for a in argv):
            direct.direct_running_mode = "multi_processing" if workers > 1 else "in_memory"
        if direct.direct_running_mode == "multi_processing":
            _add_worker_start(options)
        decode_threads = max(1, cores // max(1, direct.direct_num_workers or 1))
    elif not is_local_runner(standard.runner) and not dask_runner.is_dask(standard.runner):
        _add_worker_start(options)  # Dataflow's workers start as imgrec's own do
    if not options.view_as(ConvertOptions).decode_threads:
        config = dataclasses.replace(config, decode_threads=decode_threads)
    return config


def uses_worker_processes(options: PipelineOptions) -> bool:
    """Whether the configured DirectRunner runs its workers as processes (the zygote's use)."""
    direct = options.view_as(DirectOptions)
    return is_direct_runner(options.view_as(StandardOptions).runner) and (
        direct.direct_running_mode == "multi_processing"
    )


def _add_worker_start(options: PipelineOptions) -> None:
    """Worker processes import imgrec's start-up first, after any plugin the user gave."""
    setup = options.view_as(SetupOptions)
    setup.beam_plugins = [*(setup.beam_plugins or []), WORKER_START_PLUGIN]
