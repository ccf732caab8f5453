"""The analysis process (pipeline/launch/analysis_process.py): when the plan asks for it, none
once TensorFlow is loaded, and the job's wait for its answer (its conversions:
tests/e2e/test_analysis_process.py)."""

from __future__ import annotations

import os

import pytest

from pipeline.launch import analysis_process
from pipeline.launch.plan import ANALYSIS_PROCESS_ENV, read_plan


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--input", "x/*.jpg", "--output", "o"], True),
        (["--input", "x/*.jpg", "--output", "o", "--runner", "DirectRunner"], True),
        (["--input", "x/*.jpg", "--output", "o", "--no_analyze"], False),
        (["--input", "x/*.jpg", "--output", "o", "--dry_run"], False),
        (["--input", "x/*.jpg", "--output", "o", "--runner", "DataflowRunner"], False),
        (["--input", "x/*.jpg", "--output", "o", "--runner=DaskRunner"], False),
        (["--help"], False),
    ],
)
def test_started_only_for_a_local_run_that_analyses(argv, expected, monkeypatch):
    monkeypatch.delenv(ANALYSIS_PROCESS_ENV, raising=False)
    assert read_plan(["convert", *argv]).convert.analysis_process is expected


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv(ANALYSIS_PROCESS_ENV, "0")
    plan = read_plan(["convert", "--input", "x/*.jpg", "--output", "o"])
    assert plan.convert.analysis_process is False


def test_no_fork_once_tensorflow_is_loaded(tmp_path):
    """A library caller (this test process has TensorFlow) gets none: forking after TensorFlow
    ran would leave the child without its thread pools. The job then analyses in its stages."""
    import tensorflow  # noqa: F401

    analysis_process.start()
    assert analysis_process._started is None
    assert analysis_process.claim(str(tmp_path)) is None


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
