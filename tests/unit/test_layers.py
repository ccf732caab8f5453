"""The layer rule (docs/DESIGN.md "Layers"), checked on the source: who may import whom.

    pipeline/core/        imports nothing from the rest of pipeline/ or from transforms/
    transforms/images/    per-file image logic: pipeline.core and transforms.images only, no Beam
    transforms/           the PTransforms: pipeline.core, transforms (and Beam), never pipeline/
    pipeline/reader.py    the training side: pipeline.core only (plus TensorFlow), never Beam
    pipeline/             the command line, the graph, the other commands: on top of all of it

Every import counts, also those inside functions (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("pipeline", "transforms")

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
    for node in ast.walk(ast.parse(source)):
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
CORE = [p for p in MODULES if p.startswith("pipeline/core/")]
IMAGES = [p for p in MODULES if p.startswith("transforms/images/")]
TRANSFORMS = [p for p in MODULES if p.startswith("transforms/")]


def test_the_layers_exist():
    # Guards the globs below: a rule over no files would pass whatever the imports.
    assert "pipeline/core/schema.py" in CORE and "pipeline/core/rejects.py" in CORE
    assert "transforms/images/check.py" in IMAGES and "transforms/write_shards.py" in TRANSFORMS


def test_core_imports_nothing_above_it():
    assert _violations(CORE, ("pipeline.core",)) == {}


def test_transforms_import_only_the_core_and_transforms():
    assert _violations(TRANSFORMS, ("pipeline.core", "transforms")) == {}


def test_per_file_image_logic_imports_only_the_core_and_itself_and_no_beam():
    assert _violations(IMAGES, ("pipeline.core", "transforms.images")) == {}
    beam = {p: "apache_beam" for p in IMAGES if any(_within(n, "apache_beam") for n in _imports(p))}
    assert beam == {}


# The reader (training side) and the Beam-free modules it is split into.
READER = ("pipeline/reader.py", "pipeline/reader_files.py", "pipeline/reader_decode.py",
          "pipeline/reader_crops.py", "pipeline/reader_shares.py")  # fmt: skip
READER_MODULES = tuple(p[: -len(".py")].replace("/", ".") for p in READER)


def test_the_reader_imports_only_the_core_and_itself_and_never_beam():
    for path in READER:
        names = _imports(path)
        allowed = ("pipeline.core", *READER_MODULES)
        assert sorted(n for n in _ours(names) if not any(_within(n, a) for a in allowed)) == [], (
            path
        )
        assert not any(_within(n, "apache_beam") for n in names), path


def test_the_checker_sees_deferred_from_and_relative_imports():
    source = (
        "import json\n"
        "def f():\n"
        "    from pipeline import launcher\n"
        "    import transforms.keys\n"
        "    from ..options import ConvertConfig\n"
    )
    names = _ours(_parse_imports(source, "pipeline.core"))
    assert names == {
        "pipeline.launcher",
        "transforms.keys",
        "pipeline.options",
        "pipeline.options.ConvertConfig",
    }
    assert _violations(["pipeline/core/schema.py"], ("pipeline.core",)) == {}


def test_private_beam_names_are_imported_in_beam_compat_only():
    found = {}
    for path in MODULES:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _within(node.module or "", "apache_beam"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private:
                    found.setdefault(path, []).extend(private)
    assert found == {"pipeline/core/beam_compat.py": ["_TFRecordUtil", "_BeamArgumentParser",
                                                      "_OutputHandler"]}  # fmt: skip


@pytest.mark.parametrize("path", MODULES)
def test_no_module_is_over_the_line_limit(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    if path in LONG_MODULES:
        assert lines > MAX_LINES, f"{path}: {lines} lines; drop it from LONG_MODULES"
    else:
        assert lines <= MAX_LINES, f"{path}: {lines} lines > {MAX_LINES}; split it by job"


def test_training_side_and_per_file_modules_import_without_beam():
    """In a fresh interpreter: the reader (training jobs have no Beam) with the versioned-root
    resolution it uses, and the per-file image modules (cheap to import where Beam pickles
    DoFns) load without importing apache_beam."""
    code = textwrap.dedent(
        """
        import sys
        import pipeline.reader, pipeline.core.versions
        import transforms.images.check, transforms.images.store_modes
        import transforms.images.decode_worker
        print("BEAM" if "apache_beam" in sys.modules else "NO-BEAM")
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "NO-BEAM"


