"""A real KerasHub object detector trains on the reader's detection output: a tiny RetinaNet
(random init, built from its constructors: nothing downloaded) fits a few steps on
`make_dataset(task=Detection(...))` over an `imgrec convert --annotations` of painted boxes; and
examples/train_mirrored.py, as a user runs it, trains `--task detection` and `--task
segmentation` (the label maps of `--masks`) under MirroredStrategy, evaluating each epoch.

The reader's targets map onto KerasHub's `y` as they are: boxes "yxyx" in pixels of the output
image (the model's bounding_box_format "yxyx" is absolute), classes -1 for the padding slots
(KerasHub's padding label too; the padding boxes are set to -1 as KerasHub pads them).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from tests.annotation_exports import write_cvat_coco
from tests.runs import ROOT, cli_env, in_process, tf_script

pytestmark = pytest.mark.e2e

_LABELS = ("red", "green")  # class ids 1, 2 in the COCO file
_COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0)}
_NUM_IMAGES = 16
_SIZE = 64
_BATCH = 4
_STEPS = 4


def _objects(index: int, rng: np.random.Generator) -> list[tuple]:
    """1-2 filled rectangles, side by side (never overlapping), of the two classes."""
    count = 1 + index % 2
    column = _SIZE // count
    objects = []
    for k in range(count):
        w = int(rng.integers(12, column - 4 + 1))
        h = int(rng.integers(12, _SIZE - 4 + 1))
        x0 = k * column + 2 + int(rng.integers(0, column - 4 - w + 1))
        y0 = 2 + int(rng.integers(0, _SIZE - 4 - h + 1))
        objects.append((_LABELS[(index + k) % 2], x0, y0, x0 + w, y0 + h))
    return objects


@pytest.fixture(scope="module")
def boxes_dataset(tmp_path_factory) -> str:
    """16 painted 64x64 PNGs with a COCO instances file and label maps, converted in this
    process with the default splits."""
    src = tmp_path_factory.mktemp("boxes")
    rng = np.random.default_rng(5)
    images = [(f"img{i:02d}.png", _SIZE, _SIZE, _objects(i, rng)) for i in range(_NUM_IMAGES)]
    export = write_cvat_coco(src, images, labels=_LABELS)
    (src / "masks").mkdir()
    for name, _, _, objects in images:
        pixels = np.zeros((_SIZE, _SIZE, 3), np.uint8)
        labels = np.zeros((_SIZE, _SIZE), np.uint8)
        for label, x0, y0, x1, y1 in objects:
            pixels[y0:y1, x0:x1] = _COLOURS[label]
            labels[y0:y1, x0:x1] = _LABELS.index(label) + 1
        path = export.image_paths[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path)
        Image.fromarray(labels, mode="L").save(src / "masks" / f"{path.stem}.png")
    out = tmp_path_factory.mktemp("boxes_out") / "ds"
    in_process(
        "convert", "--input", src / "images" / "*.png", "--annotations", export.annotations,
        "--masks", f"{src}/masks/{{stem}}.png", "--output", out, "--no_report",
    )  # fmt: skip
    return str(out)


_TRAIN = textwrap.dedent(
    """
    import math
    import sys

    import keras
    import keras_hub
    import tensorflow as tf

    from pipeline.reader import Detection, make_dataset

    data_dir, size, batch, steps = sys.argv[1], *map(int, sys.argv[2:5])
    keras.utils.set_random_seed(1)
    ds = make_dataset(data_dir, "train", batch, training=True, image_size=size, seed=1,
                      task=Detection(box_format="yxyx", normalized=False))

    def to_keras_hub(images, targets):
        # KerasHub's y: {"boxes": [B, M, 4], "labels": [B, M]}, padding label -1 with -1 boxes.
        # Class ids 1..N -> 0..N-1 (the classification head's N outputs).
        classes = targets["classes"]
        real = classes >= 0
        labels = tf.where(real, classes - 1, -1)
        boxes = tf.where(real[..., None], targets["boxes"], -1.0)
        return tf.cast(images, tf.float32) / 255.0, {"boxes": boxes, "labels": labels}

    ds = ds.map(to_keras_hub)

    image_encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 16, 16, 16], stackwise_num_blocks=[1, 1, 1, 1],
        stackwise_num_strides=[1, 2, 2, 2], block_type="basic_block",
        image_shape=(size, size, 3),
    )
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=image_encoder, min_level=3, max_level=5, use_p5=False,
        image_shape=(size, size, 3),
    )
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, num_classes=2, bounding_box_format="yxyx",
        pre_logits_num_conv_layers=1,
    )
    # KerasHub's defaults: Huber box loss, focal classification loss.
    model.compile(optimizer=keras.optimizers.Adam(1e-3))

    # The targets are in the model's box format: its label encoder matches anchors to them
    # (normalized boxes, or x/y swapped, would match few or none).
    images, y = next(iter(ds))
    _, anchor_labels = model.label_encoder(images=images, gt_boxes=y["boxes"],
                                           gt_classes=y["labels"])
    positive = int(tf.reduce_sum(tf.cast(anchor_labels >= 0, tf.int32)))
    print("POSITIVE_ANCHORS", positive)
    assert positive > 0, positive

    losses = []
    per_step = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[per_step])
    print("LOSSES", *losses)
    assert all(math.isfinite(v) for v in losses), losses
    print("OK")
    """
)


def test_keras_hub_retinanet_fits_on_reader_detection_targets(boxes_dataset):
    proc = subprocess.run(
        tf_script(_TRAIN, boxes_dataset, str(_SIZE), str(_BATCH), str(_STEPS)),
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=cli_env(CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow", TF_USE_LEGACY_KERAS="0"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "OK", proc.stdout[-2000:]
    (losses,) = [line.split()[1:] for line in lines if line.startswith("LOSSES")]
    assert losses and all(math.isfinite(float(v)) for v in losses), losses


@pytest.mark.parametrize("task", ["detection", "segmentation"])
def test_example_script_trains_and_evaluates_each_task(boxes_dataset, task, tmp_path):
    # Global batch 2: each replica gets one of the 2 validation images (Keras 3's evaluate
    # averages its first batch over the replicas to build the model, which fails when one
    # replica's part is empty).
    proc = subprocess.run(
        [
            sys.executable, "examples/train_mirrored.py", "--data_dir", boxes_dataset,
            "--task", task, "--image_size", str(_SIZE), "--batch_size", "2",
            "--epochs", "2", "--backup_dir", str(tmp_path / "backup"),
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=cli_env(CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow", TF_USE_LEGACY_KERAS="0"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "replicas in sync: 2" in proc.stdout
    # Keras' progress lines: both epochs trained and evaluated, every loss a number.
    losses = [float(v) for v in re.findall(r"(?<![_a-z])loss: ([0-9.e+-]+|nan)", proc.stdout)]
    val_losses = [float(v) for v in re.findall(r"val_loss: ([0-9.e+-]+|nan)", proc.stdout)]
    assert len(val_losses) == 2, proc.stdout[-3000:]
    assert losses and all(math.isfinite(v) for v in losses + val_losses), proc.stdout[-3000:]
