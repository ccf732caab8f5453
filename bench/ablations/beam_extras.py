"""The default command, whole process, wall clock: Beam's import with every optional client it
tries (IMGREC_BEAM_EXTRAS=1) against imgrec's default, which leaves out pandas, BigQuery's and
Pub/Sub's clients while Beam starts (core/startup.py `defer_beam_extras`).

    PYTHONPATH=. .venv/bin/python bench/ablations/beam_extras.py --sizes 1,12000 --repeats 5

At one file the analysis process is the critical path, and it imports pandas itself later
(tfx_bsl's Arrow types), so the gain there is the other clients; where the job is the critical
path (--no_analyze) it is all of it; at 12,000 files ~0.3 s is inside this host's noise
(docs/benchmarks.md). Same loop as bench/ablations/tft_keras.py
(bench/_common.default_command_ab): the modes alternate, and the outputs must be the same.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import default_command_ab  # noqa: E402
from core.startup import BEAM_EXTRAS_ENV  # noqa: E402

if __name__ == "__main__":
    default_command_ab(BEAM_EXTRAS_ENV, {"with the extras": "1", "without": None}, "Beam")
