"""Imports stand at the top of their module (docs/DESIGN.md "Deferred imports"), checked on the
source: an import inside a function is a heavy or optional package of DEFERRED, Beam in a module
that must load without it (BEAM_FREE), or a named exception (EXCEPTIONS).

An import of imgrec's own module inside a function counts as what that module imports at its top
(and what those modules import, on down): `from core import storage` is Beam's import.
"""

from __future__ import annotations

import ast
import functools
import os

from tests import source_ast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("core", "pipeline", "transforms", "templates")

# The one list of what a function may import: a package (or a module of one, with all below it)
# and why its import waits for the function that needs it. Times: `python -X importtime` with
# numpy loaded, 2026-12-07; under ~20 ms is not heavy (Pillow, yaml: at the top).
DEFERRED: dict[str, str] = {
    "tensorflow": "~2 s, ~10^6 objects: --help, the read commands and the no-change rerun run "
    "without it; the program imports it at one point of its start-up (launch/services.py)",
    "tensorflow_transform": "TFT, ~0.8 s on top of TensorFlow: only where a run analyses",
    "tfx_bsl": "TFT's record-batch adapters, imported with TFT: only where a run analyses",
    "tensorflow_metadata": "TFT's schema protos (~12 ms), imported with TFT and tfx_bsl",
    "keras": "Keras 3 (~2 s with TensorFlow): only the reader's Keras callbacks",
    "h5py": "~65 ms: only a Keras backup's weights read back (pipeline/reader/keras_resume.py)",
    "rich": "~30 ms: only the live progress line on a terminal (pipeline/progress.py)",
    # One image format or mode each: a run without such files does not need it.
    "pydicom": "DICOM files only (transforms/images/dicom.py); ~0.12 s",
    "tifffile": "TIFF files only (transforms/images/tiff.py)",
    "simplejpeg": "--jpeg_verify strict only; may be absent (limits.py names the install)",
    # One runner or one store each.
    "dask": "--runner DaskRunner only; may be absent (register_dask_options says so); ~0.1 s",
    "distributed": "--runner DaskRunner only (dask.distributed); may be absent; ~0.25 s",
    "apache_beam.runners.dask": "Beam's Dask runner, which imports dask: Dask runs only",
    "boto3": "s3:// only: the reader's own S3 store (core/stores.py, Beam-free); ~0.1 s",
    "botocore": "s3:// only: boto3's configuration and errors; ~65 ms",
    "requests": "gs:// only: the shared GCS client's connections (launch/patches.py); ~55 ms",
}

# apache_beam (~0.9 s; ~1.6 s with its filesystems' clients) may be imported inside a function
# only in the modules that must load without it: these, and every module they import at their top.
BEAM_FREE: dict[str, str] = {
    "pipeline.reader": "the training side: training jobs have no Beam",
    "transforms.images": "the per-file image logic: decoder processes and DoFn pickles stay light",
    "pipeline.cli": "every command's entry: the read commands and the no-change rerun",
    "pipeline.versions.fast_rerun": "the no-change rerun: made without Beam or TensorFlow",
    "pipeline.launch.program": "the program reads its plan and starts before Beam's import",
    "pipeline.launch.services": "the start-up's end, shared by the read commands and convert",
    "templates.flex.main": "the Flex Template launcher imports the job inside its start-up",
}

# Named exceptions, each `path:function` with why its import waits.
EXCEPTIONS: dict[str, str] = {
    "core/shard_cache.py:_sleep": (
        "TensorFlow's private testing.sleep: a TensorFlow without it fails the shard cache's "
        "wait for a download, not the reader's import"
    ),
    "pipeline/runners/dask_runner.py:_dofn_output_handler": (
        "Beam's private _OutputHandler: a Beam without it fails Dask runs, not the launcher's import"
    ),
}


def _modules() -> dict[str, str]:
    """{dotted name: repository-relative path} of every production module."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.relpath(os.path.join(folder, f), ROOT).replace(os.sep, "/")
                    found[path[: -len(".py")].replace("/", ".").removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@functools.cache
def _tree(path: str) -> ast.Module:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return source_ast.parse(f.read(), path)


def _names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement loads (`from a import b`: a.b where b is one of ours)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolve against this module's package
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    ours = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return ours if len(ours) == len(node.names) else [base, *ours]


def _is_main_block(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`"""
    return isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"') == (
        '__name__ == "__main__"'
    )


def _split(tree: ast.Module, package: str):
    """(module-level import names, [(line, function, name)] of the imports inside functions)."""
    top, inner = set(), []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if _is_main_block(child):
                continue  # a script's own start-up: it runs at no import
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
            elif isinstance(child, ast.Import | ast.ImportFrom):
                for name in _names(child, package):
                    if function:
                        inner.append((child.lineno, function, name))
                    else:
                        top.add(name)
            else:
                visit(child, function)

    visit(tree, "")
    return top, inner


def _package(module: str) -> str:
    return module if MODULES[module].endswith("__init__.py") else module.rpartition(".")[0]


