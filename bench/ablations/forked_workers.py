"""The default command, whole process, wall clock: DirectRunner's worker processes forked from
the command's zygote (the default, pipeline/launch/forked_workers.py) against Beam's own, which
start as fresh interpreters (IMGREC_FORKED_WORKERS=0; the default then stays in-process below
20,000 files).

    PYTHONPATH=. .venv/bin/python bench/ablations/forked_workers.py --sizes 1,3000 --repeats 5
    PYTHONPATH=. .venv/bin/python bench/ablations/forked_workers.py --sizes 300 --workers 2

At one file it measures what the zygote costs a run that forks no worker (the fork, the stage
modules imported before it); from 3,000 files the default runs two forked worker processes.
Same loop as bench/ablations/type_inference.py (`default_command_ab` in bench/_common.py): the modes
alternate, and the outputs must be the same.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import default_command_ab  # noqa: E402
from pipeline.launch.switches import ENV  # noqa: E402

if __name__ == "__main__":
    default_command_ab(ENV["forked_workers"], {"forked": None, "Beam's": "0"}, "workers")
