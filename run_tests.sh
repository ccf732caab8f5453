#!/usr/bin/env bash
# Set up (as run_local.sh does) and run the test suite on pytest-xdist workers: one per core plus
# one, since the e2e tests spend seconds waiting on servers, clusters and child processes. Each
# test file runs on one worker (its module fixtures, corpora and servers are built once), the
# longest files first (tests/conftest.py; --no-loadscope-reorder keeps that order). The suite's
# times: docs/benchmarks.md. Extra arguments go to pytest: test paths (default: tests/), options
# (a later -n wins: `-n 0` runs in this process, for pdb). The tiers (tests/conftest.py):
#   ./run_tests.sh                 everything (what CI runs)
#   ./run_tests.sh -m unit         the inner loop: tests/unit, no conversion, one worker per core
#   ./run_tests.sh -m "not e2e"    unit and integration: whole conversions in the test process
#   ./run_tests.sh -m e2e          the real command line, clusters, servers mid-outage
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
# Bytecode is cached (__pycache__/, git-ignored) even where PYTHONDONTWRITEBYTECODE is set, as on
# this project's dev and CI machines: otherwise every worker and `imgrec` process of the suite
# compiles the project's modules again. They are compiled here, once.
unset PYTHONDONTWRITEBYTECODE
python -m compileall -q -j 0 core pipeline transforms templates tests >/dev/null
cores="$(python -c 'import os; print(os.cpu_count() or 1)')"
# A unit-only run waits on nothing, so one worker per core is enough.
unit_only=""
previous=""
for arg in "$@"; do
  if [ "$arg" = "-m=unit" ] || { [ "$previous" = "-m" ] && [ "$arg" = "unit" ]; }; then
    unit_only=1
  fi
  previous="$arg"
done
if [ -n "$unit_only" ]; then default_workers="$cores"; else default_workers="$((cores + 1))"; fi
workers="${IMGREC_TEST_WORKERS:-$default_workers}"
exec python -m pytest -n "$workers" --dist "${IMGREC_TEST_DIST:-loadfile}" --no-loadscope-reorder "$@"
