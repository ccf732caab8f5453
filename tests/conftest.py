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
import json
import os
import time
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


def pytest_addoption(parser):
    parser.addoption(
        RECORD_OPTION,
        action="store_true",
        help="write each test file's wall seconds into tests/durations.json (a whole run)",
    )


def pytest_configure(config):
    for name, what in (
        ("unit", "tests/unit: no conversion, in process (the inner loop: -m unit)"),
        ("integration", "tests/integration: whole conversions in this process"),
        ("e2e", "end to end: the CLI in fresh processes, storage servers mid-outage, Dask, "
         "TensorFlow clusters, packaging; deselect with -m 'not e2e'"),
    ):  # fmt: skip
        config.addinivalue_line("markers", f"{name}: {what}")
    # On xdist's controller, or in a run without xdist: not in its workers (no `workerinput`).
    if config.getoption(RECORD_OPTION) and not hasattr(config, "workerinput"):
        recorder = _DurationRecorder(DURATIONS, config.rootpath)
        config.pluginmanager.register(recorder, "imgrec-durations")


# The order of the test files (each file's tests in sequence on one xdist worker, --dist loadfile;
# run_tests.sh turns off xdist's own order): the files of at least _FIRST_S seconds in the last
# measured whole run (tests/durations.json), longest first, then the others by tier (e2e,
# integration, unit: a fresh process per test before many small in-process ones), most tests
# first within a tier. So a run ends on the unit tier's small files, which the workers share out
# evenly, and a new e2e file, not measured yet, does not come last. The seconds are measured, not
# kept by hand: `./run_tests.sh -q --record-durations` (a whole run, as CI runs it)
# writes each file's wall seconds (its tests' setup, call and teardown summed) into
# tests/durations.json; commit it when files were added or their times moved.
DURATIONS = _TESTS_DIR / "durations.json"
RECORD_OPTION = "--record-durations"
_FIRST_S = 5.0


def _measured(path: Path = DURATIONS) -> dict[str, float]:
    """{"e2e/test_dask.py": seconds} of the last recorded whole run; {} when there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            return {str(k): float(v) for k, v in json.load(f)["seconds"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


_SECONDS = _measured()
# The files that run first, longest first.
_SLOWEST_FIRST = tuple(
    sorted((n for n, s in _SECONDS.items() if s >= _FIRST_S), key=lambda n: (-_SECONDS[n], n))
)


def _file_rank(name: str, num_tests: int) -> tuple[int, int, int]:
    """The measured slow files in their order, then the others by tier, most tests first."""
    first = _SLOWEST_FIRST.index(name) if name in _SLOWEST_FIRST else len(_SLOWEST_FIRST)
    return first, TIERS[::-1].index(_folder_tier(name)), -num_tests


class _DurationRecorder:
    """Sums each test file's setup, call and teardown seconds as the reports come in (on xdist's
    controller: the workers' reports) and writes them to DURATIONS at the end of the session,
    keeping the entries of files that did not run (a partial run updates what it ran)."""

    def __init__(self, path: Path, rootpath: Path):
        self.path = path
        self.rootpath = rootpath
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        name = _name(self.rootpath / report.nodeid.partition("::")[0])
        if not Path(name).is_absolute():
            self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        if not self.seconds:
            return
        seconds = {**_measured(self.path), **self.seconds}
        seconds = {n: round(s, 1) for n, s in seconds.items() if (_TESTS_DIR / n).is_file()}
        body = {
            "about": "wall seconds per test file in a whole run (tests/conftest.py); "
            f"refresh: ./run_tests.sh -q {RECORD_OPTION}",
            "recorded": time.strftime("%Y-%m-%d %H:%M", time.localtime()),
            "cpus": os.cpu_count(),
            "seconds": dict(sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)


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
