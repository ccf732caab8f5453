"""Fresh interpreters started as imgrec's processes start (pipeline/launch/): the program and the
workers' start-up plugin load TensorFlow without Keras and their imports without the garbage
collector, and the plugin applies the Beam patches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline.launch import startup
from tests.runs import ROOT, script_facts

_DEFERRED = """
import json, os, sys
from pipeline.launch import startup
startup.defer_keras()
startup.defer_keras()  # a second call installs nothing more
finders = sum(isinstance(f, startup._DeferKeras) for f in sys.meta_path)
{start}
import tensorflow as tf
out = {{"finders": finders, "with_tensorflow": sorted(
    m for m in sys.modules if m.split(".")[0] in ("keras", "tf_keras"))}}
# TensorFlow still put Keras 2's API folder on its path, and Keras loads when asked for.
out["tf_path_has_keras"] = any("tf_keras" in str(p) for p in tf.__path__)
import tf_keras
out["tf_keras"] = tf_keras.layers.Dense(2)(tf.ones([1, 3])).shape == (1, 2)
out["tf.keras"] = tf.keras.layers.Dense is tf_keras.layers.Dense
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    "start", ["", "import pipeline.launch.worker_start"], ids=["program", "worker"]
)
def test_tensorflow_loads_without_keras_and_keras_loads_later(start):
    """startup.defer_keras: a fresh process's `import tensorflow` (the program's, or the worker
    start-up plugin's) loads no Keras module; `import tf_keras` and `tf.keras` work afterwards.
    Fails loudly if TensorFlow ever needs Keras at import (the import would raise)."""
    got = script_facts(_DEFERRED.format(start=start), timeout=300, TF_USE_LEGACY_KERAS="1")
    assert got == {"finders": 1, "with_tensorflow": [], "tf_path_has_keras": True,
                   "tf_keras": True, "tf.keras": True}  # fmt: skip


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
        # pipeline/launch/startup.py: the collector is back on, the start-up imports frozen.
        loaded["gc"] = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
        # The DirectRunner workers' start-up plugin, imported as a worker would (GC back on).
        frozen = gc.get_freeze_count()
        import pipeline.launch.worker_start
        loaded["worker_start"] = {
            "enabled": gc.isenabled(),
            "frozen_more": gc.get_freeze_count() > frozen,
            "stages": "pipeline.builder" in sys.modules,
        }
        with open(report, "w") as f:
            json.dump(loaded, f)
    atexit.register(dump)  # the program runs exit handlers before os._exit
    sys.argv[0] = "imgrec"
    from pipeline.launch.program import run
    run()
    """
)


def test_the_command_loads_tensorflow_without_keras_and_without_gc(tmp_path):
    """`imgrec` asks TensorFlow for Keras 2 (TFT's) before TensorFlow is imported, so that no
    later import loads Keras 3 as well (startup.use_keras_2), and TensorFlow's own
    import loads neither (startup.defer_keras), while TFT's import and `tf.keras` still load
    Keras 2 afterwards; its start-up imports run without the garbage collector, which is back
    on, with those imports frozen, once the command's work starts (pipeline/launch/startup.py).
    The workers' start-up plugin does the same."""
    env = {k: v for k, v in os.environ.items() if k != startup.KERAS_ENV}
    env.update(
        PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", IMGREC_LOG_DIR=str(tmp_path / "logs")
    )
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


def test_worker_start_turns_client_sharing_on():
    """Beam's worker processes import imgrec's start-up plugin (--beam_plugins, Dask's preload:
    pipeline/launch/worker_start.py) before they unpickle a DoFn: that import alone must share
    clients (a fresh interpreter, so nothing this test session did counts)."""
    probe = (
        "import json\nimport pipeline.launch.worker_start\n"
        "from apache_beam.io.aws.clients.s3 import boto3_client\n"
        "from apache_beam.io.gcp.gcsfilesystem import GCSFileSystem\n"
        "print(json.dumps([type(boto3_client.boto3).__name__,"
        " callable(boto3_client.boto3.session.Session), GCSFileSystem._gcsIO._imgrec_patch]))"
    )
    assert script_facts(probe) == ["_SharedBoto3", True, True]
