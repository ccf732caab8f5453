"""The conversion on a real dask.distributed cluster (scheduler + 2 worker processes on 127.0.0.1).

Compares DaskRunner's output with DirectRunner's byte for byte, and kills a worker mid-run.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from core import schema
from pipeline.demo import build_corpus
from tests.runs import ROOT as ROOT_PATH
from tests.runs import in_process
from tests.runs import output_digests as digests
from tests.servers import free_port

ROOT = str(ROOT_PATH)
DASK = os.path.join(os.path.dirname(sys.executable), "dask")
# As run_dask.sh starts its scheduler and workers: one thread each, TensorFlow and the stages
# imported at start-up in the worker processes and the scheduler, not in the nannies
# (pipeline/launch/dask_preload.py).
PRELOAD = ("--preload", "pipeline.launch.dask_preload")
WORKER_ARGS = ("--nthreads", "1", "--no-dashboard", *PRELOAD)
SCHEDULER_ARGS = ("--no-dashboard", *PRELOAD)
# The demo corpus has 3 broken files of 45 (6.7%): above the default 5% limit.
COMMON = ("--max_bad_fraction", "0.2", "--target_shard_mb", "0.05")
COMMON += ("--splits", "train=0.7,validation=0.3")
# Dask's own allowed-failures (how often a task whose worker died is rerun), what the shared
# cluster's scheduler starts with and gets back after each kill test.
DASK_ALLOWED_FAILURES = 3


def _env(**extra) -> dict:
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", **extra)


class Cluster:
    """A dask scheduler and worker processes on loopback, stopped on exit."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.workers: list[subprocess.Popen] = []
        self.scheduler = self._spawn(
            "scheduler",
            [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(self.port), *SCHEDULER_ARGS],
        )

    def _spawn(self, name: str, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        log = open(os.path.join(self.tmp, f"{name}.log"), "ab")
        return subprocess.Popen(
            cmd, cwd=ROOT, env=_env(**(env or {})), stdout=log, stderr=subprocess.STDOUT
        )

    def add_worker(self) -> subprocess.Popen:
        n = len(self.workers)
        w = self._spawn(
            f"worker{n}",
            [DASK, "worker", self.address, *WORKER_ARGS, "--name", f"w{n}"],
        )
        self.workers.append(w)
        return w

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=60) as c:
            c.wait_for_workers(n, timeout=120)

    def alive(self) -> list[subprocess.Popen]:
        return [w for w in self.workers if w.poll() is None]

    def set_allowed_failures(self, n: int) -> int:
        """Set how often the scheduler reruns a task whose worker died (Dask's allowed-failures,
        read at each death); returns the old value."""
        from distributed import Client

        def swap(dask_scheduler, n=n):
            old, dask_scheduler.allowed_failures = dask_scheduler.allowed_failures, n
            return old

        with Client(self.address, timeout=60) as c:
            return c.run_on_scheduler(swap)

    def close(self) -> None:
        for p in [*self.workers, self.scheduler]:
            if p.poll() is None:
                p.terminate()
        for p in [*self.workers, self.scheduler]:
            try:
                p.wait(timeout=3)  # throwaway processes: no need to wait on a graceful exit
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {f}\n" + open(f, errors="replace").read()[-3000:]
            for f in sorted(glob.glob(os.path.join(self.tmp, "*.log")))
        )


@contextlib.contextmanager
def cluster(tmp: str, workers: int = 2):
    c = Cluster(tmp)
    try:
        for _ in range(workers):
            c.add_worker()
        c.wait_for_workers(workers)
        yield c
    finally:
        c.close()


def convert(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(*args: str, check: bool = True) -> tuple[int, str, str]:
    p = convert(*args)
    out, err = p.communicate(timeout=900)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}\nstdout:{out}\nstderr:{err}")
    return p.returncode, out, err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("corpus"))
    build_corpus(d, num_images=40, seed=1, long_side=(96, 160))
    return d


def reference(*args: str) -> None:
    """A DirectRunner reference conversion, in this process (tests/runs.py): it is what the Dask
    runs are compared with, not what is under test, so it skips a fresh interpreter's start-up."""
    in_process("convert", *args, "--workers", "1")


@pytest.fixture(scope="module")
def direct(corpus, tmp_path_factory):
    """The DirectRunner reference run, with analysis."""
    out = str(tmp_path_factory.mktemp("direct") / "ds")
    reference("--input", f"{corpus}/*/*.jpg", "--output", out, *COMMON)
    return out


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    """One scheduler and two workers for every test here (each worker process imports
    TensorFlow, Beam and TFT: seconds of CPU). A test that kills a worker starts a new one."""
    with cluster(str(tmp_path_factory.mktemp("dask"))) as c:
        yield c


def test_dask_output_matches_direct_runner_with_analysis(corpus, direct, shared_cluster, tmp_path):
    out = str(tmp_path / "ds")
    c = shared_cluster
    rc, stdout, err = run(
        "--input", f"{corpus}/*/*.jpg", "--output", out, *COMMON,
        "--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
        "--dask_client_address", c.address,
        check=False,
    )  # fmt: skip
    assert rc == 0, f"{err}\n{c.logs()}"
    assert "imgrec: converted 45 listed files" in stdout
    want, got = digests(direct), digests(out)
    assert sum(1 for f in want if f.endswith(".tfrecord")) >= 4
    assert os.path.isdir(os.path.join(out, "transform_fn", "variables"))
    assert got == want
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    assert info["provenance"]["runner"] == "pipeline.runners.dask_runner.DaskRunner"
    assert info["num_listed"] == info["num_written"] + info["num_rejected"] + info["num_duplicates"]
    # Each worker ran the start-up preload (Dask names every preload it runs).
    for n in (0, 1):
        log = open(os.path.join(c.tmp, f"worker{n}.log"), errors="replace").read()
        assert "Run preload setup: pipeline.launch.dask_preload" in log, log[-3000:]


