#!/usr/bin/env bash
# Set up (as run_local.sh does) and run the whole test suite on pytest-xdist workers, one per
# core plus one (the e2e tests spend seconds waiting on servers, clusters and child processes:
# whole suite on 2 cores: 423 s with 2 workers, 364 s with 3, 394 s with 4 once; 2026-12-02, 3
# workers 273-286 s at 98 % CPU, 4 workers 299 s; 2026-12-03, 3 workers beside other engineers'
# runs, load 3-7: 1,227 s wall, 1,883 s CPU; 2026-12-03 quiet, merged main: 858 s wall, 1,616 s
# CPU; 2026-12-03 17:20 on a faster host: 564 s wall, 1,016 s CPU, 625 s / 1,132 s at 16:30
# before the analysis process lost its reload and Keras; 19:00-20:00, three runs: 541-611 s
# wall, 1,001-1,135 s CPU; 2026-12-05: 3 workers 344-387 s, 626-707 s CPU, ~95 % busy; 4 workers
# 385 s, 728 s CPU, 99-100 % busy; 02:05-03:40, 3 workers: 347-371 s, 618-667 s CPU), each test file on one worker (its module fixtures, corpora and servers, are built once), the longest files first
# (tests/conftest.py, _SLOWEST_FIRST; --no-loadscope-reorder keeps that order).
# Extra arguments go to pytest: test paths (default: pytest.ini's testpaths, tests/), options (a
# later -n wins: `-n 0` runs in this process, for pdb). The tiers (tests/conftest.py): tests/unit
# (no conversion), tests/integration (whole conversions in process), tests/e2e (the real command
# line, clusters, servers mid-outage), each selected by its marker:
#   ./run_tests.sh                 everything (what CI runs)
#   ./run_tests.sh -m unit         the inner loop: tests/unit without its server and TFT-pipeline
#                                  tests (those run with integration), one worker per core:
#                                  38 s on 2 cores (2026-12-03 17:50, a faster host; 47 s
#                                  at 20:05); 48-56 s
#                                  (2026-12-03 14:50-15:07, 5 runs; 71-80 s just
#                                  before, with Keras loaded in the workers, a 12 s fuzz and the
#                                  broad format corpus's TensorFlow child in the tier; 150 s
#                                  before the tiers were split)
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
