"""Test tiers and shared fixtures.

    ./run_tests.sh                 # everything (CI)
    ./run_tests.sh -m unit         # the inner loop: tests/unit, no conversion (48-56 s, 2 cores)
    ./run_tests.sh -m "not e2e"    # unit and integration: everything in this process
    ./run_tests.sh -m e2e          # only the end-to-end tier

Three tiers, one folder and one marker each (given here by folder):
- tests/unit/ (`unit`): no conversion, no server, no TFT pipeline, no fresh process. Pure
  functions, DoFns and transforms under `TestPipeline`, the reader on shards written by hand.
- tests/integration/ (`integration`): whole conversions in this process (`tests.runs.in_process`,
  one in-memory worker), read back and compared: the command's behaviour without its start-up.
  Also in this tier, from their feature's file in tests/unit: tests that use a storage server
  (tests/servers.py fixtures, by `_SERVER_FIXTURES`) and those marked `integration` (TFT's
  analysis pipelines).
- tests/e2e/ (`e2e`): the real command line in fresh processes (`tests.runs.cli`: default options
  end to end, exit statuses, kill -9), storage outages mid-run, Dask and Dataflow, TensorFlow
  clusters, packaging.
A test in a unit or integration file that needs a fresh process (the command line killed or under
setpriv, MirroredStrategy's logical CPUs, TensorFlow's GCS filesystem, a real browser) or a whole
conversion on the storage servers carries `@pytest.mark.e2e` itself: it belongs to the e2e tier
only (it stays beside the fast tests of the same feature). The unit tier's inner loop took
48-56 s on 2 cores (2026-12-03 14:50-15:07, 5 runs; the target is 60 s); its fuzz gets 6 s there
(IMGREC_FUZZ_BUDGET_S; CI gives it 40 s).

Shared helpers: tests/runs.py (running imgrec), tests/servers.py (GCS emulator and S3 server
fixtures, registered below; `put_corpus`), tests/hostile.py and tests/format_corpus.py
(generated corpora).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from core import startup

# Collection imports TensorFlow, Beam and TFT in every xdist worker: without the garbage collector
# until it is done, then those objects frozen, as the `imgrec` program does at its start-up
# (core/startup.py), so the in-process tests' full collections do not walk them again. And as in
# the program, TensorFlow's import leaves Keras out (`tf.keras`, TFT and Keras's own imports still
# load it when a test asks): a worker's collection imported Keras 3 and TensorFlow's legacy Keras
# layers for nothing, ~0.7 s of CPU per worker (7.2 -> 6.5 s, medians of 5 alternating).
startup.begin()
startup.defer_keras()


def _import_what_collection_imports() -> None:
    import apache_beam  # noqa: F401
    import tensorflow  # noqa: F401


# The test modules' imports and each test's protocol (fixtures, the test, teardown) run above one
# large frame, as the `imgrec` program's work does (core/startup.py, `on_a_roomy_stack`): their
# frames stay in one stack chunk instead of mapping and unmapping one at each crossing. strace of
# `pytest -n 0 tests/integration/test_convert.py`: 71,031 16 KB maps in the test process, 7,995
# with the tests above the frame (most of those left are its collection's imports, which a run
# without xdist does not move: the controller of an xdist run collects nothing and should not
# import TensorFlow).
if os.environ.get("PYTEST_XDIST_WORKER"):
    startup.on_a_roomy_stack(_import_what_collection_imports)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """pytest's own protocol (setup, call, teardown, reports) above the large frame."""
    from _pytest.runner import pytest_runtest_protocol as run_the_test

    return startup.on_a_roomy_stack(run_the_test, item, nextitem)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    startup.finish()  # collected (each xdist worker), or the controller's loop starts
    # Fewer young collections: each one is cheap, but every tenth of the tenth is a full one.
    gc.set_threshold(10_000, 10, 10)


# What a test module leaves alive once its fixtures are gone (TFT and Keras imported by its first
# analysis, TensorFlow's traced functions, Beam's caches) lives to the end of the session; the
# workers' full collections walked it again and again. At the end of each module: one collection,
# then what survives is frozen, as the start-up imports are. In the integration tier's workers
# (-n 3) the collector's time went from 5.3 s per worker (gen2: 3.7 s) to 2.8 s (2026-12-04;
# the threshold above is 0.6 s of that).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the module's fixtures are finalised in here when the next test is in another module
    if nextitem is None or nextitem.module is not item.module:
        gc.collect()
        gc.freeze()


# The storage-server fixtures (`gcs`, `s3`, `store`, `beam_filesystems`, ...) for every test
# without an import: one server of each kind for the whole session.
pytest_plugins = ["tests.servers"]

_TESTS_DIR = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "e2e")  # tests/<tier>/, each its marker


