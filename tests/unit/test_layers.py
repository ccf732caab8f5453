"""The layer rule (docs/DESIGN.md "Layers"), checked on the source: who may import whom.

Top-level packages, each importing only those below it (so no two import each other):

    pipeline/             the command (cli, launcher, options, builder, verify, ...) and its rooms:
      reader/             the training side: core only (plus TensorFlow), never Beam
      report/             summary, report.html, the TF-free scan: the reader and the core
      versions/           the no-change rerun and `imgrec versions`: core, stages, options, report
      runners/            Dask and Dataflow: core, stages, builder, options
      launch/             the launch wing: how processes start, the plan, the local runner, the
                          forks, the Beam patches; the only room that changes global state
    transforms/           the stages (PTransforms): core and transforms, never pipeline/
      images/             per-file image logic: core and transforms.images only, no Beam
      annotations/        annotation files' readers (COCO, VOC, YOLO): core and itself, no Beam
    core/                 schema, storage, rejects, versions' format, the reader's helpers: itself

Every import counts, also those inside functions (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
import os

import pytest

from pipeline.launch import startup
from tests import source_ast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("core", "pipeline", "transforms")

# A module past this many lines does more than one job; split it by job (as transforms/images/
# splits the old image_check.py).
MAX_LINES = 600
# Known exceptions, each with the issue that removes it. The test fails once one is under the
# limit again, so the entry is deleted rather than left to cover a new growth.
LONG_MODULES: dict[str, str] = {}


def _modules() -> list[str]:
    """Repository-relative paths of every production module."""
    found = []
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            found += [
                os.path.relpath(os.path.join(folder, f), ROOT).replace(os.sep, "/")
                for f in files
                if f.endswith(".py")
            ]
    return sorted(found)


def _imports(path: str) -> set[str]:
    """Every module `path` imports (absolute dotted names; `from a import b` counts a and a.b)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return _parse_imports(f.read(), path.rsplit("/", 1)[0].replace("/", "."))