_KERAS_PROBE = textwrap.dedent(
    """
    import atexit, json, os, sys
    report = sys.argv.pop(1)
    def dump():
        import gc
        loaded = {m: m in sys.modules for m in ("tensorflow", "keras", "tf_keras")}
        loaded["env"] = os.environ.get("TF_USE_LEGACY_KERAS")
        # Keras was left out of TensorFlow's import only: TFT's import and tf.keras load it.
        import tensorflow_transform
        loaded["tft_loads_keras_2"] = "tf_keras" in sys.modules and "keras" not in sys.modules
        import tensorflow as tf
        loaded["tf_keras_works"] = tf.keras.layers.Dense(2)(tf.ones([1, 3])).shape == (1, 2)
        # pipeline/core/startup.py: the collector is back on, the start-up imports frozen.
        loaded["gc"] = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
        # The DirectRunner workers' start-up plugin, imported as a worker would (GC back on).
        frozen = gc.get_freeze_count()
        import pipeline.worker_start
        loaded["worker_start"] = {
            "enabled": gc.isenabled(),
            "frozen_more": gc.get_freeze_count() > frozen,
            "stages": "pipeline.builder" in sys.modules,
        }
        with open(report, "w") as f:
            json.dump(loaded, f)
    atexit.register(dump)  # cli.run() runs exit handlers before os._exit
    sys.argv[0] = "imgrec"
    from pipeline.cli import run
    run()
    """
)


@pytest.mark.e2e  # the real command line in a fresh process (its start-up is under test)
def test_the_command_loads_tensorflow_without_keras_and_without_gc(tmp_path):
    """`imgrec` asks TensorFlow for Keras 2 (TFT's) before TensorFlow is imported, so that no
    later import loads Keras 3 as well (pipeline/cli.py, use_keras_2), and TensorFlow's own
    import loads neither (startup.defer_keras), while TFT's import and `tf.keras` still load
    Keras 2 afterwards; its start-up imports run without the garbage collector, which is back
    on, with those imports frozen, once the command's work starts (pipeline/core/startup.py).
    The workers' start-up plugin does the same."""
    env = {k: v for k, v in os.environ.items() if k != cli.KERAS_ENV}
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", IMGREC_LOG_DIR=str(tmp_path / "logs"))
    report = tmp_path / "modules.json"
    # verify imports TensorFlow first, then finds no dataset: exit 1.
    args = [str(report), "verify", str(tmp_path / "no-dataset")]
    proc = subprocess.run([sys.executable, "-c", _KERAS_PROBE, *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    loaded = json.loads(report.read_text())
    gc_state = loaded.pop("gc")
    assert loaded.pop("worker_start") == {"enabled": True, "frozen_more": True, "stages": True}
    assert loaded == {"tensorflow": True, "keras": False, "tf_keras": False, "env": "1",
                      "tft_loads_keras_2": True, "tf_keras_works": True}  # fmt: skip
    # TensorFlow alone makes ~10^6 objects; a freeze before it was imported would hold few.
    assert gc_state["enabled"] and gc_state["frozen"] > 200_000, gc_state


@pytest.mark.parametrize("user_value", ["0", "1", "true"])
def test_a_keras_choice_the_user_made_is_kept(monkeypatch, user_value):
    monkeypatch.setenv(cli.KERAS_ENV, user_value)
    cli.use_keras_2()
    assert os.environ[cli.KERAS_ENV] == user_value


def test_option_parsing_imports_no_decoder():
    """`imgrec convert --help` and option errors stay fast: options.py pulls in no image decoder
    (Pillow, TensorFlow) and none of the per-file modules that need numpy."""
    code = textwrap.dedent(
        """
        import sys
        import pipeline.options
        heavy = [m for m in ("PIL", "tensorflow", "transforms.images.check",
                             "transforms.images.decode", "transforms.images.store_modes")
                 if m in sys.modules]
        print("HEAVY=" + ",".join(heavy))
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY="
