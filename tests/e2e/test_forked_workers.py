"""pipeline/launch/forked_workers.py: DirectRunner's worker processes forked from the command's
zygote, seen from Beam's side (its worker command, exit status, streams, a killed worker process)
and from the user's (the same dataset as Beam's own worker processes). Fresh processes: the
zygote forks only where TensorFlow has run nothing."""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import shlex
import signal
import subprocess
import sys
import time

import pytest

from pipeline.demo import build_corpus
from tests.runs import ROOT, cli, cli_env, output_digests, script_facts

pytestmark = pytest.mark.e2e

# A fresh interpreter started as the `imgrec` program starts, with the zygote forked.
_PRELUDE = """
import json, os, sys
from pipeline.launch import program
from pipeline.launch.switches import read_switches
program.start(read_switches())
import apache_beam as beam
import tensorflow
from pipeline.launch.forked_workers import Zygote
started = Zygote.start()
zygote = started.pid
"""

_PIPELINE = (
    _PRELUDE
    + """
from apache_beam.options.pipeline_options import PipelineOptions
from pipeline.runners.direct import DirectRunner

out = sys.argv[1]
options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
runner = DirectRunner(worker_command=started.command())
with beam.Pipeline(runner=runner, options=options) as p:
    _ = (
        p
        | beam.Create(range(40))
        | beam.Reshuffle()
        | beam.Map(lambda i: json.dumps([i, os.getpid(), os.getppid()]))
        | beam.io.WriteToText(out, num_shards=1, shard_name_template="")
    )
started.stop()
rows = [json.loads(line) for line in open(out)]
print(json.dumps({"zygote": zygote, "rows": rows, "zygote_left": os.path.exists(f"/proc/{zygote}"),
                  "command": runner._worker_command}))
"""
)


def test_a_pipelines_workers_are_forked_by_the_zygote(tmp_path):
    facts = script_facts(_PIPELINE, str(tmp_path / "rows.txt"))
    assert sorted(r[0] for r in facts["rows"]) == list(range(40))  # every element, once
    # Each element ran in a worker whose parent is the zygote, not Beam's shell or python -m.
    assert {r[2] for r in facts["rows"]} == {facts["zygote"]}
    assert "fork_client.py" in facts["command"] and "-S" in facts["command"]
    assert not facts["zygote_left"]  # stop() ended and reaped it


_CLIENT = (
    _PRELUDE
    + """
print(json.dumps({"zygote": zygote, "command": started.command()}), flush=True)
sys.stdin.read()  # until the test closes it
started.stop()
"""
)


def _children(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(c) for c in f.read().split()}


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" in f.read()  # a zombie no parent reaps in a container
    except FileNotFoundError:
        return True


