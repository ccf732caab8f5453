"""tests/source_ast.py: a parse during which the collector runs a finalizer that parses too."""

from __future__ import annotations

import ast
import gc
import sys

from tests import source_ast
from tests.runs import ROOT

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


def test_the_parse_survives_a_parse_inside_it_where_ast_parse_does_not():
    if sys.version_info[:2] == (3, 11) and gc.isenabled():  # the interpreter this project pins
        failed = _parse_while_finalizers_parse(ast.parse)
        assert "recursion depth mismatch" in failed  # CPython gh-106905: the check can fail
    for _ in range(3):
        assert _parse_while_finalizers_parse(source_ast.parse) == "parsed"
