"""The reader under MirroredStrategy (two logical CPUs) in a fresh TensorFlow process, on the
small shards tests/unit/test_reader.py writes by hand: each replica's batch shape, one pass over
the evaluation split, `model.fit`, no auto-shard warning. examples/train_mirrored.py under
MirroredStrategy: tests/e2e/test_train_example.py (killed and resumed, evaluation after each
epoch); as a cluster's worker: tests/e2e/test_reader_multiworker.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.runs import ROOT as ROOT_PATH
from tests.runs import tf_script
from tests.unit.test_reader import data_dir  # a fixture

REPO = str(ROOT_PATH)

_MIRRORED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    import keras
    from pipeline.reader import dataset as reader
    from core import schema

    out0 = {"beam_imported": "apache_beam" in sys.modules}
    data_dir = sys.argv[1]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {"replicas": strategy.num_replicas_in_sync, **out0}

    train = reader.make_dataset(data_dir, "train", 8, strategy=strategy, training=True,
                                image_size=(24, 32), seed=0)
    images, labels = next(iter(train))
    out["train_shapes"] = [list(t.shape) for t in strategy.experimental_local_results(images)]

    val = reader.make_dataset(data_dir, "validation", 8, strategy=strategy, image_size=(24, 32),
                              extra_features=[schema.FILENAME])
    names, steps = [], 0
    for _, _, extras in val:
        steps += 1
        for part in strategy.experimental_local_results(extras[schema.FILENAME]):
            names += [n.decode() for n in part.numpy()]
    out["eval_names"], out["eval_steps"] = names, steps

    with strategy.scope():
        model = keras.Sequential([
            keras.Input((24, 32, 3), dtype="uint8"),
            keras.layers.Rescaling(1 / 255.0),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    spe = reader.steps_per_epoch(data_dir, "train", 8)
    history = model.fit(train, epochs=2, steps_per_epoch=spe, verbose=0)
    out["fit_losses"] = history.history["loss"]
    out["fit_steps"] = spe

    # What a multi-worker strategy does to a plain dataset; an AUTO/FILE policy would log
    # "Found an unshardable source dataset" here (the reader's sources include random seeds).
    from tensorflow.python.distribute import input_ops
    plain = reader.make_dataset(data_dir, "train", 8, training=True, image_size=(24, 32))
    next(iter(input_ops.auto_shard_dataset(plain, 2, 0, 2)))
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def mirrored(data_dir) -> dict:
    """Run the MirroredStrategy scenario with two logical CPUs in a fresh process."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        tf_script(_MIRRORED_SCRIPT, data_dir),
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return {
        "result": json.loads(line[len("RESULT ") :]),
        "log": proc.stdout + proc.stderr,
    }


def test_mirrored_each_replica_gets_half_the_global_batch(mirrored):
    result = mirrored["result"]
    assert result["replicas"] == 2
    assert result["train_shapes"] == [[4, 24, 32, 3], [4, 24, 32, 3]]


def test_reader_imports_without_beam(mirrored):
    assert mirrored["result"]["beam_imported"] is False


def test_mirrored_evaluation_epoch_yields_every_example_once(mirrored):
    names = mirrored["result"]["eval_names"]
    assert len(names) == 21 and len(set(names)) == 21
    assert mirrored["result"]["eval_steps"] == 3


def test_mirrored_model_fit_runs_steps_per_epoch(mirrored):
    result = mirrored["result"]
    assert result["fit_steps"] == 7
    assert len(result["fit_losses"]) == 2 and all(np.isfinite(result["fit_losses"]))
    assert "ran out of data" not in mirrored["log"]


def test_mirrored_logs_no_auto_shard_warning(mirrored):
    log = mirrored["log"].lower()
    assert "auto_shard" not in log and "autoshard" not in log and "unshardable" not in log
