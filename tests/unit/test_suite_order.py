"""The suite's own scheduling (tests/conftest.py): the slowest files go to xdist workers first."""

from __future__ import annotations

from pathlib import Path

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
