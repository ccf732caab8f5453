#!/usr/bin/env bash
# Set up (as run_local.sh does) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
exec python -m pytest tests "$@"
