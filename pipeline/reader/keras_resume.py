"""Keras `fit` resumed mid-epoch: the callback that ends the restored epoch where its data ends."""

from __future__ import annotations

__all__ = ["resume_callback"]


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

        def on_epoch_begin(self, epoch, logs=None) -> None:
            self._epoch = epoch

        def on_train_batch_end(self, batch, logs=None) -> None:
            # Keras epoch e is data epoch e: it ends at step (e + 1) * steps_per_epoch, also
            # when it began mid-epoch (or one step late: a backup made after an epoch's last
            # step but before its end restores that epoch).
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
