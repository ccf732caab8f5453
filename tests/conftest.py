"""Test tiers and shared fixtures.

    ./run_tests.sh                 # everything (CI)
    ./run_tests.sh -m "not e2e"    # the inner loop: tests/unit, in process
    ./run_tests.sh -m e2e          # only the end-to-end tier

tests/unit/: in-process tests (conversions through `tests.runs.in_process` on one in-memory
worker, transforms under TestPipeline, the reader on small shards). tests/e2e/: the real command
line in fresh processes (`tests.runs.cli`: default options end to end, exit statuses, kill -9),
storage outages mid-run, Dask and Dataflow, packaging; every test there is marked `e2e`. A test
in a tests/unit file that runs the command line in a fresh process (a kill -9, setpriv), a fresh
TensorFlow process (MirroredStrategy's logical CPUs, TensorFlow's GCS filesystem), a real browser,
or a whole conversion on the storage servers carries `@pytest.mark.e2e` itself (these stay beside
the fast tests of the same feature).

Shared helpers: tests/runs.py (running imgrec), tests/servers.py (GCS emulator and S3 server
fixtures, registered below), tests/hostile.py and tests/format_corpus.py (generated corpora).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# The storage-server fixtures (`gcs`, `s3`, `store`, `beam_filesystems`, ...) for every test
# without an import: one server of each kind for the whole session.
pytest_plugins = ["tests.servers"]

_E2E_DIR = Path(__file__).resolve().parent / "e2e"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "e2e: end-to-end (the CLI in fresh processes, storage servers mid-outage, Dask, "
        "packaging); deselect with -m 'not e2e'",
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _E2E_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
