"""Example: train a small Keras model with MirroredStrategy on a converted imgrec dataset."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["build_model", "main"]

# Runnable as `python examples/train_mirrored.py` from the repository root without installing.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_model(image_size: tuple[int, int], num_classes: int):
    """A small convnet taking uint8 images: scaling to [0, 1] runs on the accelerator."""
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
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--cpu_replicas",
        type=int,
        default=2,
        help="without GPUs, split the CPU into this many logical devices so MirroredStrategy "
        "still has several replicas (the same code then runs unchanged on GPUs)",
    )
    args = parser.parse_args(argv)
    if args.cpu_replicas > 1:
        # On CPU, TF 2.21's oneDNN Conv2D fails on an empty per-replica batch ("input depth must
        # be evenly divisible by filter depth"), which the last evaluation step hands a replica
        # when fewer examples than replicas remain. Plain TF kernels handle it; GPUs never use
        # oneDNN. Must be set before TensorFlow is imported.
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TF's C++ INFO lines drown the progress bar
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and args.cpu_replicas > 1:
        # Must happen before TensorFlow initialises its devices.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.cpu_replicas
        )
    import keras

    from pipeline.core import schema
    from pipeline.reader import make_dataset, steps_per_epoch

    devices = None if gpus else [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices)
    print(f"replicas in sync: {strategy.num_replicas_in_sync}")

    info = schema.load_dataset_info(args.data_dir)
    num_classes = len(info["label_names"])
    size = (args.image_size, args.image_size)

    train = make_dataset(
        args.data_dir,
        args.train_split,
        global_batch_size=args.batch_size,
        strategy=strategy,
        training=True,
        image_size=size,
        seed=args.seed,
    )
    train_steps = steps_per_epoch(args.data_dir, args.train_split, args.batch_size)
    fit_kwargs = {}
    if args.eval_split:
        fit_kwargs["validation_data"] = make_dataset(
            args.data_dir,
            args.eval_split,
            args.batch_size,
            strategy=strategy,
            image_size=size,
        )
        # No validation_steps: with it Keras keeps one iterator across epochs and the finite
        # evaluation split runs dry after the first epoch; without, each epoch reads it once.

    with strategy.scope():
        model = build_model(size, num_classes)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    model.fit(train, epochs=args.epochs, steps_per_epoch=train_steps, **fit_kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
