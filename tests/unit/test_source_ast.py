"""tests/source_ast.py: a parse beside a thread that parses too, under the collector's finalizers."""

from __future__ import annotations

import ast
import sys
import threading
import time
import traceback

from tests import source_ast
from tests.runs import ROOT

_SOURCE = (ROOT / "core" / "leases.py").read_text()


class _Finalized:
    def __del__(self):
        sum(range(50))  # Python code the collector runs in the middle of a parse


def _parses_beside_a_thread(parse, seconds: float) -> tuple[int, int]:
    """(parses, SystemErrors) of `parse(_SOURCE)` while another thread formats tracebacks."""
    stop = threading.Event()

    def other():
        while not stop.is_set():
            try:
                1 / 0  # noqa: B018 - a traceback whose caret anchors 3.11 parses
            except ZeroDivisionError:
                try:
                    traceback.format_exc()
                except SystemError:  # this thread's parse met the other's: not what is checked
                    pass

    thread = threading.Thread(target=other, daemon=True)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread.start()
    done = failed = 0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(20):
                garbage = _Finalized()
                garbage.cycle = garbage
            try:
                parse(_SOURCE)
            except SystemError:
                failed += 1
            done += 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    return done, failed


def test_the_parse_survives_another_threads_parse_where_ast_parse_does_not():
    done, failed = _parses_beside_a_thread(ast.parse, 1.0)
    if sys.version_info[:2] == (3, 11):  # the interpreter this project pins (CPython gh-106905)
        assert failed > 0, f"ast.parse failed none of {done} parses: the check would show nothing"
    done, failed = _parses_beside_a_thread(source_ast.parse, 1.0)
    assert done > 10 and failed == 0, (done, failed)
