#!/usr/bin/env bash
# Set up (as run_local.sh does) and run the whole test suite, one pytest-xdist worker per core,
# each test file on one worker (its module fixtures, corpora and servers, are built once).
# Extra arguments go to pytest: test paths (default: pytest.ini's testpaths, tests/), options (a
# later -n wins: `-n 0` runs in this process, for pdb).
#   ./run_tests.sh                 everything (what CI runs)
#   ./run_tests.sh -m "not e2e"    the fast tier (tests/unit, in process)
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
exec python -m pytest -n "${IMGREC_TEST_WORKERS:-auto}" --dist "${IMGREC_TEST_DIST:-loadfile}" "$@"
