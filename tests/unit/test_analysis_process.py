"""The analysis process (pipeline/launch/analysis_process.py): when the plan asks for it, none
once TensorFlow is loaded, and the job's wait for its answer (its conversions:
tests/e2e/test_analysis_process.py)."""

from __future__ import annotations

import os

import pytest

from pipeline.launch.analysis_process import AnalysisProcess
from pipeline.launch.plan import read_plan
from pipeline.launch.services import wanted_processes
from pipeline.launch.switches import read_switches
from pipeline.launcher import read_request


def _wanted(argv: list[str], environ: dict | None = None) -> tuple[bool, bool]:
    """(analysis process, zygote) the `imgrec` program starts for `imgrec convert ARGV`."""
    switches = read_switches(environ or {})
    plan = read_plan(["convert", *argv], as_program=True, switches=switches)
    return wanted_processes(plan, read_request(list(plan.args)))


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--input", "x/*.jpg", "--output", "o"], True),
        (["--input", "x/*.jpg", "--output", "o", "--runner", "DirectRunner"], True),
        (["--input", "x/*.jpg", "--output", "o", "--no_analyze"], False),
        (["--input", "x/*.jpg", "--output", "o", "--dry_run=true"], False),
        (["--input", "x/*.jpg", "--output", "o", "--runner", "DataflowRunner"], False),
        (["--input", "x/*.jpg", "--output", "o", "--runner=DaskRunner"], False),
    ],
)
def test_started_only_for_a_local_run_that_analyses(argv, expected):
    assert _wanted(argv)[0] is expected


def test_no_analyze_in_a_config_file_starts_none(tmp_path):
    """The request holds --config's options too: a config's no_analyze starts no process."""
    config = tmp_path / "c.yaml"
    config.write_text("no_analyze: true\n")
    assert _wanted(["--input", "x/*.jpg", "--output", "o", "--config", str(config)]) == (
        False,
        True,
    )


def test_switched_off_by_the_environment():
    argv = ["--input", "x/*.jpg", "--output", "o"]
    assert _wanted(argv, {"IMGREC_ANALYSIS_PROCESS": "0"}) == (False, True)
    assert _wanted(argv, {"IMGREC_FORKED_WORKERS": "0"}) == (True, False)


def test_a_library_caller_gets_no_process():
    plan = read_plan(["convert", "--input", "x/*.jpg", "--output", "o"])
    assert wanted_processes(plan, read_request(list(plan.args))) == (False, False)


def test_no_fork_once_tensorflow_is_loaded():
    """A library caller (this test process has TensorFlow) gets none: forking after TensorFlow
    ran would leave the child without its thread pools. The job then analyses in its stages."""
    import tensorflow  # noqa: F401

    assert AnalysisProcess.start(read_switches({})) is None


def test_a_wait_ends_when_the_other_side_died(tmp_path):
    """The job's wait for the answer fails with a message, not forever, once the analysis
    process has exited without answering (reaped, or a zombie its parent has not waited for)."""
    from transforms.analyze_aside import STATISTICS, wait_for_file

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    with pytest.raises(RuntimeError, match=r"ended without an answer.*--no_analyze"):
        wait_for_file(str(tmp_path), (STATISTICS,), pid)  # a zombie: not reaped yet
    os.waitpid(pid, 0)
    with pytest.raises(RuntimeError, match=r"ended without an answer"):
        wait_for_file(str(tmp_path), (STATISTICS,), pid)  # gone
    (tmp_path / STATISTICS).write_text("{}")
    assert wait_for_file(str(tmp_path), (STATISTICS,), pid) == STATISTICS  # answered, then died
