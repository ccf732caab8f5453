"""resume_callback with Keras 3's BackupAndRestore, killed at the worst moments: after the backup
of an epoch's last step but before the epoch ends (a kill at the last epoch's end used to make the
resumed run train one step past the end), and mid-epoch. Each data step is trained exactly once
over both runs, and the run ends after epochs * steps_per_epoch steps.

The data is the step itself (y = the global step of the batch), read from `start_step` as
make_dataset reads it, so what each fit trained on is the list of y it saw.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.runs import ROOT, cli_env, tf_script

pytestmark = pytest.mark.integration

_STEPS = 4
_EPOCHS = 3

_SCRIPT = """
import json, sys
import keras
import tensorflow as tf
from pipeline.reader import backup_and_restore, resume_callback

backup_dir, die_epoch, die_batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps, epochs = int(sys.argv[4]), int(sys.argv[5])
seen = []

class Die(keras.callbacks.Callback):
    # A kill: the run stops with its backup left as the kill leaves it.
    def on_train_batch_end(self, batch, logs=None):
        if die_batch >= 0 and self._epoch == die_epoch and batch == die_batch:
            raise SystemExit(3)
    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
    def on_epoch_end(self, epoch, logs=None):
        if die_batch < 0 and epoch == die_epoch:
            raise SystemExit(3)

model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
def loss(y, pred):
    tf.py_function(lambda y: seen.append(int(y.numpy()[0, 0])), [y], [])
    return keras.losses.mean_squared_error(y, pred)
model.compile(optimizer=keras.optimizers.SGD(0.0), loss=loss)
resume = resume_callback(steps, keras)
# save_freq 1: a backup after every step, so a kill lands right after one.
callbacks = [backup_and_restore(backup_dir, 1, keras), resume, Die()]

def data():
    # start_step read when fit starts iterating, as make_dataset reads it.
    for step in range(resume.start_step(), epochs * steps):
        yield [[1.0]], [[float(step)]]

spec = (tf.TensorSpec([1, 1], tf.float32), tf.TensorSpec([1, 1], tf.float32))
try:
    model.fit(tf.data.Dataset.from_generator(data, output_signature=spec), epochs=epochs,
              steps_per_epoch=steps, verbose=0, callbacks=callbacks)
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps({"seen": seen, "iterations": int(model.optimizer.iterations.numpy()), "code": code}))
"""


def _fit(backup_dir, die_epoch: int, die_batch: int) -> dict:
    proc = subprocess.run(
        tf_script(_SCRIPT, str(backup_dir), str(die_epoch), str(die_batch), str(_STEPS),
                  str(_EPOCHS)),
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=cli_env(KERAS_BACKEND="tensorflow", TF_USE_LEGACY_KERAS="0", CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("die_epoch", "die_batch"),
    [
        (_EPOCHS - 1, -1),  # after the last step's backup, before the last epoch ends
        (0, -1),  # the same at the first epoch's end
        (1, 1),  # mid-epoch, right after a backup
    ],
)
def test_a_resumed_fit_trains_each_step_once_and_stops_at_the_end(tmp_path, die_epoch, die_batch):
    first = _fit(tmp_path / "backup", die_epoch, die_batch)
    assert first["code"] == 3
    second = _fit(tmp_path / "backup", -1, -2)
    assert second["code"] == 0
    assert first["seen"] + second["seen"] == list(range(_EPOCHS * _STEPS))
    assert second["iterations"] == _EPOCHS * _STEPS
    assert not (tmp_path / "backup").exists()  # the finished run removed its backup
