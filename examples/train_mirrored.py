"""Example: train a small Keras model on a converted imgrec dataset with MirroredStrategy, or as one worker of a MultiWorkerMirroredStrategy cluster when TF_CONFIG is set; a preempted run started again resumes mid-epoch."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

__all__ = [
    "build_detector",
    "build_model",
    "build_segmenter",
    "fit",
    "label_logger",
    "main",
    "multi_worker_strategy",
]

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


def build_detector(image_size: tuple[int, int], num_classes: int):
    """A small KerasHub RetinaNet (random weights, nothing downloaded; a real run starts from a
    preset, `keras_hub.models.RetinaNetObjectDetector.from_preset`) taking KerasHub's targets:
    boxes "yxyx" in pixels, labels 0..num_classes-1, -1 for padding."""
    import keras_hub

    shape = (*image_size, 3)
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 16, 16, 16], stackwise_num_blocks=[1, 1, 1, 1],
        stackwise_num_strides=[1, 2, 2, 2], block_type="basic_block", image_shape=shape,
    )  # fmt: skip
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=encoder, min_level=3, max_level=5, use_p5=False, image_shape=shape
    )
    return keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, num_classes=num_classes, bounding_box_format="yxyx",
        pre_logits_num_conv_layers=1,
    )  # fmt: skip


def build_segmenter(image_size: tuple[int, int], num_classes: int, keras=None):
    """A small encoder-decoder taking uint8 images: per-pixel logits [H, W, num_classes]."""
    if keras is None:
        import keras

    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input((*image_size, 3), dtype="uint8"),
            layers.Rescaling(1.0 / 255.0),
            layers.Conv2D(16, 3, strides=2, padding="same", activation="relu"),
            layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
            layers.Conv2DTranspose(16, 3, strides=2, padding="same", activation="relu"),
            layers.Conv2DTranspose(num_classes, 3, strides=2, padding="same"),
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
        "--task",
        default="classification",
        choices=("classification", "detection", "segmentation"),
        help="detection: a KerasHub RetinaNet on the boxes; segmentation: a small "
        "encoder-decoder on the label maps (a dataset converted with --annotations / --masks)",
    )
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

    if multi_worker and args.task == "detection":
        parser.error("--task detection needs Keras 3 (KerasHub), whose fit fails under "
                     "MultiWorkerMirroredStrategy (keras-team/keras#20585): train on one host")  # fmt: skip
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
        task=args.task,
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
    task: str = "classification",
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
    from pipeline.reader import steps_per_epoch

    # Exact, and the same on every worker: each input pipeline yields this many steps per epoch.
    train_steps = steps_per_epoch(data_dir, train_split, batch_size)
    callbacks, start_step = _resume_callbacks(keras, train_steps, backup_dir, backup_every)
    read = _reader(strategy, data_dir, batch_size, (image_size, image_size), task)
    train = read(train_split, training=True, seed=seed, start_step=start_step)
    fit_kwargs = {}
    if eval_split:
        fit_kwargs["validation_data"] = read(eval_split)
        if keras.__version__.startswith("2."):
            # tf_keras needs the steps of a distributed dataset. Exact on every worker: each
            # reads ceil(n / workers) records at most, in batches of batch_size / workers.
            fit_kwargs["validation_steps"] = steps_per_epoch(
                data_dir, eval_split, batch_size, drop_remainder=False
            )
        # Keras 3: no validation_steps, with it Keras keeps one iterator across epochs and the
        # finite evaluation split runs dry after the first epoch; without, each epoch reads it.
    with strategy.scope():
        model, loss, metrics = _model(task, data_dir, (image_size, image_size), keras)
        optimizer = keras.optimizers.Adam(1e-3)
        if log_labels:
            loss, logger = label_logger(loss, optimizer, log_labels, keras)
            callbacks.append(logger)
        # A detector's compile brings its own losses (RetinaNet: focal, Huber).
        losses = {} if loss is None else {"loss": loss, "metrics": metrics}
        model.compile(optimizer=optimizer, **losses)
    # Keras 3 says so when the finite evaluation split ends, which it should, every epoch.
    warnings.filterwarnings("ignore", message="Your input ran out of data")
    return model.fit(
        train, epochs=epochs, steps_per_epoch=train_steps, callbacks=callbacks, **fit_kwargs
    )


def _resume_callbacks(keras, train_steps: int, backup_dir: str, backup_every: int):
    """([callbacks], the step to start at): with `backup_dir`, a run started again resumes."""
    if not backup_dir:
        return [], 0
    from pipeline.reader import backup_and_restore, resume_callback

    # BackupAndRestore restores the step inside fit; the reader reads it when fit starts
    # iterating, and the resume callback ends the restored epoch where its data ends.
    resume = resume_callback(train_steps, keras)
    # backup_and_restore: Keras' BackupAndRestore, whole even when a kill lands mid-write.
    return [backup_and_restore(backup_dir, backup_every, keras), resume], resume.start_step


def _reader(strategy, data_dir: str, batch_size: int, size: tuple[int, int], task: str):
    """read(split, **make_dataset keywords) -> the distributed dataset the model's fit takes."""
    from pipeline.reader import Detection, make_dataset

    if task == "classification":
        return lambda split, **kw: make_dataset(
            data_dir, split, batch_size, strategy=strategy, image_size=size, **kw
        )
    # The reader's targets in the model's terms: each input pipeline's batches are mapped
    # before the strategy distributes them (make_dataset takes the InputContext).
    options = Detection(box_format="yxyx", normalized=False) if task == "detection" else task
    to_model = _to_retinanet if task == "detection" else _to_segmenter

    def pipeline(split, ctx, **kw):
        ds = make_dataset(data_dir, split, batch_size, strategy=ctx, image_size=size,
                          task=options, **kw)  # fmt: skip
        return ds.map(to_model)

    if task == "detection":
        # KerasHub's fit takes a tf.data.Dataset only, and splits its global batches over the
        # replicas itself (one host: --task detection refuses a cluster).
        return lambda split, **kw: pipeline(split, None, **kw)
    return lambda split, **kw: strategy.distribute_datasets_from_function(
        lambda ctx: pipeline(split, ctx, **kw)
    )


def _to_retinanet(images, targets):
    """KerasHub's y: {"boxes", "labels"}: class ids 1..N -> 0..N-1, padding slots -1."""
    import tensorflow as tf

    classes = targets["classes"]
    labels = tf.where(classes >= 0, classes - 1, -1)
    return images, {"boxes": targets["boxes"], "labels": labels}


def _to_segmenter(images, targets):
    return images, targets["segmentation"]


def _model(task: str, data_dir: str, size: tuple[int, int], keras):
    """(model, loss, metrics) of the task; the classes from the dataset's metadata."""
    from pipeline.reader import dataset_info

    # dataset_info follows a versioned root's LATEST, as make_dataset does.
    info = dataset_info(data_dir)
    if task == "classification":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return build_model(size, len(info["label_names"]), keras), loss, ["accuracy"]
    annotations = info.get("annotations") or {}
    ids = [entry["id"] for entry in annotations.get("label_map") or []]
    if task == "detection":
        # Labels 0..max(ids)-1 (_to_retinanet).
        return build_detector(size, max(ids, default=1)), None, None
    values = [entry["value"] for entry in annotations.get("segmentation_classes") or []]
    classes = max(values + ids, default=1) + 1
    ignore = annotations.get("ignore_value", 255)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore)
    return build_segmenter(size, classes, keras), loss, []


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
