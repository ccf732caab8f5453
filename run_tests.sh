#!/usr/bin/env bash
# Set up (as run_local.sh does) and run the whole test suite on pytest-xdist workers, one per
# core plus one (the e2e tests spend seconds waiting on servers, clusters and child processes:
# whole suite on 2 cores: 423 s with 2 workers, 364 s with 3, 394 s with 4 once; 2026-12-02, 3
# workers 273-286 s at 98 % CPU, 4 workers 299 s; 2026-12-03, 3 workers beside other engineers'
# runs, load 3-7: 1,227 s wall, 1,883 s CPU; 2026-12-03 quiet, merged main: 858 s wall, 1,616 s
# CPU), each test file on one worker (its module fixtures, corpora and servers, are built once), the slowest files first
# (tests/conftest.py, _SLOWEST_FIRST; --no-loadscope-reorder keeps that order).
# Extra arguments go to pytest: test paths (default: pytest.ini's testpaths, tests/), options (a
# later -n wins: `-n 0` runs in this process, for pdb). The tiers (tests/conftest.py): tests/unit
# (no conversion), tests/integration (whole conversions in process), tests/e2e (the real command
# line, clusters, servers mid-outage), each selected by its marker:
#   ./run_tests.sh                 everything (what CI runs)
#   ./run_tests.sh -m unit         the inner loop: tests/unit without its server and TFT-pipeline
#                                  tests (those run with integration): 61-77 s on 2 cores
#                                  (2026-12-03, 8 runs; 150 s before that split)
#   ./run_tests.sh -m "not e2e"    unit and integration: everything in the test process
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
workers="${IMGREC_TEST_WORKERS:-$(($(python -c 'import os; print(os.cpu_count() or 1)') + 1))}"
exec python -m pytest -n "$workers" --dist "${IMGREC_TEST_DIST:-loadfile}" --no-loadscope-reorder "$@"
