"""The test files by time, from a whole run's JUnit XML, for tests/conftest.py's `_SLOWEST_FIRST`.

    ./run_tests.sh -q --junitxml=/tmp/suite.xml
    python bench/ablations/suite_files.py /tmp/suite.xml [--min_s 9] [--workers 3]

Prints each file's seconds (its tests' times summed: one file runs on one xdist worker), longest
first, with its place in `_SLOWEST_FIRST`; the entries to paste for the files of at least
--min_s seconds; and when each of --workers workers would end with the suite's present order
(`_file_rank`) and with those files longest first, each next file going to the first free worker,
as `--dist loadfile` hands them out. Times under load move together: the order, not the seconds,
is what carries over to another machine.
"""

from __future__ import annotations

import argparse
import collections
import heapq
import os
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def file_seconds(junit_xml: str) -> tuple[dict[str, float], dict[str, int]]:
    """{"e2e/test_dask.py": seconds}, {name: number of tests} from pytest's JUnit XML."""
    seconds: dict[str, float] = collections.defaultdict(float)
    tests: collections.Counter = collections.Counter()
    for case in ET.parse(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = next((i for i, p in enumerate(parts) if p.startswith("test_")), None)
        if module is None or parts[0] != "tests":
            continue
        name = "/".join(parts[1 : module + 1]) + ".py"
        seconds[name] += float(case.get("time", 0.0))
        tests[name] += 1
    return dict(seconds), dict(tests)


def ends(order: list[str], seconds: dict[str, float], workers: int) -> list[float]:
    """When each worker ends if each next file goes to the first free one."""
    free = [(0.0, w) for w in range(workers)]
    for name in order:
        t, w = heapq.heappop(free)
        heapq.heappush(free, (t + seconds[name], w))
    return sorted(t for t, _ in free)


def main(argv: list[str] | None = None) -> int:
    from tests import conftest

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("junit_xml")
    p.add_argument("--min_s", type=float, default=9.0)
    p.add_argument("--workers", type=int, default=3)
    a = p.parse_args(argv)
    seconds, tests = file_seconds(a.junit_xml)
    if not seconds:
        print(f"no tests/ test cases in {a.junit_xml}", file=sys.stderr)
        return 2
    longest = sorted(seconds, key=lambda n: -seconds[n])
    named = conftest._SLOWEST_FIRST
    for n in longest:
        place = f"#{named.index(n) + 1}" if n in named else "-"
        print(f"{seconds[n]:7.1f} s {tests[n]:4d} tests  {place:>4}  {n}")
    print("\n_SLOWEST_FIRST = (")
    for n in longest:
        if seconds[n] >= a.min_s:
            print(f'    "{n}",  # {seconds[n]:.0f}')
    print(")\n")
    present = sorted(seconds, key=lambda n: conftest._file_rank(n, tests[n]))
    proposed = [n for n in longest if seconds[n] >= a.min_s]
    proposed += sorted(
        (n for n in seconds if n not in proposed),
        key=lambda n: conftest._file_rank(n, tests[n])[1:],
    )
    for label, order in (("present order", present), ("proposed order", proposed)):
        e = ends(order, seconds, a.workers)
        print(f"{label}: workers end at {', '.join(f'{t:.1f}' for t in e)} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
