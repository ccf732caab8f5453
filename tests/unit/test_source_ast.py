"""tests/source_ast.py: a parse during which the collector runs a finalizer that parses too."""

from __future__ import annotations

import ast
import gc
import sys

from tests import source_ast
from tests.runs import ROOT, script_facts

_SOURCE = (ROOT / "core" / "leases.py").read_text()
_state = {"on": False}


class _ParsesWhenCollected:
    """Cyclic garbage whose finalizer parses (as 3.11's traceback formatting does on another
    thread) and leaves more such garbage for the next collection."""

    def __del__(self):
        if _state["on"]:
            ast.parse("x = 1")
            more = _ParsesWhenCollected()
            more.cycle = more


def _parse_while_finalizers_parse(parse) -> str:
    thresholds = gc.get_threshold()
    _state["on"] = True
    garbage = _ParsesWhenCollected()
    garbage.cycle = garbage
    del garbage
    gc.set_threshold(1)  # a collection at almost every allocation, in the parse's too
    try:
        parse(_SOURCE)
        return "parsed"
    except SystemError as e:
        return str(e)
    finally:
        gc.set_threshold(*thresholds)
        _state["on"] = False
        gc.collect()


def _in_a_fresh_interpreter(parse: str) -> str:
    """`_parse_while_finalizers_parse(parse)` in a fresh interpreter. In a test worker that has
    run hundreds of tests, ast.parse once came through the race unharmed (a whole-suite run,
    2026-12-04 19:40), where a fresh interpreter fails it every time."""
    code = (
        "import ast, json\nfrom tests import source_ast\n"
        "from tests.unit.test_source_ast import _parse_while_finalizers_parse\n"
        f"print(json.dumps({{'result': _parse_while_finalizers_parse({parse})}}))"
    )
    return script_facts(code, timeout=120)["result"]


def test_the_parse_survives_a_parse_inside_it_where_ast_parse_does_not():
    if sys.version_info[:2] == (3, 11):  # the interpreter this project pins
        # CPython gh-106905: the check can fail.
        assert "recursion depth mismatch" in _in_a_fresh_interpreter("ast.parse")
    assert _in_a_fresh_interpreter("source_ast.parse") == "parsed"
    for _ in range(3):  # and here, in a worker that has run other tests
        assert _parse_while_finalizers_parse(source_ast.parse) == "parsed"
