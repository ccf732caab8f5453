"""The launch wing from the outside: importing imgrec's modules changes nothing global, and the
`imgrec` program converts whatever shape Beam's patched internals take."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_IMPORT_ALL = """
import gc, importlib, json, os, sys
meta_path = list(sys.meta_path)
root = os.getcwd()
names = []
for package in ("core", "transforms", "pipeline"):
    for folder, dirs, files in os.walk(os.path.join(root, package)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, root).replace(os.sep, ".")
        if rel.startswith("pipeline.launch"):
            continue  # the wing itself: its modules run the start-up when imported
        names += [f"{rel}.{f[:-3]}".removesuffix(".__init__") for f in files if f.endswith(".py")]
names = [n for n in names if n != "pipeline.__main__"]  # the program itself
for name in sorted(names):
    importlib.import_module(name)
from apache_beam.transforms import core, userstate
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.internal import cloudpickle_pickler
from apache_beam.io.gcp import gcsfilesystem
from apache_beam.io.aws.clients.s3 import boto3_client
import boto3, bz2
targets = [userstate.get_dofn_specs, PipelineOptions.view_as, core.get_function_args_defaults,
           gcsfilesystem.GCSFileSystem._gcsIO]
print(json.dumps({
    "modules": len(names),
    "patched": [t.__name__ for t in targets if hasattr(t, "_imgrec_patch")],
    "boto3": boto3_client.boto3 is boto3,
    "bz2": cloudpickle_pickler.bz2 is bz2,
    "gc": gc.isenabled() and gc.get_freeze_count() == 0,
    "meta_path": [type(f).__module__ for f in sys.meta_path if f not in meta_path
                  and type(f).__module__.split(".")[0] in ("core", "pipeline", "transforms")],
    "keras_env": os.environ.get("TF_USE_LEGACY_KERAS"),
}))
"""


def test_importing_every_module_outside_the_wing_changes_no_global_state():
    """A library caller that imports core.storage, the stages, the reader or the command gets
    plain Beam, its own collector and import system, and no environment set for it."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got.pop("modules") > 60
    assert got == {"patched": [], "boto3": True, "bz2": True, "gc": True, "meta_path": [],
                   "keras_env": None}  # fmt: skip


_CHANGED_BEAM = """
import json, sys
from apache_beam.transforms import core, userstate
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.internal import cloudpickle_pickler
from apache_beam.io.gcp import gcsfilesystem
from apache_beam.io.aws.clients.s3 import boto3_client
import bz2, types

def other_shape(real):
    def changed(*args, **kwargs):
        return real(*args, **kwargs)
    return changed

# A Beam whose private targets all have another shape, or are gone where Beam itself does not
# need them.
userstate.get_dofn_specs = other_shape(userstate.get_dofn_specs)
PipelineOptions.view_as = other_shape(PipelineOptions.view_as)
core.get_function_args_defaults = other_shape(core.get_function_args_defaults)
gcsfilesystem.GCSFileSystem._gcsIO = other_shape(gcsfilesystem.GCSFileSystem._gcsIO)
boto3_client.boto3 = types.SimpleNamespace()
cloudpickle_pickler.bz2 = types.SimpleNamespace(compress=other_shape(bz2.compress),
                                                decompress=other_shape(bz2.decompress))
from pipeline.launch import patches
from pipeline.launch.switches import read_switches
taken = patches.install(read_switches())
sys.argv = ["imgrec", *sys.argv[1:]]
import atexit
atexit.register(lambda: print(json.dumps({"taken": taken})))
from pipeline.launch.program import run
run()
"""


def test_the_program_converts_when_every_patch_target_changed(tmp_path):
    """Each kept patch finds its target changed, is skipped, and the default conversion still
    succeeds, writing the same records as a run on unchanged Beam."""
    from tests.mixed_folder import write_mixed_folder

    src = tmp_path / "src"
    write_mixed_folder(str(src), num_jpegs=6)
    outputs = {}
    for name, code in (("changed", _CHANGED_BEAM), ("plain", None)):
        out = tmp_path / name
        args = ["convert", "--input", f"{src}/*/*", "--output", str(out)]
        cmd = (
            [sys.executable, "-c", code, *args]
            if code
            else [sys.executable, "-m", "pipeline", *args]
        )
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT, "IMGREC_LOG_DIR": str(tmp_path / "logs")},
            cwd=ROOT,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        info = json.loads((out / "dataset_info.json").read_text())
        outputs[name] = {s: [x["sha256"] for x in v["shards"]] for s, v in info["splits"].items()}
        if code:
            taken = json.loads(proc.stdout.strip().splitlines()[-1])["taken"]
            assert taken and not any(taken.values()), taken
    assert outputs["changed"] == outputs["plain"] and outputs["plain"]
