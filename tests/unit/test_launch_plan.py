"""The launch plan: what `imgrec ARGV` will do, read from the command line before Beam loads."""

from __future__ import annotations

import pytest

from pipeline.launch.plan import read_plan
from pipeline.launch.switches import read_switches


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--dry_run", True),
        ("--dry_run=true", True),
        ("--dry_run=True", True),
        ("--dry_run=false", False),
    ],
)
def test_boolean_flags_take_beams_explicit_values(flag, expected):
    # run_dataflow.sh passes Beam's own `--dry_run=true`; the plan must read it, not exit.
    plan = read_plan(["convert", "--input", "in/*.jpg", flag])
    assert plan.convert.dry_run is expected
    assert plan.convert.inputs == ("in/*.jpg",)


def test_a_malformed_command_line_is_left_to_the_real_parser():
    plan = read_plan(["convert", "--input"], as_program=True)
    assert plan.command == "convert"
    assert not plan.convert.fast_rerun and plan.convert.inputs == ()


def test_versioned_local_runs_may_take_the_fast_rerun():
    fast = read_plan(["convert", "--input", "in", "--output", "out", "--versioned"])
    assert fast.convert.fast_rerun
    for extra in ("--full", "--overwrite", "--dry_run=true", "--runner=DataflowRunner"):
        plan = read_plan(["convert", "--input", "in", "--output", "out", "--versioned", extra])
        assert not plan.convert.fast_rerun, extra


def test_imgrec_verbose_works_like_the_flag():
    plan = read_plan(["convert", "--input", "in"], switches=read_switches({"IMGREC_VERBOSE": "1"}))
    assert plan.verbose
    assert not read_plan(["convert"], switches=read_switches({"IMGREC_VERBOSE": "0"})).verbose


def test_bare_options_mean_convert_and_verbose_is_lifted_out():
    plan = read_plan(["-v", "--input", "in", "--output", "out"])
    assert (plan.command, plan.verbose) == ("convert", True)
    assert "-v" not in plan.args
