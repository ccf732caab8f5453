"""`ast.parse` for the tests that read the project's source, safe beside other threads.

CPython 3.11 keeps the AST constructor's recursion counter in interpreter-wide state and resets
it at every `ast.parse` (Python-ast.c, `PyAST_mod2obj`; CPython gh-106905). If the collector runs
a finalizer while a parse builds its tree, the GIL can pass to another thread, and when that
thread parses too (3.11's traceback module parses source lines to place its `^^^` markers, so
any thread formatting a traceback does), the first parse fails with "SystemError: AST
constructor recursion depth mismatch (before=147, after=14)": seen once in a whole-suite run
(tests/unit/test_layers.py, 2026-12-04), and in 1,392 of 1,452 parses of a stress script (a
thread formatting tracebacks, cyclic garbage with finalizers). With the collector paused for the
parse, no Python code runs inside it: 0 of 5,298 in the same script. tests/unit/test_source_ast.py
makes it happen on one thread: a finalizer that parses, run by a collection inside the parse.
"""

from __future__ import annotations

import ast
import gc

__all__ = ["parse"]


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` with the cyclic collector paused while it runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if enabled:
            gc.enable()
