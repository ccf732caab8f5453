"""Test tiers: `e2e` marks tests that run the real command line (a subprocess per conversion:
TensorFlow + Beam start-up each) or real storage servers; everything else is the fast tier.

    ./run_tests.sh                 # everything (CI)
    ./run_tests.sh -m "not e2e"    # the inner loop
    ./run_tests.sh -m e2e          # only the end-to-end tier
"""

from __future__ import annotations

import pytest

# Modules whose tests drive `python -m pipeline ...` in a subprocess or start storage servers.
# Any test module named test_*_e2e.py is end-to-end too.
E2E_MODULES = frozenset(
    {
        "test_convert",
        "test_cloud_e2e",
        "test_dataflow_dry_run",
        "test_hostile_e2e",
        "test_packaging",
    }
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "e2e: end-to-end (CLI subprocesses, storage servers); deselect with -m 'not e2e'"
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if module in E2E_MODULES or module.endswith("_e2e"):
            item.add_marker(pytest.mark.e2e)