def _wait(condition, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    return condition()


@contextlib.contextmanager
def _program():
    """A program with its zygote started: (its pid, the worker command, the program)."""
    program = subprocess.Popen(
        [sys.executable, "-c", _CLIENT],
        env=cli_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    facts = json.loads(program.stdout.readline())
    yield facts["zygote"], facts["command"], program
    program.stdin.close()
    program.wait(timeout=60)


@pytest.fixture
def zygote():
    """A program and zygote of the test's own, for a test that kills one of them."""
    with _program() as started:
        yield started


@pytest.fixture(scope="module")
def shared_zygote():
    """One program and zygote for the tests that leave both running (each program imports Beam
    and TensorFlow: ~3 s of CPU)."""
    with _program() as started:
        yield started


def test_the_workers_exit_status_and_streams_reach_beams_process(shared_zygote):
    """A worker that fails (no control address to serve) fails the client Beam started, with its
    traceback on the client's own stderr, as Beam's own worker process would."""
    _, command, _ = shared_zygote
    proc = subprocess.run(
        shlex.split(command),
        env={"PIPELINE_OPTIONS": "{}", "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc
    assert "CONTROL_API_SERVICE_DESCRIPTOR" in proc.stderr  # the KeyError, on this stderr


def test_killing_beams_worker_process_kills_the_forked_worker(shared_zygote):
    """Beam kills a worker's process to stop it: the forked worker goes with it (the zygote
    stays, ready for the next client)."""
    pid, command, _ = shared_zygote
    env = {
        "PIPELINE_OPTIONS": "{}",
        "CONTROL_API_SERVICE_DESCRIPTOR": 'url: "localhost:1"',  # nothing there: it waits (60 s)
        "PATH": os.environ.get("PATH", ""),
    }
    client = subprocess.Popen(shlex.split(command), env=env, stderr=subprocess.DEVNULL)
    worker = _wait(lambda: _children(pid))
    assert len(worker) == 1, worker
    (worker,) = worker
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=10)
    assert _wait(lambda: _gone(worker)), f"forked worker {worker} outlived its client"


def test_a_killed_zygote_takes_its_workers_with_it(zygote):
    """The zygote killed (the OOM killer's SIGKILL: no handler runs) while a worker waits: the
    kernel kills the worker too (PR_SET_PDEATHSIG) instead of leaving it to run on."""
    pid, command, _ = zygote
    env = {
        "PIPELINE_OPTIONS": "{}",
        "CONTROL_API_SERVICE_DESCRIPTOR": 'url: "localhost:1"',  # nothing there: it waits (60 s)
        "PATH": os.environ.get("PATH", ""),
    }
    client = subprocess.Popen(shlex.split(command), env=env, stderr=subprocess.DEVNULL)
    try:
        worker = _wait(lambda: _children(pid))
        assert len(worker) == 1, worker
        (worker,) = worker
        os.kill(pid, signal.SIGKILL)
        assert _wait(lambda: _gone(worker), timeout=10), f"worker {worker} outlived its zygote"
    finally:
        client.kill()
        client.wait(timeout=10)


def test_the_zygote_ends_with_the_program(zygote):
    pid, command, program = zygote
    folder = os.path.dirname(shlex.split(command)[-1])  # the socket's
    program.send_signal(signal.SIGKILL)  # no stop(): the zygote sees its parent gone
    program.wait(timeout=10)
    assert _wait(lambda: _gone(pid)), "the zygote outlived the program"
    assert _wait(lambda: not os.path.exists(folder)), f"{folder} left behind"


def _descendants(pid: int) -> set[int]:
    """Every process below `pid` now, whichever of their parents' threads started them
    (Beam starts its worker processes from a thread); vanished ones are skipped."""
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except FileNotFoundError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = {int(c) for c in f.read().split()} - found
            except FileNotFoundError:
                continue
            todo += children
            found |= children
    return found


def _convert_watching_workers(args: list[str], env: dict) -> set[str]:
    """`imgrec convert ARGS` as a user runs it; the kinds of worker process seen below it while
    it ran, polled every 50 ms: "fork_client" (Beam's command for a forked worker) and
    "sdk_worker_main" (Beam's own worker process)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", *args],
        cwd=ROOT,
        env=cli_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    kinds = set()
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            kinds |= {k for k in ("fork_client", "sdk_worker_main") if k.encode() in cmdline}
        time.sleep(0.05)
    output = proc.stdout.read().decode(errors="replace")
    assert proc.wait() == 0, output[-3000:]
    return kinds


def test_the_default_command_writes_the_same_dataset_with_forked_or_beams_workers(tmp_path):
    """The command line with two worker processes, forked (the default) and Beam's own
    (IMGREC_FORKED_WORKERS=0): every file imgrec writes is byte-identical, and each run used
    the workers it says (Beam's worker command is the fork client only where forked)."""
    src = str(tmp_path / "in")
    build_corpus(src, num_images=40, seed=3, long_side=(48, 96))
    outs, kinds = {}, {}
    for forked in ("1", "0"):
        outs[forked] = str(tmp_path / f"out{forked}")
        kinds[forked] = _convert_watching_workers(
            ["--input", f"{src}/*/*.jpg", "--output", outs[forked], "--workers", "2",
             "--max_bad_fraction", "0.2"],
            env={"IMGREC_FORKED_WORKERS": forked},
        )  # fmt: skip
    assert kinds == {"1": {"fork_client"}, "0": {"sdk_worker_main"}}
    assert output_digests(outs["1"]) == output_digests(outs["0"])
    assert any(name.endswith(".tfrecord") for name in output_digests(outs["1"]))


def test_a_client_without_its_zygote_runs_beams_own_worker(tmp_path):
    """The zygote gone (its command ended): Beam's worker command still starts a worker."""
    from pipeline.launch import forked_workers

    client = os.path.join(os.path.dirname(forked_workers.__file__), "fork_client.py")
    proc = subprocess.run(
        [sys.executable, "-I", "-S", client, str(tmp_path / "no-such-socket")],
        env=cli_env(PIPELINE_OPTIONS="{}"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc
    assert "CONTROL_API_SERVICE_DESCRIPTOR" in proc.stderr and "create_harness" in proc.stderr
    # The client imports nothing of imgrec's: its copy of the zygote's first message must agree.
    assert runpy.run_path(client)["STARTED"] == forked_workers.STARTED
