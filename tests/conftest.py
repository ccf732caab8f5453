"""Test tiers and shared fixtures.

    ./run_tests.sh                 # everything (CI)
    ./run_tests.sh -m unit         # the inner loop: tests/unit, no conversion (48-56 s, 2 cores)
    ./run_tests.sh -m "not e2e"    # unit and integration: everything in this process
    ./run_tests.sh -m e2e          # only the end-to-end tier

Three tiers, one folder and one marker each (given here by folder):
- tests/unit/ (`unit`): no conversion, no server, no TFT pipeline, no fresh process. Pure
  functions, DoFns and transforms under `TestPipeline`, the reader on shards written by hand.
  Everything there runs with `-m unit`: a test in tests/unit that is marked `integration` or
  `e2e`, or uses a storage server (a tests/servers.py fixture), stops the collection.
- tests/integration/ (`integration`): whole conversions in this process (`tests.runs.in_process`,
  one in-memory worker), read back and compared; TFT's analysis pipelines; core/storage.py and
  the reader against the storage servers.
- tests/e2e/ (`e2e`): the real command line in fresh processes (`tests.runs.cli`: default options
  end to end, exit statuses, kill -9), storage outages mid-run, Dask and Dataflow, TensorFlow
  clusters, packaging.
A test in an integration file that needs a fresh process or a whole conversion on the storage
servers carries `@pytest.mark.e2e` itself: it belongs to the e2e tier only (it stays beside the
fast tests of the same feature and shares their module fixtures).

Shared helpers: tests/runs.py (running imgrec), tests/servers.py (GCS emulator and S3 server
fixtures, registered below; `put_corpus`), tests/hostile.py and tests/format_corpus.py
(generated corpora).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    # Fewer young collections: each one is cheap, but every tenth of the tenth is a full one.
    gc.set_threshold(10_000, 10, 10)


# What a test module leaves alive (TFT, Keras, TensorFlow's traced functions, Beam's caches) lives
# to the end of the session: frozen once the module is done, so full collections skip it.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the module's fixtures are finalised in here when the next test is in another module
    if nextitem is None or nextitem.module is not item.module:
        gc.collect()
        gc.freeze()


# In-process conversions (tests.runs.in_process) and the tests' own store calls run with the Beam
# patches the `imgrec` program's processes run with (pipeline/launch/patches.py; a library caller
# of pipeline.cli.main gets none): Beam's S3 and GCS filesystems share one client instead of
# building one per operation, DoFn specs and option views are memoized. Unpatched, one versioned
# rerun on moto's S3 built 287 boto3 clients, each loading botocore's JSON models: ~50 s of CPU
# of a 61-s run (cProfile), and test_version_leases_s3.py took 143 s alone, 19 s patched. Before,
# whether a test file ran patched depended on whether a unit test that installs them had run
# before it on the same worker. A unit-only session stays unpatched (it has no conversion); the
# patches' own tests (tests/unit/test_patches.py, test_beam_clients.py) take either state.
def pytest_collection_finish(session):
    if any(item.get_closest_marker("unit") is None for item in session.items):
        from pipeline.launch import patches

        for patch in patches.PATCHES:
            patch()


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
    "e2e/test_analysis_process.py",  # 39 in unit/, with its unit tests
    "integration/test_odd_names.py",  # 38
    "e2e/test_forked_workers.py",  # 37
    "integration/test_resume.py",  # 31
    "integration/test_store_modes.py",  # 31
    "e2e/test_cli.py",  # 29
    "e2e/test_version_leases_s3.py",  # 26
    "e2e/test_cloud_analyze.py",  # 26
    "integration/test_storage_servers.py",  # 25, most of it waiting on the storage servers
    "integration/test_convert.py",  # 23
    "e2e/test_quiet_progress.py",  # 22
    "integration/test_versioned.py",  # 20
    "e2e/test_version_leases_gcs.py",  # 20
    "integration/test_analyze_pipeline.py",  # 19
    "e2e/test_reader_vanishing_buckets.py",  # 18
    # unit/test_reader.py's 33 s split by its parts' times alone (22 s and 17.5 s), not yet measured
    # in a whole run:
    "e2e/test_reader_mirrored_shapes.py",  # ~18
    "unit/test_reader.py",  # ~15
    "unit/test_fuzz.py",  # 14 in CI (its budget: 20,000 cases or 40 s), 6 in the unit tier
    "e2e/test_startup.py",  # 14 in unit/; more tests since, not yet measured in a whole run
    "integration/test_reader_s3.py",  # 14
    "integration/test_incremental_stats.py",  # 12
    "e2e/test_layers.py",  # 9 in unit/ with the pure layer checks; not yet measured alone
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


def _tier(item, name: str) -> str:
    """The tier of the test's folder; e2e for a test in tests/integration marked so."""
    tier = _folder_tier(name)
    if tier != "unit" and item.get_closest_marker("e2e") is not None:
        return "e2e"
    return tier


def _not_a_unit_test(item) -> list[str]:
    """Why a test in tests/unit belongs to another tier: its marker, or the storage-server
    fixtures (tests/servers.py) it uses, directly or through other fixtures."""
    why = [f"marked {m}" for m in ("integration", "e2e") if item.get_closest_marker(m)]
    definitions = getattr(item, "_fixtureinfo", None)
    for fixture, defs in getattr(definitions, "name2fixturedefs", {}).items():
        if defs and getattr(defs[-1].func, "__module__", None) in pytest_plugins:
            why.append(f"uses the server fixture {fixture!r}")
    return why


def _name(path) -> str:
    """A test file's path under tests/ ("unit/test_x.py"); the whole path for one elsewhere."""
    path = Path(str(path)).resolve()
    return path.relative_to(_TESTS_DIR).as_posix() if _TESTS_DIR in path.parents else str(path)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A test module (or class) in tests/unit with a test of another tier fails to collect."""
    report = yield
    name = _name(collector.path)
    if (
        report.passed
        and isinstance(collector, pytest.Module | pytest.Class)
        and _folder_tier(name) == "unit"
    ):
        misplaced = [
            f"  {item.name}: {', '.join(why)}"
            for item in report.result
            if isinstance(item, pytest.Function) and (why := _not_a_unit_test(item))
        ]
        if misplaced:
            report.outcome = "failed"
            report.longrepr = "\n".join(
                ["tests/unit holds only unit tests; move these to tests/integration or tests/e2e:"]
                + misplaced
            )
    return report


def pytest_collection_modifyitems(config, items):
    by_file: dict[str, list] = {}
    for item in items:
        name = _name(item.path)
        tier = _tier(item, name)
        if item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
        by_file.setdefault(name, []).append(item)
    # Stable: the same order in every xdist worker (they must collect identically).
    order = sorted(by_file, key=lambda name: _file_rank(name, len(by_file[name])))
    items[:] = [item for name in order for item in by_file[name]]