def test_the_preload_loads_tensorflow_in_the_workers_and_scheduler_not_the_nannies(
    shared_cluster,
):
    """`dask worker` imports a --preload module in its nanny too (to check its arguments):
    pipeline.launch.dask_preload's import loads nothing, its dask_setup loads the stages, and
    Beam with them (pipeline/launch/worker_start.py)."""
    from distributed import Client

    names = ("tensorflow", "pipeline.launch.worker_start")

    def loaded():
        return {m: m in sys.modules for m in names}

    want = {"tensorflow": True, "pipeline.launch.worker_start": True}
    with Client(shared_cluster.address, timeout=60) as client:
        assert list(client.run(loaded).values()) == [want, want]
        assert client.run_on_scheduler(loaded) == want
    for nanny in shared_cluster.alive():  # the processes `dask worker` started as
        with open(f"/proc/{nanny.pid}/maps") as f:
            assert "libtensorflow" not in f.read(), nanny.args


def test_short_runner_name_without_analysis(corpus, shared_cluster, tmp_path):
    """`--runner DaskRunner` maps to the same runner; --no_analyze output matches DirectRunner's."""
    args = ("--input", f"{corpus}/*/*.jpg", *COMMON, "--no_analyze")
    ref = str(tmp_path / "ref")
    reference(*args, "--output", ref)
    out = str(tmp_path / "ds")
    address = shared_cluster.address
    run(*args, "--output", out, "--runner", "DaskRunner", "--dask_client_address", address)
    assert digests(out) == digests(ref)
    assert not os.path.exists(os.path.join(out, "transform_fn"))


def test_dask_options_refused_without_dask_runner(corpus, tmp_path):
    rc, _, err = run(
        "--input", f"{corpus}/*/*.jpg", "--output", str(tmp_path / "o"),
        "--dask_client_address", "tcp://127.0.0.1:1",
        check=False,
    )  # fmt: skip
    assert rc == 2
    assert (
        err.strip() == "imgrec: unknown option --dask_client_address; see `imgrec convert --help`"
    )


def _kill_a_worker_once_busy(c: Cluster, job: subprocess.Popen) -> bool:
    """SIGKILL the worker running a DoFn task; False if the job ended before one was seen."""
    from distributed import Client

    with Client(c.address, timeout=60) as client:
        deadline = time.time() + 300
        while time.time() < deadline and job.poll() is None:
            busy = {
                w: keys
                for w, keys in client.processing().items()
                if any("_run_dofn_partition" in str(k) for k in keys)
            }
            if busy:
                names = {a: i["name"] for a, i in client.scheduler_info()["workers"].items()}
                victim = c.workers[int(names[next(iter(busy))][1:])]
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait()
                return True
            time.sleep(0.05)
    return False


@pytest.fixture
def two_workers(shared_cluster):
    """The shared cluster with two live workers (a kill test before may have left one); the
    scheduler's allowed-failures is put back after the test."""
    c = shared_cluster
    while len(c.alive()) < 2:
        c.add_worker()
    c.wait_for_workers(2)
    old = c.set_allowed_failures(DASK_ALLOWED_FAILURES)
    try:
        yield c
    finally:
        c.set_allowed_failures(old)


@pytest.mark.parametrize("allowed_failures", [0, None], ids=["fails", "reschedules"])
def test_killed_worker_then_resume_is_byte_identical(
    corpus, direct, two_workers, tmp_path, allowed_failures
):
    """allowed-failures 0: the job fails with one line, then --resume finishes it; Dask's
    default (3 reruns): Dask reruns the lost tasks on the other worker and the job completes."""
    out = str(tmp_path / "ds")
    args = ("--input", f"{corpus}/*/*.jpg", "--output", out, *COMMON)
    c = two_workers
    if allowed_failures is not None:
        c.set_allowed_failures(allowed_failures)
    dask_args = ("--runner", "DaskRunner", "--dask_client_address", c.address)
    job = convert(*args, *dask_args)
    killed = _kill_a_worker_once_busy(c, job)
    stdout, err = job.communicate(timeout=900)
    assert killed, f"no DoFn task seen running\n{stdout}\n{err}"
    if allowed_failures == 0:
        assert job.returncode == 1, f"{stdout}\n{err}\n{c.logs()}"
        # Progress lines come and go with the load (one per poll interval); the error is one.
        lines = [
            ln
            for ln in err.splitlines()
            if ln.startswith("imgrec:") and not ln.startswith("imgrec: progress:")
        ]
        assert len(lines) == 1 and "Dask workers died" in lines[0], err
        assert "--resume" in lines[0]
        assert not os.path.exists(os.path.join(out, schema.DATASET_INFO))
        # Whatever sits under a final shard name is a whole shard.
        want = digests(direct)
        for rel, sha in digests(out).items():
            if rel.endswith(".tfrecord"):
                assert want[rel] == sha, rel
        c.add_worker()
        c.wait_for_workers(2)
        run(*args, *dask_args, "--resume")
    else:
        assert job.returncode == 0, f"{stdout}\n{err}\n{c.logs()}"
    assert digests(out) == digests(direct)
