"""The `imgrec` program (`imgrec ...`, `python -m pipeline ...`): its start, one command, its exit."""

from __future__ import annotations

import atexit
import logging
import os
import sys

from pipeline.cli import run_command
from pipeline.launch import startup
from pipeline.launch.plan import PlanError, read_plan
from pipeline.launch.switches import Switches, read_switches

__all__ = ["run", "start"]


def start(switches: Switches) -> None:
    """How a program of imgrec's starts, before anything imports TensorFlow: Keras 2 only (as TFT
    needs), TensorFlow's import without Keras, and the imports without the garbage collector
    until the command's work starts (pipeline/launch/startup.py)."""
    startup.use_keras_2()
    startup.defer_keras(switches)
    startup.begin(switches)


def run() -> None:
    """Read the command line, start, run the command, and exit without the interpreter's slow
    teardown of TensorFlow's and Beam's threads (exit handlers and logging still run)."""
    switches = read_switches()  # the one read of imgrec's environment variables
    try:
        plan = read_plan(sys.argv[1:], as_program=True, switches=switches)
    except PlanError as e:
        print(f"imgrec: {e}", file=sys.stderr)
        _exit(2)
    start(switches)
    _exit(run_command(plan))


def _exit(status) -> None:
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else 1)
