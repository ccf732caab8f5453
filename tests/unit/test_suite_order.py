"""The suite's own scheduling (tests/conftest.py): the slowest files go to xdist workers first."""

from __future__ import annotations

from pathlib import Path

from tests import conftest

TESTS = Path(conftest.__file__).resolve().parent


def test_every_slowest_first_file_exists():
    """A renamed or removed file would silently lose its place at the front."""
    missing = [name for name in conftest._SLOWEST_FIRST if not (TESTS / name).is_file()]
    assert missing == []


def test_named_files_come_first_in_their_order_then_the_most_tests_first():
    first, second = conftest._SLOWEST_FIRST[:2]
    names = ["unit/a.py", second, "unit/b.py", first, "unit/c.py"]
    counts = {"unit/a.py": 3, second: 1, "unit/b.py": 9, first: 2, "unit/c.py": 3}
    order = sorted(names, key=lambda n: conftest._file_rank(n, counts[n]))
    assert order == [first, second, "unit/b.py", "unit/a.py", "unit/c.py"]
