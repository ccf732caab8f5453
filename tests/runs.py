"""How tests run imgrec: the real command line in a fresh process (`cli`), or the same `imgrec`
entry point in this process (`in_process`: no TensorFlow + Beam import and DirectRunner
start-up per run, ~5 s each on 2 cores).

Both return a `subprocess.CompletedProcess` (returncode, stdout, stderr), so a test can switch
between them. Use `cli` where the command line itself is under test (its exit status, its one
`imgrec:` line with other libraries' output kept off the terminal, a kill -9, default options
end to end); `in_process` everywhere else.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from pipeline.launch.switches import read_switches

__all__ = [
    "fuzz_budget_s",
    "fuzz_seed",
    "ROOT",
    "TF_PRELUDE",
    "cli",
    "cli_env",
    "in_process",
    "kill_running",
    "ok",
    "output_digests",
    "read_records",
    "tf_script",
]

ROOT = Path(__file__).resolve().parent.parent
# A conversion of a test corpus takes seconds; this only stops a hung run.
RUN_TIMEOUT_S = 600


# A fresh interpreter's `import tensorflow` with CPython's cyclic collector on spends about half
# its CPU in full collections over TensorFlow's objects (4.2 -> 2.1 s user here, three runs each;
# a MirroredStrategy script with Keras 4.4-5.6 -> 2.3-3.3 s). The `imgrec` program and its
# workers import with the collector off (pipeline/launch/startup.py). Scripts that use TensorFlow
# as a training job or a user does (the reader, TF's own filesystems, TF's decoders) start with
# this prelude, the same `startup.without_gc` (collector off, then freeze, then on); what they
# test comes after it. Scripts that check what an import loads, or the collector itself
# (test_startup, test_layers), do not use it. The prelude also leaves Keras out of TensorFlow's
# import, as the test workers do (tests/conftest.py): a script that asks for it (`tf.keras`,
# `import keras`) still loads it, and the import takes ~0.5 s less CPU (2.0-2.5 -> 1.5 s, 3 runs
# each alternating, with the TF_USE_LEGACY_KERAS=1 that TFT leaves in the workers' environment;
# ~25 scripts a suite). A training job's own process, Keras loaded with TensorFlow, is what the
# example's runs are (examples/train_mirrored.py: tests/unit/test_reader.py and
# tests/e2e/test_reader_multiworker.py start it as a user does).
TF_PRELUDE = (
    "from pipeline.launch.startup import defer_keras, without_gc\ndefer_keras()\n"
    "with without_gc():\n    import tensorflow\n"
)


def fuzz_seed(ci_seed: int | None = None) -> int:
    """A fuzz test's seed: IMGREC_FUZZ_SEED to replay a failure, else `ci_seed` on CI (when
    given), else a fresh one (the test prints it)."""
    replay = read_switches().fuzz_seed
    if replay:
        return int(replay)
    if ci_seed is not None and os.environ.get("CI"):
        return ci_seed
    return random.SystemRandom().randrange(1 << 31)


def fuzz_budget_s(default: float) -> float:
    """A fuzz loop's seconds: IMGREC_FUZZ_BUDGET_S (CI sets it), else `default`."""
    return float(read_switches().fuzz_budget_s or default)


def tf_script(script: str, *args: str) -> list[str]:
    """The command line that runs `script` (`python -c`, with `args`) after TF_PRELUDE."""
    return [sys.executable, "-c", TF_PRELUDE + script, *args]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a `python -m pipeline` child: this checkout first on the path."""
    return dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", **extra)


def script_facts(script: str, *args: str, timeout: float = 600, **env: str) -> dict:
    """Run `script` in a fresh interpreter (this checkout's environment plus `env`); the JSON
    its last line of output prints."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=cli_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kill_running(procs: list[subprocess.Popen]) -> None:
    """Kill the processes of a test's cluster still running (a timeout or a failed start), so
    none outlives the test."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """`proc`, asserting it exited 0 (the message shows both streams' tails)."""
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:{proc.stdout[-3000:]}\nstderr:{proc.stderr[-3000:]}"
    )
    return proc


def cli(
    *args: str, check: bool = True, timeout: float = RUN_TIMEOUT_S, env: dict | None = None
) -> subprocess.CompletedProcess:
    """`python -m pipeline ARGS` in a fresh process, as a user runs it (`env`: more variables)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=ROOT,
        env=cli_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return ok(proc) if check else proc


def in_process(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`imgrec ARGS` through `pipeline.cli.main(argv)` in this process.

    main() with an explicit argv is the command without its program wrapper: same parsing,
    preflight, pipeline, summary and exit status, but other libraries' output is not diverted
    to a log file and nothing exits the interpreter. A conversion runs on one in-memory
    worker unless the arguments ask for more.
    """
    from apache_beam.io.filesystems import FileSystems

    from pipeline import cli as imgrec_cli

    out, err = io.StringIO(), io.StringIO()
    # convert hands its options to FileSystems for the preflight (a process-wide setting): put
    # back what was there, so that one test's --s3_endpoint_url does not reach the next.
    previous = FileSystems._pipeline_options  # noqa: SLF001 - restored below
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = imgrec_cli.main([str(a) for a in args])
    finally:
        FileSystems._pipeline_options = previous  # noqa: SLF001
    proc = subprocess.CompletedProcess(
        ["imgrec", *map(str, args)], status, out.getvalue(), err.getvalue()
    )
    return ok(proc) if check else proc


def read_records(path: str) -> list[bytes]:
    """Every record of one TFRecord shard (uncompressed), through TensorFlow's reader."""
    import tensorflow as tf

    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


# Files whose bytes must match across runners and worker modes. transform_fn/saved_model.pb and
# fingerprint.pb embed TensorFlow's per-process function counters (`__inference_..._1955`): they
# differ between two DirectRunner processes too, so they are compared by their variables and
# assets instead.
_PER_PROCESS = ("saved_model.pb", "fingerprint.pb")
# report.html shows when and by which runner the dataset was converted (its provenance).
_NOT_COMPARED = _PER_PROCESS + ("report.html",)


def output_digests(out: str) -> dict[str, str]:
    """sha256 of every file imgrec wrote, dataset_info.json without provenance."""
    import glob
    import hashlib

    from core import schema

    found = {}
    for path in sorted(glob.glob(os.path.join(out, "**"), recursive=True)):
        rel = os.path.relpath(path, out)
        if not os.path.isfile(path) or os.path.basename(path) in _NOT_COMPARED:
            continue
        data = open(path, "rb").read()
        if rel == schema.DATASET_INFO:
            info = json.loads(data)
            info.pop("provenance")
            data = json.dumps(info, sort_keys=True).encode()
        found[rel] = hashlib.sha256(data).hexdigest()
    return found
