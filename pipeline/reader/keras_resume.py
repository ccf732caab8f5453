"""Keras `fit` resumed mid-epoch: a backup that survives a kill while it is written, and the
callback that ends the restored epoch where its data ends."""

from __future__ import annotations

import filecmp
import json
import os
import shutil

__all__ = ["backup_and_restore", "resume_callback"]

# Keras 3's BackupAndRestore files; with `double_checkpoint` each has a ".bkp" previous copy.
_WEIGHTS = "latest.weights.h5"
_METADATA = "training_metadata.json"
_PREVIOUS = ".bkp"


def backup_and_restore(backup_dir: str, save_freq: int, keras=None):
    """`keras.callbacks.BackupAndRestore(backup_dir, save_freq)` that a kill mid-write cannot break.

    Keras 3 writes a backup in place: a job killed while writing it leaves a torn file, and the
    next start fails to open it. This keeps the previous backup (`double_checkpoint`) and, before
    `fit` reads them, puts back the last whole one (or none, if the first was torn).
    Keras 2 (`tf_keras`) writes TensorFlow checkpoints, whole or not at all: returned as is.
    """
    if keras is None:
        import keras
    if keras.__version__.startswith("2."):
        return keras.callbacks.BackupAndRestore(backup_dir, save_freq=save_freq)
    _keep_whole_backup(backup_dir)
    return keras.callbacks.BackupAndRestore(backup_dir, save_freq=save_freq, double_checkpoint=True)


def _keep_whole_backup(backup_dir: str) -> None:
    """If the latest backup is torn, or cut between its two files, the previous one replaces it;
    if both are torn, neither is kept."""
    latest = [os.path.join(backup_dir, name) for name in (_WEIGHTS, _METADATA)]
    previous = [path + _PREVIOUS for path in latest]
    if not os.path.exists(latest[0]):
        return
    if _is_whole(*latest) and not _cut_between_files(latest, previous):
        return
    if _is_whole(*previous):
        for source, target in zip(previous, latest, strict=True):
            shutil.copyfile(source, target)
    else:
        shutil.rmtree(backup_dir)  # no whole backup yet: the run starts from the beginning


def _cut_between_files(latest: list[str], previous: list[str]) -> bool:
    """Whether a save wrote the new weights but was killed before the new metadata: Keras copies
    both to ".bkp" first, so the metadata is still the previous one while the weights are not
    (their step would not match the epoch and batch the metadata restores)."""
    if not all(os.path.exists(path) for path in previous):
        return False
    same_metadata = filecmp.cmp(latest[1], previous[1], shallow=False)
    return same_metadata and not filecmp.cmp(latest[0], previous[0], shallow=False)


def _is_whole(weights: str, metadata: str) -> bool:
    """Whether the weights file reads to its end and the metadata parses."""
    import h5py

    def read(_name, item) -> None:
        if isinstance(item, h5py.Dataset):
            item[()]

    try:
        with h5py.File(weights, "r") as f:
            f.visititems(read)
        with open(metadata) as f:
            json.load(f)
    except (OSError, ValueError):  # h5py raises OSError for a torn file; json, ValueError
        return False
    return True


def resume_callback(steps_per_epoch: int, keras=None):
    """A Keras callback that keeps `fit`'s epochs on the reader's epochs after a restore.

    `BackupAndRestore(save_freq=k)` restores the weights and the optimizer's step mid-epoch,
    then runs the interrupted epoch again from its first step. This callback notes the
    restored step when `fit` begins; `make_dataset(..., start_step=callback.start_step)` reads
    it when `fit` starts iterating, so the data goes on from the restored step. The callback
    then ends that first epoch when the data's epoch ends (after `steps_per_epoch - step %
    steps_per_epoch` steps): every later epoch starts at a data epoch's first step and the run
    ends after `epochs * steps_per_epoch` steps in all (docs/training.md).

    List it after `BackupAndRestore` (whose restore it reads) and before callbacks that stop
    training (EarlyStopping): it stops `fit`'s step loop at the data epoch's end, then lets
    the next epoch start.

    Args:
        steps_per_epoch: `steps_per_epoch(data_dir, split, global_batch_size)`, as passed to fit.
        keras: the Keras module `fit` belongs to (default Keras 3; `tf_keras` for Keras 2).

    Returns:
        An instance of a `keras.callbacks.Callback` subclass, with `start_step()`: the step
        `fit` resumed at (0 before `fit` begins).
    """
    if keras is None:
        import keras
    if steps_per_epoch <= 0:
        raise ValueError(f"steps_per_epoch must be positive, got {steps_per_epoch}")

    class ResumeMidEpoch(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self._epoch = 0
            self._ending = False  # this callback stopped the step loop, not the user's
            self._start = 0

        def start_step(self) -> int:
            """The restored step, noted before fit's first step (the dataset reads it then: a
            read of the optimizer's variable inside a running step could see it incremented)."""
            return self._start

        def on_train_begin(self, logs=None) -> None:
            self._start = self._step()
            # A backup made after an epoch's last step but before its end restores that
            # epoch, whose data is all trained: fit starts at the next one (the last epoch's
            # backup: fit ends). Keras 3 reads _initial_epoch after on_train_begin, where its
            # BackupAndRestore sets it; tf_keras resumes at the saved step itself.
            restored = getattr(self.model, "_initial_epoch", None)
            if restored is not None and self._start >= (restored + 1) * steps_per_epoch:
                self.model._initial_epoch = self._start // steps_per_epoch

        def on_epoch_begin(self, epoch, logs=None) -> None:
            self._epoch = epoch

        def on_train_batch_end(self, batch, logs=None) -> None:
            # Keras epoch e is data epoch e: it ends at step (e + 1) * steps_per_epoch, also
            # when it began mid-epoch.
            data_ended = self._step() >= (self._epoch + 1) * steps_per_epoch
            if data_ended and batch + 1 < steps_per_epoch:
                self._ending = True
                self.model.stop_training = True  # ends this epoch's step loop

        def on_epoch_end(self, epoch, logs=None) -> None:
            if self._ending:
                self._ending = False
                self.model.stop_training = False  # ... but not fit: the next epoch starts

        def _step(self) -> int:
            return int(self.model.optimizer.iterations.numpy())

    return ResumeMidEpoch()