def _parse_imports(source: str, package: str) -> set[str]:
    """The imports of `source`, a module of `package`, wherever they stand (functions too)."""
    names = set()
    for node in ast.walk(source_ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _ours(names: set[str]) -> set[str]:
    """The imgrec modules among `names` (a `from pipeline import x` also names `pipeline`)."""
    return {n for n in names if n.split(".")[0] in PACKAGES and n not in PACKAGES}


def _within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _violations(paths: list[str], allowed: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for path in paths:
        bad = sorted(n for n in _ours(_imports(path)) if not _within(n, *allowed))
        if bad:
            out[path] = bad
    return out


MODULES = _modules()
# Who may import whom: a room (its modules' dotted prefix) -> the rooms it may import. A room of
# pipeline/ is matched before the command (pipeline's own modules), transforms.images before
# transforms. Every production module is in exactly one room (test_every_module_has_a_room).
ROOMS: dict[str, tuple[str, ...]] = {
    "core": ("core",),
    "transforms.images": ("core", "transforms.images"),
    "transforms.annotations": ("core", "transforms.annotations"),
    "transforms.tiles": ("core", "transforms"),  # chips (--tile): its stage, reads and records
    "transforms": ("core", "transforms"),
    "pipeline.reader": ("core", "pipeline.reader"),
    "pipeline.report": ("core", "pipeline.reader", "pipeline.report"),
    "pipeline.versions": (
        "core",
        "transforms",
        "pipeline.launch.plan",
        "pipeline.options",
        "pipeline.report",
        "pipeline.versions",
    ),  # fmt: skip
    "pipeline.runners": (
        "core",
        "transforms",
        "pipeline.builder",
        "pipeline.options",
        "pipeline.runners",
    ),  # fmt: skip
    "pipeline.launch": ("core", "transforms", "pipeline"),
    "pipeline": ("core", "transforms", "pipeline"),  # the command: on top of all of it
}
# The launch wing's faces: what the command (cli, launcher, builder) and the reruns are handed.
# Its start-up, patches and forks are its own: no module outside it imports them.
LAUNCH_FACES = (
    "pipeline.launch.plan",
    "pipeline.launch.services",
    "pipeline.launch.choose",
)
# The top-level packages from the bottom up: each imports only those before it.
ORDER = ("core", "transforms", "pipeline")


def _module(path: str) -> str:
    return path[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def _room(path: str) -> str:
    """The room of a module (the longest matching prefix of ROOMS)."""
    name = _module(path)
    return max((r for r in ROOMS if _within(name, r)), key=len, default="")


def _in(room: str) -> list[str]:
    return [p for p in MODULES if _room(p) == room]


CORE = _in("core")
IMAGES = _in("transforms.images")
ANNOTATIONS = _in("transforms.annotations")
TRANSFORMS = _in("transforms") + IMAGES + ANNOTATIONS + _in("transforms.tiles")
READER = _in("pipeline.reader")


def test_the_rooms_exist():
    # Guards the rules below: a rule over no files would pass whatever the imports.
    assert "core/schema.py" in CORE and "core/rejects.py" in CORE
    assert "transforms/images/check.py" in IMAGES and "transforms/write_shards.py" in TRANSFORMS
    assert "transforms/annotations/coco.py" in ANNOTATIONS
    assert {"pipeline/reader/dataset.py", "pipeline/reader/files.py"} <= set(READER)
    assert "pipeline/report/page.py" in _in("pipeline.report")
    assert "pipeline/versions/fast_rerun.py" in _in("pipeline.versions")
    assert "pipeline/runners/dask_runner.py" in _in("pipeline.runners")
    assert {"pipeline/launch/startup.py", "pipeline/launch/patches.py"} <= set(
        _in("pipeline.launch")
    )
    assert "pipeline/launcher.py" in _in("pipeline")


def test_every_module_has_a_room():
    # A new folder of pipeline/ is a new room: give it its rule in ROOMS.
    assert [p for p in MODULES if not _room(p)] == []
    folders = {os.path.dirname(p).replace("/", ".") for p in MODULES}
    assert sorted(folders - set(ROOMS)) == []


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_imports_only_what_its_rule_allows(room):
    assert _violations(_in(room), ROOMS[room]) == {}


def test_no_two_top_level_packages_import_each_other():
    """core <- transforms <- pipeline: a package imports only those below it, never one above."""
    edges = {
        (path.split("/")[0], name.split(".")[0])
        for path in MODULES
        for name in _ours(_imports(path))
        if path.split("/")[0] != name.split(".")[0]
    }
    upward = sorted((a, b) for a, b in edges if ORDER.index(b) > ORDER.index(a))
    assert upward == []
    assert sorted((a, b) for a, b in edges if (b, a) in edges) == []
    assert ("pipeline", "transforms") in edges and ("transforms", "core") in edges


def test_the_reader_and_the_per_file_image_logic_never_import_beam():
    beam = {
        p: "apache_beam"
        for p in READER + IMAGES + ANNOTATIONS
        if any(_within(n, "apache_beam") for n in _imports(p))
    }
    assert beam == {}


def test_the_checker_sees_deferred_from_and_relative_imports():
    source = (
        "import json\n"
        "def f():\n"
        "    from pipeline import launcher\n"
        "    import transforms.keys\n"
        "    from ..options import ConvertConfig\n"
        "    from core import schema\n"
    )
    names = _ours(_parse_imports(source, "pipeline.reader"))
    assert names == {
        "pipeline.launcher",
        "transforms.keys",
        "pipeline.options",
        "pipeline.options.ConvertConfig",
        "core.schema",
    }
    assert _violations(["pipeline/reader/files.py"], ("core", "pipeline.reader")) == {}
    # A room's rule catches an import across rooms: the report's page imports the reader.
    assert (
        "pipeline.reader.dataset"
        in _violations(["pipeline/report/page.py"], ("core",))["pipeline/report/page.py"]
    )


def test_private_beam_names_are_imported_by_the_launch_and_dask_runner_only():
    found = {}
    for path in MODULES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = source_ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _within(node.module or "", "apache_beam"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    found.setdefault(path, []).extend(private)
    assert found == {"pipeline/runners/dask_runner.py": ["_OutputHandler"]}


def test_only_the_launch_wing_imports_its_start_up_patches_and_forks():
    # pipeline/__main__.py is the program's entry point, as setup.py's console script is.
    outside = [p for p in MODULES if _room(p) != "pipeline.launch" and p != "pipeline/__main__.py"]
    found = {}
    for path in outside:
        wing = {n for n in _ours(_imports(path)) if _within(n, "pipeline.launch")}
        inner = sorted(n for n in wing if n != "pipeline.launch" and not _within(n, *LAUNCH_FACES))
        if inner:
            found[path] = inner
    assert found == {}


def test_the_builder_imports_nothing_of_the_launch_wing():
    """It is handed the launch's services (pipeline/launch/services.py) and starts nothing."""
    wing = [n for n in _ours(_imports("pipeline/builder.py")) if _within(n, "pipeline.launch")]
    assert wing == []


def test_only_the_switchboard_reads_imgrecs_environment_variables():
    found = []
    for path in MODULES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = source_ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("IMGREC_") and node.value.isupper():
                    found.append(path)
    assert sorted(set(found)) == ["pipeline/launch/switches.py"]


def test_only_the_launch_wing_reads_sys_argv():
    found = []
    for path in MODULES:
        if _room(path) == "pipeline.launch":
            continue
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = source_ast.parse(f.read(), path)
        found += [
            f"{path}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "argv"
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
        ]
    assert found == []


@pytest.mark.parametrize("path", MODULES)
def test_no_module_is_over_the_line_limit(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    if path in LONG_MODULES:
        assert lines > MAX_LINES, f"{path}: {lines} lines; drop it from LONG_MODULES"
    else:
        assert lines <= MAX_LINES, f"{path}: {lines} lines > {MAX_LINES}; split it by job"


@pytest.mark.parametrize("user_value", ["0", "1", "true"])
def test_a_keras_choice_the_user_made_is_kept(monkeypatch, user_value):
    monkeypatch.setenv(startup.KERAS_ENV, user_value)
    startup.use_keras_2()
    assert os.environ[startup.KERAS_ENV] == user_value
