"""The default command, whole process, wall clock: TFT importing Keras 2 in the analysis process
(IMGREC_PATCHES_OFF=tft_without_keras) against TFT without it (imgrec's default,
pipeline/launch/analysis_process.py `_import_tft_without_keras`).

    PYTHONPATH=. .venv/bin/python bench/ablations/tft_keras.py --sizes 1 --repeats 9

At one file the analysis process is the command's critical path (docs/benchmarks.md), and
most of `import tensorflow_transform` there is tf_keras. Same loop as
bench/ablations/type_inference.py (bench/_common.default_command_ab): the modes alternate, and
the outputs, dataset_info.json included, must be the same.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import default_command_ab  # noqa: E402
from pipeline.launch.switches import ENV  # noqa: E402

if __name__ == "__main__":
    default_command_ab(
        ENV["patches_off"], {"with Keras": "tft_without_keras", "without": None}, "TFT"
    )
