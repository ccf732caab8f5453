"""The suite's own rules (tests/conftest.py): a test's tier is its folder, tests/unit holds only
unit tests, and the slowest files go to xdist workers first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests import conftest

TESTS = Path(conftest.__file__).resolve().parent


def test_every_slowest_first_file_exists():
    """A renamed or removed file would silently lose its place at the front."""
    missing = [name for name in conftest._SLOWEST_FIRST if not (TESTS / name).is_file()]
    assert missing == []


def test_named_files_come_first_in_their_order_then_by_tier_then_the_most_tests_first():
    first, second = conftest._SLOWEST_FIRST[:2]
    names = ["unit/a.py", second, "e2e/x.py", "unit/b.py", first, "integration/y.py", "unit/c.py"]
    counts = {"unit/a.py": 3, second: 1, "e2e/x.py": 2, "unit/b.py": 9, first: 2,
              "integration/y.py": 1, "unit/c.py": 3}  # fmt: skip
    order = sorted(names, key=lambda n: conftest._file_rank(n, counts[n]))
    assert order == [first, second, "e2e/x.py", "integration/y.py", "unit/b.py", "unit/a.py",
                     "unit/c.py"]  # fmt: skip


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
