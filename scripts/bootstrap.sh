#!/usr/bin/env bash
# Sourced by run_local.sh / run_tests.sh / run_dataflow.sh: creates .venv if missing and installs
# the pinned project there. Re-installs only when a requirements/constraints/setup file changed.
set -euo pipefail
IMGREC_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${IMGREC_VENV:-$IMGREC_ROOT/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "imgrec: creating $VENV" >&2
  "$PYTHON_BIN" -m venv "$VENV"
fi
stamp="$VENV/.imgrec-installed"
want="$(cd "$IMGREC_ROOT" && for f in requirements.txt requirements-test.txt requirements-nodeps.txt constraints.txt setup.py; do
  if [ -f "$f" ]; then cat "$f"; fi; done | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "imgrec: installing pinned dependencies into $VENV (first run takes a few minutes)" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 10 --upgrade pip >&2
  # Large wheels (DALI's) can outlast pip's default 5 download resumes on a flaky connection, so
  # pip resumes up to 50 times and the install is tried 3 times. pip reports a full disk as an
  # interrupted download too, so the last failure names the free space.
  attempt=1
  until "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 10 \
    --resume-retries 50 -c "$IMGREC_ROOT/constraints.txt" \
    -r "$IMGREC_ROOT/requirements.txt" -r "$IMGREC_ROOT/requirements-test.txt" >&2; do
    if [ "$attempt" -ge 3 ]; then
      free_mb="$(df -Pm "$VENV" | awk 'NR == 2 {print $4}')"
      echo "imgrec: installing the pinned dependencies into $VENV failed 3 times (pip's message is" \
        "above); they need ~4.4 GB and ${free_mb} MB are free there. Check the free space and the" \
        "connection to the package registry, then run this command again" >&2
      exit 1
    fi
    attempt=$((attempt + 1))
    echo "imgrec: pip install failed; trying again (attempt $attempt of 3)" >&2
    sleep "${IMGREC_PIP_RETRY_SLEEP_S:-10}"
  done
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --retries 10 --no-deps \
    -r "$IMGREC_ROOT/requirements-nodeps.txt" >&2
  if [ -f "$IMGREC_ROOT/setup.py" ]; then
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$IMGREC_ROOT" >&2
  fi
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$IMGREC_ROOT${PYTHONPATH:+:$PYTHONPATH}"
# TensorFlow's C++ info/warning lines (CPU features, CUDA absent) are noise for this tool.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
