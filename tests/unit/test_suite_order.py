"""The suite's own rules (tests/conftest.py): a test's tier is its folder, tests/unit holds only
unit tests, and the slowest files of the last measured whole run (tests/durations.json) go to
xdist workers first."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tests import conftest

TESTS = Path(conftest.__file__).resolve().parent


def test_every_measured_file_exists():
    """tests/durations.json names only test files there are (a renamed or removed file would
    silently lose its place at the front), and has the slowest files of a whole run."""
    seconds = conftest._measured()
    assert [name for name in seconds if not (TESTS / name).is_file()] == []
    assert len(conftest._SLOWEST_FIRST) >= 10
    assert all(seconds[n] >= conftest._FIRST_S for n in conftest._SLOWEST_FIRST)
    times = [seconds[n] for n in conftest._SLOWEST_FIRST]
    assert times == sorted(times, reverse=True)


def test_named_files_come_first_in_their_order_then_by_tier_then_the_most_tests_first():
    first, second = conftest._SLOWEST_FIRST[:2]
    names = ["unit/a.py", second, "e2e/x.py", "unit/b.py", first, "integration/y.py", "unit/c.py"]
    counts = {"unit/a.py": 3, second: 1, "e2e/x.py": 2, "unit/b.py": 9, first: 2,
              "integration/y.py": 1, "unit/c.py": 3}  # fmt: skip
    order = sorted(names, key=lambda n: conftest._file_rank(n, counts[n]))
    assert order == [first, second, "e2e/x.py", "integration/y.py", "unit/b.py", "unit/a.py",
                     "unit/c.py"]  # fmt: skip


def _report(nodeid: str, duration: float) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, duration=duration)


def test_recorded_seconds_are_each_files_setup_call_and_teardown_summed(tmp_path):
    """The recorder (--record-durations) sums each file's reports, keeps the entries of
    files that did not run, drops those of files that are gone, and the order reads them back."""
    path = tmp_path / "durations.json"
    stale = {"e2e/test_dask.py": 50.0, "unit/test_fuzz.py": 3.0, "e2e/test_gone.py": 99.0}
    path.write_text(json.dumps({"seconds": stale}))
    recorder = conftest._DurationRecorder(path, TESTS.parent)
    for nodeid, duration in [
        ("tests/unit/test_fuzz.py::test_a", 0.5),
        ("tests/unit/test_fuzz.py::test_a", 10.0),
        ("tests/unit/test_fuzz.py::test_b[x]", 1.25),
        ("tests/e2e/test_cli.py::test_c", 7.0),
    ]:  # setup, call, another test's call
        recorder.pytest_runtest_logreport(_report(nodeid, duration))
    recorder.pytest_sessionfinish(None)
    written = json.loads(path.read_text())
    assert written["seconds"] == {"e2e/test_dask.py": 50.0, "unit/test_fuzz.py": 11.8,
                                  "e2e/test_cli.py": 7.0}  # fmt: skip
    assert list(written["seconds"]) == ["e2e/test_dask.py", "unit/test_fuzz.py", "e2e/test_cli.py"]
    assert conftest._measured(path) == written["seconds"]


def test_a_missing_or_broken_durations_file_orders_by_tier_alone(tmp_path):
    assert conftest._measured(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("{")
    assert conftest._measured(tmp_path / "bad.json") == {}


class _Item:
    """What the tier rules read of a collected test: its markers and its fixtures' definitions."""

    def __init__(self, *markers: str, fixtures: dict[str, str] | None = None):
        self.markers = markers
        defs = {
            name: [SimpleNamespace(func=SimpleNamespace(__module__=module))]
            for name, module in (fixtures or {}).items()
        }
        self._fixtureinfo = SimpleNamespace(name2fixturedefs=defs)

    def get_closest_marker(self, name: str):
        return SimpleNamespace(name=name) if name in self.markers else None


def test_a_tests_tier_is_its_folder_and_e2e_only_by_marker_outside_tests_unit():
    assert conftest._tier(_Item(), "unit/test_x.py") == "unit"
    assert conftest._tier(_Item(), "integration/test_x.py") == "integration"
    assert conftest._tier(_Item("e2e"), "integration/test_x.py") == "e2e"
    assert conftest._tier(_Item(), "e2e/test_x.py") == "e2e"


def test_tests_unit_refuses_other_tiers_markers_and_the_storage_servers():
    assert conftest._not_a_unit_test(_Item()) == []
    assert conftest._not_a_unit_test(_Item(fixtures={"tmp_path": "_pytest.tmpdir"})) == []
    # A parameter that shares a server fixture's name (`store`) is not a server.
    assert conftest._not_a_unit_test(_Item(fixtures={"store": "_pytest.fixtures"})) == []
    assert conftest._not_a_unit_test(_Item("integration")) == ["marked integration"]
    assert conftest._not_a_unit_test(_Item("e2e")) == ["marked e2e"]
    assert conftest._not_a_unit_test(_Item(fixtures={"gcs": "tests.servers"})) == [
        "uses the server fixture 'gcs'"
    ]
