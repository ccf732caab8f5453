"""The default command, whole process, wall clock: the analysis process reading every answer's
statistics back from TFT's export (IMGREC_EXACT_STATISTICS=0) against summing them exactly from
the rows where that gives TFT's own numbers (imgrec's default, transforms/statistics.py).

    PYTHONPATH=. .venv/bin/python bench/ablations/exact_statistics.py --sizes 1 --repeats 9

At one file the analysis process is the command's critical path (docs/benchmarks.md), so the
reload it skips (loading the exported SavedModel and running it once) is the whole command's
time. Same loop as bench/ablations/type_inference.py (bench/_common.default_command_ab): the
modes alternate, and the outputs, dataset_info.json's statistics included, must be the same.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import default_command_ab  # noqa: E402
from pipeline.launch.switches import ENV  # noqa: E402

if __name__ == "__main__":
    default_command_ab(ENV["exact_statistics"], {"read back": "0", "exact": None}, "statistics")