def pytest_configure(config):
    for name, what in (
        ("unit", "tests/unit: no conversion, in process (the inner loop: -m unit)"),
        ("integration", "tests/integration: whole conversions in this process"),
        ("e2e", "end to end: the CLI in fresh processes, storage servers mid-outage, Dask, "
         "TensorFlow clusters, packaging; deselect with -m 'not e2e'"),
    ):  # fmt: skip
        config.addinivalue_line("markers", f"{name}: {what}")


# The files that take longest in a whole run, run first, longest first (each file's tests in
# sequence on one xdist worker; wall seconds per file in one whole run as CI runs it, CI=true with
# the 40-s fuzz budget, 3 workers on 2 cores, 2026-12-05 06:40, 332 s in all). run_tests.sh turns
# off xdist's own order (most tests per file first); the files not named, all under 9 s, follow
# (_file_rank). Each file stays on one worker (--dist loadfile), so order is all a file list can
# change: the last file a worker takes decides when it ends. With the list of 2026-12-02 (other
# engineers' runs beside it, load 11) test_forked_workers (37 s) and test_fuzz (14 s in CI) were
# not named and came last, and the three workers ended 20 s apart (327, 316, 307 s).
_SLOWEST_FIRST = (
    "e2e/test_reader_multiworker.py",  # 71: four two-process TensorFlow clusters
    "e2e/test_dask.py",  # 70
    "e2e/test_version_leases.py",  # 59, most of it waiting out the SIGKILL expiry (45 s)
    "e2e/test_cloud.py",  # 50
    "integration/test_incremental.py",  # 45
    "integration/test_splice_records.py",  # 41
    "unit/test_analysis_process.py",  # 39
    "integration/test_odd_names.py",  # 38
    "e2e/test_forked_workers.py",  # 37
    "unit/test_reader.py",  # 33
    "integration/test_resume.py",  # 31
    "integration/test_store_modes.py",  # 31
    "e2e/test_cli.py",  # 29
    "e2e/test_version_leases_s3.py",  # 26
    "e2e/test_cloud_analyze.py",  # 26
    "unit/test_storage.py",  # 25, most of it waiting on the storage servers
    "integration/test_convert.py",  # 23
    "e2e/test_quiet_progress.py",  # 22
    "integration/test_versioned.py",  # 20
    "e2e/test_version_leases_gcs.py",  # 20
    "unit/test_analyze.py",  # 19
    "e2e/test_reader_vanishing_buckets.py",  # 18
    "unit/test_fuzz.py",  # 14 in CI (its budget: 20,000 cases or 40 s), 6 in the unit tier
    "unit/test_startup.py",  # 14
    "unit/test_reader_s3.py",  # 14
    "integration/test_incremental_stats.py",  # 12
    "unit/test_layers.py",  # 9
)


def _file_rank(name: str, num_tests: int) -> tuple[int, int, int]:
    """The named files in their order, then the others by tier (e2e, integration, unit: a fresh
    process per test before many small in-process ones), most tests first within a tier. So a
    run ends on the unit tier's small files, which the workers share out evenly; an e2e file
    not named yet (a few tests, seconds each) does not come last."""
    first = _SLOWEST_FIRST.index(name) if name in _SLOWEST_FIRST else len(_SLOWEST_FIRST)
    return first, TIERS[::-1].index(_folder_tier(name)), -num_tests


def _folder_tier(name: str) -> str:
    """The tier of a file's folder (tests/<tier>/); a file elsewhere is a unit test's."""
    folder = name.partition("/")[0]
    return folder if folder in TIERS else "unit"


# The storage-server fixtures (tests/servers.py): a test in tests/unit that uses one talks to a
# real server over HTTP (seconds of set-up, retries, outages), so it runs in the integration tier.
_SERVER_FIXTURES = frozenset(
    {"cloud_env", "gcs", "own_gcs", "s3", "store", "googleapis_front", "tensorflow_gcs_env",
     "beam_filesystems"}
)  # fmt: skip


def _tier(item, name: str) -> str:
    """The test's tier: e2e if marked so; integration if in tests/unit but marked so (a TFT
    analysis pipeline) or using a storage server; else its folder's."""
    if item.get_closest_marker("e2e") is not None:
        return "e2e"
    tier = _folder_tier(name)
    if tier == "unit" and (
        item.get_closest_marker("integration") is not None
        or _SERVER_FIXTURES & set(getattr(item, "fixturenames", ()))
    ):
        return "integration"
    return tier


def pytest_collection_modifyitems(config, items):
    by_file: dict[str, list] = {}
    for item in items:
        path = Path(str(item.path)).resolve()
        name = path.relative_to(_TESTS_DIR).as_posix() if _TESTS_DIR in path.parents else str(path)
        tier = _tier(item, name)
        if item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
        by_file.setdefault(name, []).append(item)
    # Stable: the same order in every xdist worker (they must collect identically).
    order = sorted(by_file, key=lambda name: _file_rank(name, len(by_file[name])))
    items[:] = [item for name in order for item in by_file[name]]
