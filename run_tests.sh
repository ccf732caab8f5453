#!/usr/bin/env bash
# Set up (as run_local.sh does) and run the whole test suite on pytest-xdist workers, one per
# core plus one: the e2e tests spend seconds waiting on servers, clusters and child processes, so
# a third worker keeps 2 cores busy (one early run: 2 workers 423 s, 3 workers 364 s, 4 workers
# 394 s; 2026-12-02: 3 workers 273-286 s, 4 workers 299 s; 2026-12-05: 3 workers 344-387 s, 4
# workers 385 s with more CPU, 728 s against 626-707 s). Each test file runs on one
# worker (its module fixtures, corpora and servers are built once), the longest files first
# (tests/conftest.py, _SLOWEST_FIRST and _file_rank; --no-loadscope-reorder keeps that order).
# The suite's times, dated, are in docs/benchmarks.md (2026-12-05 06:40-07:45: 310-351 s).
# Extra arguments go to pytest: test paths (default: pytest.ini's testpaths, tests/), options (a
# later -n wins: `-n 0` runs in this process, for pdb). The tiers (tests/conftest.py): tests/unit
# (no conversion), tests/integration (whole conversions in process), tests/e2e (the real command
# line, clusters, servers mid-outage), each selected by its marker:
#   ./run_tests.sh                 everything (what CI runs)
#   ./run_tests.sh -m unit         the inner loop: tests/unit without its server and TFT-pipeline
#                                  tests (those run with integration), one worker per core:
#                                  26-30 s on 2 cores (2026-12-05); 48-56 s on 2026-12-03
#                                  and 150 s before the tiers were split (docs/benchmarks.md)
#   ./run_tests.sh -m "not e2e"    unit and integration: everything in the test process
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
# Bytecode is cached (__pycache__/, git-ignored) even where PYTHONDONTWRITEBYTECODE is set, as on
# this project's dev and CI machines: every xdist worker, `imgrec` process, trainer and Dask
# worker of the suite otherwise compiles the project's modules again, and each worker rewrites
# and compiles every test module (a worker's collection: 7.4-9.4 s of CPU without the cache,
# 5.5-6.1 s with it; 2026-12-03). The project's modules are compiled here, once (~0.3 s).
unset PYTHONDONTWRITEBYTECODE
python -m compileall -q -j 0 core pipeline transforms templates tests >/dev/null
cores="$(python -c 'import os; print(os.cpu_count() or 1)')"
# A unit-only run waits on nothing, so one worker per core: 68-77 s with 2 workers against
# 72-84 s with 3 on 2 cores, 20 s less CPU (2026-12-03, 8 runs).
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
