"""The default command, whole process, wall clock: with Beam's construction-time type inference
(IMGREC_BEAM_TYPE_INFERENCE=1) against without it (imgrec's default, pipeline/builder.py).

    PYTHONPATH=. .venv/bin/python bench/ablations/type_inference.py --repeats 5
    PYTHONPATH=. .venv/bin/python bench/ablations/type_inference.py --sizes 1 --workers 2

For each corpus size (bench/_common.corpus, cached under bench/_work/), `python -m pipeline
convert --input DIR/*/*.jpg --output OUT` with default options, the two modes alternating so
the machine's load falls on both alike; `--workers N` adds that option (2: two worker
processes, whose pipelines are built again from the launcher's). Prints each run, then per size
the medians and the ratio. Also checks that both modes wrote the same shards, rejects,
duplicates and dataset_info.json (bench/_common.output_snapshot: provenance times left out).
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import default_command_ab  # noqa: E402
from pipeline.launch.switches import ENV  # noqa: E402

if __name__ == "__main__":
    default_command_ab(ENV["type_inference"], {"Beam's": "1", "none": None}, "type inference")
