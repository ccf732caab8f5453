"""Example: train a small Keras model on a converted imgrec dataset with MirroredStrategy, or as one worker of a MultiWorkerMirroredStrategy cluster when TF_CONFIG is set; a preempted run started again resumes mid-epoch."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

__all__ = ["build_model", "fit", "label_logger", "main", "multi_worker_strategy"]

# Runnable as `.venv/bin/python examples/train_mirrored.py` from the repository root (the .venv
# that ./run_local.sh sets up), without installing imgrec itself.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# Multi-worker: seconds a collective (gradient all-reduce, the end-of-data check) may wait for
# a peer before failing. A worker that died is also noticed by TensorFlow's coordination
# service (heartbeats, ~30 s on loopback here); this bounds every other stall. Longer than the
# slowest step, including the first (tracing) and the shard cache's first downloads.
_COLLECTIVE_TIMEOUT_S = 300
# Steps between backups (BackupAndRestore's save_freq): a preempted run loses at most these.
_BACKUP_EVERY_STEPS = 100


def build_model(image_size: tuple[int, int], num_classes: int, keras=None):
    """A small convnet taking uint8 images: scaling to [0, 1] runs on the accelerator.

    `keras`: the Keras module to build with (default Keras 3; tf_keras under
    MultiWorkerMirroredStrategy, see `main`).
    """
    if keras is None:
        import keras

    return keras.Sequential(
        [
            keras.Input((*image_size, 3), dtype="uint8"),
            keras.layers.Rescaling(1.0 / 255.0),
            keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
            keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(num_classes),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Parse flags, build the input pipelines and the model under the strategy, fit."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", default="out/demo", help="imgrec convert --output DIR")
    parser.add_argument("--train_split", default="train")
    parser.add_argument("--eval_split", default="validation", help="'' to skip evaluation")
    parser.add_argument("--batch_size", type=int, default=32, help="global, over all replicas")
    parser.add_argument("--image_size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument(
        "--seed", type=int, default=0, help="the epoch order; keep it when resuming"
    )
    parser.add_argument(
        "--backup_dir",
        default=os.path.join(tempfile.gettempdir(), "imgrec-train-mirrored-backup"),
        help="BackupAndRestore's folder: a run started again after preemption resumes from "
        "it, mid-epoch (removed when training ends)",
    )
    parser.add_argument("--backup_every", type=int, default=_BACKUP_EVERY_STEPS, help="steps")
    parser.add_argument(
        "--log_labels",
        default="",
        help="append each training step's labels to this file (JSON lines: step, replica, "
        "labels) to check what a run trained on; off by default",
    )
    parser.add_argument(
        "--collective_timeout",
        type=float,
        default=_COLLECTIVE_TIMEOUT_S,
        help="multi-worker (TF_CONFIG set): seconds a collective waits for a peer before failing",
    )
    parser.add_argument(
        "--cpu_replicas",
        type=int,
        default=2,
        help="without GPUs, split the CPU into this many logical devices so MirroredStrategy "
        "still has several replicas (the same code then runs unchanged on GPUs)",
    )
    args = parser.parse_args(argv)
    multi_worker = bool(os.environ.get("TF_CONFIG"))
    _set_tensorflow_env(cpu_replicas_or_workers=args.cpu_replicas > 1 or multi_worker)
    import tensorflow as tf

    if multi_worker:
        strategy = multi_worker_strategy(args.collective_timeout)
        # Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585);
        # tf_keras (Keras 2, installed with TensorFlow Transform) runs it.
        import tf_keras as keras
    else:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus and args.cpu_replicas > 1:
            # Must happen before TensorFlow initialises its devices.
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_replicas
            )
        import keras

        devices = None if gpus else [d.name for d in tf.config.list_logical_devices("CPU")]
        strategy = tf.distribute.MirroredStrategy(devices)
    print(f"replicas in sync: {strategy.num_replicas_in_sync}")
    fit(
        strategy,
        keras,
        args.data_dir,
        train_split=args.train_split,
        eval_split=args.eval_split,
        batch_size=args.batch_size,
        image_size=args.image_size,
        epochs=args.epochs,
        seed=args.seed,
        backup_dir=args.backup_dir,
        backup_every=args.backup_every,
        log_labels=args.log_labels,
    )
    return 0


def multi_worker_strategy(collective_timeout_s: float = _COLLECTIVE_TIMEOUT_S):
    """MultiWorkerMirroredStrategy from TF_CONFIG, collectives failing after `collective_timeout_s`
    instead of waiting forever for a peer that is gone."""
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=collective_timeout_s)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def _set_tensorflow_env(cpu_replicas_or_workers: bool) -> None:
    """What must be set before TensorFlow is imported (a variable the user set wins)."""
    if cpu_replicas_or_workers:
        # On CPU, TF 2.21's oneDNN Conv2D fails on an empty per-replica batch ("input depth must
        # be evenly divisible by filter depth"), which the last evaluation step hands a replica
        # (or a worker) when fewer examples than replicas remain. Plain TF kernels handle it;
        # GPUs never use oneDNN.
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    # TF's C++ INFO lines drown the progress bar. Without an NVIDIA driver, importing TensorFlow
    # logs a "failed call to cuInit" ERROR that only means "no GPU": there ERROR lines are hidden
    # too (a failure still raises in Python).
    has_driver = os.path.exists("/proc/driver/nvidia")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1" if has_driver else "3")


def fit(
    strategy,
    keras,
    data_dir: str,
    *,
    train_split: str = "train",
    eval_split: str = "validation",
    batch_size: int = 32,
    image_size: int = 128,
    epochs: int = 2,
    seed: int = 0,
    backup_dir: str = "",
    backup_every: int = _BACKUP_EVERY_STEPS,
    log_labels: str = "",
):
    """Build the input pipelines and the model under `strategy`, fit; returns Keras' History.

    `batch_size` is global: each step, every replica of every worker takes
    `batch_size / strategy.num_replicas_in_sync` examples. Every worker runs the same call.
    With `backup_dir`, a run killed mid-epoch and started again resumes at the last backup's
    step: the rest of that epoch is read once, in the order the run would have read it.
    """
    from pipeline.reader import dataset_info, make_dataset, steps_per_epoch

    # dataset_info follows a versioned root's LATEST, as make_dataset does.
    num_classes = len(dataset_info(data_dir)["label_names"])
    size = (image_size, image_size)

    # Exact, and the same on every worker: each input pipeline yields this many steps per epoch.
    train_steps = steps_per_epoch(data_dir, train_split, batch_size)
    callbacks = []
    start_step = 0
    if backup_dir:
        from pipeline.reader import backup_and_restore, resume_callback

        # BackupAndRestore restores the step inside fit; the reader reads it when fit starts
        # iterating, and the resume callback ends the restored epoch where its data ends.
        resume = resume_callback(train_steps, keras)
        # backup_and_restore: Keras' BackupAndRestore, whole even when a kill lands mid-write.
        callbacks = [backup_and_restore(backup_dir, backup_every, keras), resume]
        start_step = resume.start_step
    train = make_dataset(
        data_dir,
        train_split,
        global_batch_size=batch_size,
        strategy=strategy,
        training=True,
        image_size=size,
        seed=seed,
        start_step=start_step,
    )
    fit_kwargs = {}
    if eval_split:
        fit_kwargs["validation_data"] = make_dataset(
            data_dir, eval_split, batch_size, strategy=strategy, image_size=size
        )
        if keras.__version__.startswith("2."):
            # tf_keras needs the steps of a distributed dataset. Exact on every worker: each
            # reads ceil(n / workers) records at most, in batches of batch_size / workers.
            fit_kwargs["validation_steps"] = steps_per_epoch(
                data_dir, eval_split, batch_size, drop_remainder=False
            )
        # Keras 3: no validation_steps, with it Keras keeps one iterator across epochs and the
        # finite evaluation split runs dry after the first epoch; without, each epoch reads it.

    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with strategy.scope():
        model = build_model(size, num_classes, keras)
        optimizer = keras.optimizers.Adam(1e-3)
        if log_labels:
            loss, logger = label_logger(loss, optimizer, log_labels, keras)
            callbacks.append(logger)
        model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])
    # Keras 3 says so when the finite evaluation split ends, which it should, every epoch.
    warnings.filterwarnings("ignore", message="Your input ran out of data")
    return model.fit(
        train, epochs=epochs, steps_per_epoch=train_steps, callbacks=callbacks, **fit_kwargs
    )


def label_logger(loss, optimizer, path: str, keras):
    """(`loss` that also appends each training step's labels to `path`, the callback that tells
    it the step): one JSON line per step and replica, {"step", "part", "ids"}."""
    import json

    import tensorflow as tf

    step = [None]  # the global step being trained; None while evaluating
    log = open(path, "a")  # noqa: SIM115 - open for the whole run

    def write(replica, labels):
        if step[0] is not None:
            row = {"step": step[0], "part": int(replica), "ids": labels.numpy().tolist()}
            log.write(json.dumps(row) + "\n")
            log.flush()

    def logged(y, logits):
        context = tf.distribute.get_replica_context()
        replica = context.replica_id_in_sync_group if context else 0
        tf.py_function(write, [replica, tf.reshape(y, [-1])], [])
        return loss(y, logits)

    def begin(*_, **__):
        step[0] = int(optimizer.iterations.numpy())

    callback = keras.callbacks.LambdaCallback(
        on_train_batch_begin=begin, on_test_begin=lambda *_, **__: step.__setitem__(0, None)
    )
    return logged, callback


if __name__ == "__main__":
    sys.exit(main())