def _ours(name: str) -> str | None:
    """The module of ours `name` loads (its longest prefix that is one), if any."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in MODULES:
            return ".".join(parts[:end])
    return None


def _top(module: str) -> set[str]:
    return _split(_tree(MODULES[module]), _package(module))[0]


def _closure(modules) -> set[str]:
    """`modules` and every module of ours they load at their import: the modules they import at
    their top, their parent packages, and so on down."""
    seen, todo = set(), list(modules)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            parts = module.split(".")
            todo += [".".join(parts[:end]) for end in range(1, len(parts))] & MODULES.keys()
            todo += [m for m in map(_ours, _top(module)) if m]
    return seen


@functools.cache
def _loads(module: str) -> frozenset[str]:
    """Every other package's module `module` loads at its import: the top-level imports of it and
    of every module of ours it loads."""
    return frozenset(n for m in _closure([module]) for n in _top(m) if _ours(n) is None)


def _beam_free() -> set[str]:
    """BEAM_FREE's modules and every module of ours they load at their import."""
    return _closure(m for m in MODULES if any(_within(m, p) for p in BEAM_FREE))


def _deferred_for(name: str, beam_free: bool) -> str | None:
    """The entry that lets a function import the other package's module `name`, if any."""
    listed = [p for p in DEFERRED if _within(name, p)]
    if beam_free and _within(name, "apache_beam"):
        listed.append("apache_beam")
    return max(listed, key=len, default=None)


def _violations(module: str, tree: ast.Module, beam_free: set[str]) -> list[str]:
    """`path:line function: import name` for each import inside a function of `module` (its
    source parsed: `tree`) that should stand at its top."""
    path = MODULES.get(module, module)
    top, inner = _split(tree, _package(module))
    parents = [".".join(module.split(".")[:end]) for end in range(1, module.count(".") + 1)]
    ours = _closure([m for m in [*map(_ours, top), *parents] if m in MODULES and m != module])
    # What the module loads at its import anyway: a function has no reason to wait for it.
    loaded = {n for n in top if _ours(n) is None} | {n for m in ours for n in _loads(m)}
    out = []
    for line, function, name in inner:
        if f"{path}:{function}" in EXCEPTIONS:
            continue
        mine = _ours(name)
        entries = {
            _deferred_for(n, module in beam_free) for n in (_loads(mine) if mine else [name])
        }
        if not any(e and not any(_within(n, e) for n in loaded) for e in entries):
            out.append(f"{path}:{line} {function}: import {name}")
    return out


def test_every_import_inside_a_function_is_of_a_listed_package():
    beam_free = _beam_free()
    found = [v for m in sorted(MODULES) for v in _violations(m, _tree(MODULES[m]), beam_free)]
    assert found == [], "move these to the top of their module, or list why they wait:\n" + (
        "\n".join(found)
    )


def test_the_beam_free_modules_import_no_beam_at_their_top():
    assert [m for m in BEAM_FREE if m not in MODULES] == []
    beam_free = _beam_free()
    assert {"pipeline.reader.dataset", "core.versions", "pipeline.launch.patches"} <= beam_free
    beam = sorted(m for m in beam_free if any(_within(n, "apache_beam") for n in _loads(m)))
    assert beam == []


def test_every_listed_package_is_imported_inside_a_function_somewhere():
    """A package no function imports any more goes from DEFERRED (no entry covers a new one)."""
    used = {n for m in MODULES for _, _, n in _split(_tree(MODULES[m]), _package(m))[1]}
    assert sorted(p for p in DEFERRED if not any(_within(n, p) for n in used)) == []
    assert all(why.strip() for why in (*DEFERRED.values(), *BEAM_FREE.values()))
    for where in EXCEPTIONS:
        path, _, function = where.partition(":")
        assert function in {f for _, f, _ in _split(_tree(path), "")[1]}, where


def test_the_checker_catches_an_import_inside_a_function():
    source = (
        "import json\n"
        "def f():\n"
        "    import tensorflow as tf\n"
        "    import shutil\n"
        "    from core import schema\n"
        "    from core import storage\n"
        "    def inner():\n"
        "        from apache_beam.io.filesystems import FileSystems\n"
        "class C:\n"
        "    def g(self):\n"
        "        from .names import local_path\n"
    )
    tree = source_ast.parse(source)
    # core/leases.py loads without Beam: its functions may import Beam and core.storage.
    assert _violations("core.leases", tree, {"core.leases"}) == [
        "core/leases.py:4 f: import shutil",
        "core/leases.py:5 f: import core.schema",
        "core/leases.py:11 g: import core.names",
    ]
    # A module that loads Beam anyway imports it, and core.storage, at its top.
    assert _violations("core.leases", tree, set()) == [
        "core/leases.py:4 f: import shutil",
        "core/leases.py:5 f: import core.schema",
        "core/leases.py:6 f: import core.storage",
        "core/leases.py:8 inner: import apache_beam.io.filesystems",
        "core/leases.py:11 g: import core.names",
    ]


def test_the_checker_sees_what_a_module_loads_anyway():
    source = (
        "def f():\n"
        "    import tensorflow as tf\n"
        "    from core import raw_pixels\n"
        "    import pydicom\n"
    )
    assert _violations("core.leases", source_ast.parse(source), set()) == []
    # A module that imports TensorFlow at its top: so do its functions, and core.raw_pixels
    # (of DEFERRED's packages it imports TensorFlow only) goes to its top too.
    loaded = source_ast.parse("import tensorflow as tf\n" + source)
    assert _violations("core.leases", loaded, set()) == [
        "core/leases.py:3 f: import tensorflow",
        "core/leases.py:4 f: import core.raw_pixels",
    ]
