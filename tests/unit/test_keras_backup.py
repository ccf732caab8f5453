"""backup_and_restore: a Keras `fit` killed while writing its backup starts again from the last
whole backup (or from the beginning when the first was torn), never fails to start."""

from __future__ import annotations

import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")

from pipeline.reader import backup_and_restore  # noqa: E402

STEPS = 6  # steps per epoch
SAVE_EVERY = 2


class _Interrupt(keras.callbacks.Callback):
    """Stops the run with an error once `at` steps are done, as a preemption would."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None) -> None:
        if int(self.model.optimizer.iterations.numpy()) >= self.at:
            raise RuntimeError("preempted")


class _StartStep(keras.callbacks.Callback):
    """Notes the optimizer's step when `fit` begins (after BackupAndRestore's restore)."""

    step = None

    def on_train_begin(self, logs=None) -> None:
        self.step = int(self.model.optimizer.iterations.numpy())
        self.model.stop_training = True


def _fit(backup_dir: str, *callbacks) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(STEPS * 4, 3)), rng.integers(0, 2, STEPS * 4)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(True))
    callbacks = [backup_and_restore(backup_dir, SAVE_EVERY), *callbacks]
    model.fit(x, y, batch_size=4, epochs=2, callbacks=callbacks, verbose=0)


def _interrupted(tmp_path, at: int) -> str:
    backup = str(tmp_path / "backup")
    with pytest.raises(RuntimeError, match="preempted"):
        _fit(backup, _Interrupt(at))
    return backup


def _resumed_at(backup: str) -> int:
    start = _StartStep()
    _fit(backup, start)
    return start.step


def _tear(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def test_a_whole_backup_resumes_at_its_step(tmp_path):
    assert _resumed_at(_interrupted(tmp_path, 5)) == 4


def test_torn_weights_resume_at_the_previous_backup(tmp_path):
    backup = _interrupted(tmp_path, 5)
    _tear(os.path.join(backup, "latest.weights.h5"))
    assert _resumed_at(backup) == 2


def test_torn_metadata_resumes_at_the_previous_backup(tmp_path):
    backup = _interrupted(tmp_path, 5)
    open(os.path.join(backup, "training_metadata.json"), "w").close()
    assert _resumed_at(backup) == 2


def test_a_torn_first_backup_starts_from_the_beginning(tmp_path):
    backup = _interrupted(tmp_path, 3)
    assert not os.path.exists(os.path.join(backup, "latest.weights.h5.bkp"))
    _tear(os.path.join(backup, "latest.weights.h5"))
    assert _resumed_at(backup) == 0


def test_a_save_cut_between_weights_and_metadata_resumes_at_the_previous_backup(tmp_path):
    # Keras writes the new weights, then the new metadata: killed in between, the weights say
    # step 4 while the metadata still says the batch of step 2. The pair of step 2 is restored.
    backup = _interrupted(tmp_path, 5)
    metadata = os.path.join(backup, "training_metadata.json")
    with open(metadata + ".bkp") as f:
        previous = f.read()
    with open(metadata, "w") as f:
        f.write(previous)
    assert _resumed_at(backup) == 2
