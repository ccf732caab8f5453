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

from core.beam_compat import is_direct_runner
from pipeline.options import ConvertConfig, ConvertOptions
from pipeline.runners import dask_runner, forked_workers

__all__ = [
    "AUTO_PROCESSES_MIN_FILES",
    "FORKED_PROCESSES_MIN_FILES",
    "WORKER_START_PLUGIN",
    "configure_runner",
]

# Default DirectRunner worker choice (--workers not given): below this many listed files the job
# runs in-process. Extra worker processes each start their own Beam + TensorFlow (+ TFT) before
# converting anything: measured start-up 4.5 s in-process vs 7.4 s with 2 processes, steady
# 2,582 vs 4,103 img/s (bench/convert.py, 36,000 photos, README "Benchmarks"), so 2 processes
# only win beyond (7.4 - 4.5) / (1/2582 - 1/4103) ~ 20,000 files. Counting stops here, so the
# preflight never lists a huge input to the end.
AUTO_PROCESSES_MIN_FILES = 20_000
# The same threshold where `imgrec convert` forks its worker processes ready-imported
# (pipeline/runners/forked_workers.py): they start in milliseconds, not ~4 s of CPU each. Default
# command against in-process, interleaved (docs/benchmarks.md, 2026-12-03 22:00-22:40): 1,000
# files 8.1 s with 2 forked workers against 7.1 s (medians of 3); 3,000 files even (8.28 against
# 8.15 s, medians of 5; 10.2 against 11.8 s in another series of 3); 12,000 photos 14.4
# against 16.7 s (best of 2).
FORKED_PROCESSES_MIN_FILES = 3_000
# The module DirectRunner worker processes import first (--beam_plugins; pipeline/runners/worker_start.py).
WORKER_START_PLUGIN = "pipeline.runners.worker_start"


def configure_runner(
    options: PipelineOptions, argv: list[str], config: ConvertConfig, num_files: int = 0
):
    """Default to DirectRunner, choosing its workers; returns the config to run.

    Without --workers: one in-process worker for inputs under FORKED_PROCESSES_MIN_FILES files
    (`num_files`, counted by the preflight) where the command forks its workers ready-imported,
    under AUTO_PROCESSES_MIN_FILES where Beam starts them, else one worker process per core.
    Several workers run as processes: on 12,000 photos, 2 processes converted ~1.3x faster than
    2 threads of one process (Beam's per-element Python work contends for the GIL). One worker
    runs in-process and decodes on one thread per core (decoders release the GIL).
    """
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = "DirectRunner"
    decode_threads = 1  # Distributed runners run one SDK process per core already.
    if dask_runner.is_dask(standard.runner):
        standard.runner = dask_runner.IMGREC_DASK_RUNNER  # Beam's, with fixes (docs/runners.md)
    if is_direct_runner(standard.runner) or standard.runner == "BundleBasedDirectRunner":
        direct = options.view_as(DirectOptions)
        cores = os.cpu_count() or 1
        forked = forked_workers.command() is not None and is_direct_runner(standard.runner)
        least = FORKED_PROCESSES_MIN_FILES if forked else AUTO_PROCESSES_MIN_FILES
        workers = options.view_as(ConvertOptions).workers or (cores if num_files >= least else 1)
        if not any(a.startswith("--direct_num_workers") for a in argv):
            direct.direct_num_workers = workers
        if not any(a.startswith("--direct_running_mode") for a in argv):
            direct.direct_running_mode = "multi_processing" if workers > 1 else "in_memory"
        if direct.direct_running_mode == "multi_processing":
            # Each worker process imports TensorFlow and the stages at start-up, without the
            # garbage collector: ~0.9 s of CPU less per worker (pipeline/runners/worker_start.py).
            setup = options.view_as(SetupOptions)
            setup.beam_plugins = [*(setup.beam_plugins or []), WORKER_START_PLUGIN]
        if not forked or direct.direct_running_mode != "multi_processing":
            forked_workers.stop()  # no worker to fork in this run: free the zygote now
        decode_threads = max(1, cores // max(1, direct.direct_num_workers or 1))
    if not options.view_as(ConvertOptions).decode_threads:
        config = dataclasses.replace(config, decode_threads=decode_threads)
    return config
