"""The reader's task="detection" and "segmentation" over a real `imgrec convert --annotations`:
boxes, instance masks and label maps land on the pixels they describe after the training crop,
flip and resize and after the evaluation resize-with-pad; one training epoch reads every image
once, `start_step` resumes it batch for batch; MirroredStrategy trains a Keras step on it.

Images are black with objects painted in their class's own colour (1 red, 2 green, 3 blue), so
a target that missed its pixels shows as a colour where it is not, or none where it is.
"""

from __future__ import annotations

import subprocess
import textwrap

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils

from pipeline.reader import dataset as reader
from pipeline.reader import steps_per_epoch
from pipeline.reader.detection import Detection
from tests.annotation_exports import BOX, POLYGON, write_cvat_coco
from tests.runs import ROOT, cli_env, in_process, tf_script

# Conversions here are read back, not analysed or reported (~1 s each left out).
_FAST = ("--no_analyze", "--no_report", "--splits", "train=1.0")
_LABELS = ("red", "green", "blue")  # class ids 1, 2, 3 in the COCO file
_COLOURS = {1: (255, 0, 0), 2: (0, 255, 0), 3: (0, 0, 255)}
_NUM_IMAGES = 24
# Several sizes and both orientations: the crop, resize and pad see different aspects.
_SIZES = ((120, 90), (96, 72), (90, 120), (128, 80), (100, 100), (80, 64))
IMAGE_SIZE = 64
GLOBAL_BATCH = 4
# A pixel is its class's colour when that channel is bright (bilinear edges blend with black:
# those are neither) and the others stay dark.
_BRIGHT = 128
_DARK = 40
# Boxes are checked well inside (pixels that no resize blends with the background) and, for
# stray colour, a little outside (the resize's blend reaches ~1 output pixel past an edge).
_SHRINK_PX = 2
_GROW_PX = 2
# "Predominantly": a resized rectangle's inside, a mask's pixels.
_MOSTLY = 0.9


def _diamond(x0: int, y0: int, x1: int, y1: int) -> list[float]:
    """The POLYGON shape of tests/annotation_exports.py: through the box's edge midpoints."""
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return [cx, y0, x1, cy, cx, y1, x0, cy]


def _painted(width: int, height: int, objects) -> tuple[np.ndarray, np.ndarray]:
    """(RGB image, label map) of `objects` (class, x0, y0, x1, y1, shape) on black: a polygon
    rasterised as pycocotools rasterises its COCO segmentation (the converter's instance mask)."""
    image = np.zeros((height, width, 3), np.uint8)
    labels = np.zeros((height, width), np.uint8)
    for cls, x0, y0, x1, y1, shape in objects:
        if shape == POLYGON:
            rle = mask_utils.merge(
                mask_utils.frPyObjects([_diamond(x0, y0, x1, y1)], height, width)
            )
            where = mask_utils.decode(rle).astype(bool)
        else:
            where = np.zeros((height, width), bool)
            where[y0:y1, x0:x1] = True
        image[where] = _COLOURS[cls]
        labels[where] = cls
    return image, labels


def _layout(index: int, rng: np.random.Generator):
    """One image's size and 1-3 objects of distinct classes, side by side (never overlapping)."""
    width, height = _SIZES[index % len(_SIZES)]
    count = 1 + index % 3
    classes = rng.permutation([1, 2, 3])[:count]
    column = width // count
    objects = []
    for k, cls in enumerate(classes):
        w = int(rng.integers(14, column - 4 + 1))
        h = int(rng.integers(14, height - 4 + 1))
        x0 = k * column + 2 + int(rng.integers(0, column - 4 - w + 1))
        y0 = 2 + int(rng.integers(0, height - 4 - h + 1))
        shape = POLYGON if rng.random() < 0.5 else BOX
        objects.append((int(cls), x0, y0, x0 + w, y0 + h, shape))
    return width, height, objects


@pytest.fixture(scope="module")
def painted(tmp_path_factory) -> dict:
    """The coloured dataset converted with --annotations (COCO) and --masks (label maps)."""
    src = tmp_path_factory.mktemp("painted")
    rng = np.random.default_rng(11)
    layouts = [_layout(i, rng) for i in range(_NUM_IMAGES)]
    images = [
        (
            f"img{i:02d}.png",
            w,
            h,
            [(_LABELS[c - 1], x0, y0, x1, y1, s) for c, x0, y0, x1, y1, s in objs],
        )
        for i, (w, h, objs) in enumerate(layouts)
    ]
    export = write_cvat_coco(src, images, labels=_LABELS)
    masks = src / "masks"
    masks.mkdir()
    for (name, *_), (w, h, objs) in zip(images, layouts, strict=True):
        pixels, labels = _painted(w, h, objs)
        path = export.image_paths[name]
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path)
        Image.fromarray(labels, mode="L").save(masks / f"{path.stem}.png")
    out = tmp_path_factory.mktemp("painted_out") / "ds"
    in_process(
        "convert", "--input", src / "images" / "*.png", "--annotations", export.annotations,
        "--masks", f"{masks}/{{stem}}.png", "--output", out, *_FAST,
    )  # fmt: skip
    return {"dir": str(out), "objects": sum(len(objs) for _, _, objs in layouts)}


@pytest.fixture(scope="module")
def numbered(tmp_path_factory) -> str:
    """Images with one object each whose class id is the image's number (1..24): a batch's
    example identities are its `classes[:, 0]`. The crop always keeps one whole object, so
    the only object is never dropped."""
    src = tmp_path_factory.mktemp("numbered")
    labels = [f"image{i}" for i in range(1, _NUM_IMAGES + 1)]
    images = []
    for i in range(1, _NUM_IMAGES + 1):
        width, height = _SIZES[i % len(_SIZES)]
        x0, y0 = i % 7, i % 5  # distinct pixels: no image is dropped as a duplicate
        images.append((f"n{i:02d}.png", width, height, [(labels[i - 1], x0, y0, x0 + 30, y0 + 20)]))
    export = write_cvat_coco(src, images, labels=labels)
    for name, width, height, ((_, x0, y0, x1, y1),) in images:
        pixels = np.zeros((height, width, 3), np.uint8)
        pixels[y0:y1, x0:x1] = 8 * int(name[1:3])
        export.image_paths[name].parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(export.image_paths[name])
    out = tmp_path_factory.mktemp("numbered_out") / "ds"
    in_process(
        "convert", "--input", src / "images" / "*.png", "--annotations", export.annotations,
        "--output", out, *_FAST,
    )  # fmt: skip
    return str(out)


def _interior(region: np.ndarray, margin: int = 2) -> np.ndarray:
    """`region`'s pixels at least `margin` pixels from its edge (and the image's)."""
    inside = region.copy()
    for _ in range(margin):
        shrunk = np.zeros_like(inside)
        shrunk[1:-1, 1:-1] = (
            inside[1:-1, 1:-1] & inside[:-2, 1:-1] & inside[2:, 1:-1] & inside[1:-1, :-2]
            & inside[1:-1, 2:]
        )  # fmt: skip
        inside = shrunk
    return inside


def _colour_classes(image: np.ndarray) -> np.ndarray:
    """Per pixel: the class whose colour it is (1-3), 0 where dark, -1 otherwise (blended)."""
    image = image.astype(np.int32)
    top = image.max(axis=-1)
    channel = image.argmax(axis=-1)
    second = np.sort(image, axis=-1)[..., 1]
    found = np.full(image.shape[:2], -1, np.int32)
    found[(top >= _BRIGHT) & (second <= _DARK)] = channel[(top >= _BRIGHT) & (second <= _DARK)] + 1
    found[top <= _DARK] = 0
    return found


def _pixel_box(box: np.ndarray, size: int) -> tuple[float, float, float, float]:
    return tuple(float(v) * size for v in box)  # ymin, xmin, ymax, xmax in output pixels


def _check_example(image, targets, b: int, strict_outside: bool) -> int:
    """Each kept object's box (and mask) is on its colour; colour outside the kept boxes
    belongs to no kept class (a crop's dropped objects keep their remnants) or, with
    `strict_outside`, there is none. Returns the kept objects."""
    colours = _colour_classes(image)
    size = image.shape[0]
    count = int(targets["num_instances"][b])
    classes = targets["classes"][b]
    assert (classes[count:] == -1).all() and (classes[:count] > 0).all()
    covered = np.zeros(colours.shape, bool)
    for slot in range(count):
        cls = int(classes[slot])
        ymin, xmin, ymax, xmax = _pixel_box(targets["boxes"][b, slot], size)
        assert 0 <= ymin < ymax <= size and 0 <= xmin < xmax <= size
        inner = colours[
            int(np.ceil(ymin)) + _SHRINK_PX : int(np.floor(ymax)) - _SHRINK_PX,
            int(np.ceil(xmin)) + _SHRINK_PX : int(np.floor(xmax)) - _SHRINK_PX,
        ]
        rows = slice(max(0, int(ymin) - _GROW_PX), int(np.ceil(ymax)) + _GROW_PX)
        cols = slice(max(0, int(xmin) - _GROW_PX), int(np.ceil(xmax)) + _GROW_PX)
        covered[rows, cols] = True
        if "masks" in targets:
            mask = targets["masks"][b, slot].astype(bool)
            assert mask.any(), f"class {cls}: an empty mask"
            on_colour = (colours[mask] == cls).mean()
            assert on_colour > _MOSTLY, f"class {cls}: {on_colour:.0%} of its mask is its colour"
            # No mask pixel outside its box (grown by the resize's blend).
            assert not (mask & ~_grown(rows, cols, mask.shape)).any(), f"class {cls}: mask off box"
            rectangle = mask[rows, cols].sum() > 0.75 * (ymax - ymin) * (xmax - xmin)
        else:
            rectangle = True
        if inner.size:
            share = (inner == cls).mean()
            others = np.isin(inner, [c for c in _COLOURS if c != cls]).mean()
            # A rectangle fills its box; a diamond half of it (at least 30% of a cut one).
            least = _MOSTLY if rectangle else 0.25
            assert share > least, f"class {cls}: {share:.0%} of its box is its colour"
            assert others == 0, f"class {cls}: another class's colour in its box"
        # All of the class's colour is inside its box.
        assert not ((colours == cls) & ~_grown(rows, cols, colours.shape)).any(), (
            f"class {cls}: its colour outside its box"
        )
    outside = colours[~covered]
    if strict_outside:
        assert (outside == 0).all(), "colour outside every box"
    else:
        assert not np.isin(outside, classes[:count]).any()
    return count


def _grown(rows: slice, cols: slice, shape) -> np.ndarray:
    where = np.zeros(shape, bool)
    where[rows, cols] = True
    return where


def _batches(ds, steps: int) -> list[tuple[np.ndarray, dict]]:
    out = []
    for images, targets in ds.take(steps):
        out.append((images.numpy(), {k: v.numpy() for k, v in targets.items()}))
    return out


def test_training_boxes_and_masks_follow_crops_flips_and_resizes(painted):
    ds = reader.make_dataset(
        painted["dir"], "train", GLOBAL_BATCH, training=True, image_size=IMAGE_SIZE, seed=3,
        task=Detection(masks=True),
    )  # fmt: skip
    batches = _batches(ds, 12)  # two epochs
    kept = 0
    for images, targets in batches:
        assert images.shape == (GLOBAL_BATCH, IMAGE_SIZE, IMAGE_SIZE, 3)
        assert images.dtype == np.uint8
        assert targets["boxes"].shape == (GLOBAL_BATCH, 3, 4)
        assert targets["masks"].shape == (GLOBAL_BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)
        for b in range(GLOBAL_BATCH):
            kept += _check_example(images[b], targets, b, strict_outside=False)
    # The crop keeps one whole object at least; most objects survive it.
    assert kept > 0.6 * 2 * painted["objects"]


def test_evaluation_maps_boxes_into_the_padded_frame(painted):
    ds = reader.make_dataset(
        painted["dir"], "train", GLOBAL_BATCH, training=False, image_size=IMAGE_SIZE,
        task=Detection(masks=True),
    )  # fmt: skip
    kept = 0
    for images, targets in _batches(ds, _NUM_IMAGES // GLOBAL_BATCH + 1):
        for b in range(images.shape[0]):
            info = targets["image_info"][b]
            (height, width), (scaled_h, scaled_w), (y_scale, x_scale) = info[0], info[1], info[2]
            assert (height, width) in {(h, w) for w, h in _SIZES}
            assert max(scaled_h, scaled_w) == IMAGE_SIZE
            np.testing.assert_allclose((y_scale, x_scale), (scaled_h / height, scaled_w / width))
            assert (images[b, int(scaled_h) :] == 0).all(), "the bottom padding is not black"
            assert (images[b, :, int(scaled_w) :] == 0).all(), "the right padding is not black"
            boxes = targets["boxes"][b, : targets["num_instances"][b]]
            assert (boxes[:, 2] <= scaled_h / IMAGE_SIZE + 1e-6).all()
            assert (boxes[:, 3] <= scaled_w / IMAGE_SIZE + 1e-6).all()
            kept += _check_example(images[b], targets, b, strict_outside=True)
    assert kept == painted["objects"]  # evaluation drops none


def _identities(batches) -> list[list[int]]:
    return [[int(c) for c in targets["classes"][:, 0]] for _, targets in batches]


def test_one_training_epoch_reads_every_image_once(numbered):
    steps = steps_per_epoch(numbered, "train", GLOBAL_BATCH)
    assert steps == _NUM_IMAGES // GLOBAL_BATCH
    ds = reader.make_dataset(
        numbered, "train", GLOBAL_BATCH, training=True, image_size=32, seed=5, task="detection"
    )
    batches = _batches(ds, steps)
    for _, targets in batches:
        assert (targets["num_instances"] == 1).all()
    seen = sorted(i for batch in _identities(batches) for i in batch)
    assert seen == list(range(1, _NUM_IMAGES + 1))


def test_start_step_resumes_batch_for_batch(numbered):
    steps, start = 2 * _NUM_IMAGES // GLOBAL_BATCH, 3  # into the second epoch
    options = dict(training=True, image_size=32, seed=5, task="detection")
    whole = _batches(reader.make_dataset(numbered, "train", GLOBAL_BATCH, **options), steps)
    resumed = _batches(
        reader.make_dataset(numbered, "train", GLOBAL_BATCH, start_step=start, **options),
        steps - start,
    )
    assert _identities(resumed) == _identities(whole)[start:]
    for (_, expected), (_, got) in zip(whole[start:], resumed, strict=True):
        np.testing.assert_array_equal(got["boxes"], expected["boxes"])  # the same crops


def test_segmentation_label_map_follows_the_painted_colours(painted):
    ds = reader.make_dataset(
        painted["dir"], "train", GLOBAL_BATCH, training=True, image_size=IMAGE_SIZE, seed=3,
        task="segmentation",
    )  # fmt: skip
    for images, targets in _batches(ds, 12):
        labels = targets["segmentation"]
        assert labels.shape == (GLOBAL_BATCH, IMAGE_SIZE, IMAGE_SIZE)
        assert labels.dtype == np.uint8
        for b in range(GLOBAL_BATCH):
            colours = _colour_classes(images[b])
            assert set(np.unique(labels[b])) <= {0, 1, 2, 3}
            for cls in _COLOURS:
                # Away from the label's edge: there the image's bilinear resize blends colours
                # while the label map's nearest neighbour does not (crops zoom in up to 3x).
                where = _interior(labels[b] == cls)
                if where.any():
                    share = (colours[where] == cls).mean()
                    assert share > _MOSTLY, f"class {cls}: {share:.0%} of its label is its colour"
                painted_px = colours == cls
                if painted_px.any():
                    share = (labels[b][painted_px] == cls).mean()
                    assert share > _MOSTLY, f"class {cls}: {share:.0%} of its colour labelled"
            black = colours == 0  # a crop may lie inside one object: no black at all
            assert not black.any() or (labels[b][black] == 0).mean() > _MOSTLY


_MIRRORED = textwrap.dedent(
    """
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    from pipeline.reader import dataset as reader

    data_dir, batch = sys.argv[1], int(sys.argv[2])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    ds = reader.make_dataset(data_dir, "train", batch, strategy=strategy, training=True,
                             image_size=(32, 32), seed=3, task="detection")
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.Input((32, 32, 3)),
            tf.keras.layers.Rescaling(1 / 255),
            tf.keras.layers.Conv2D(4, 3, strides=2, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(4),
        ])
        optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step(images, targets):
        def replica(images, targets):
            real = tf.cast(targets["classes"][:, 0] != -1, tf.float32)
            with tf.GradientTape() as tape:
                predicted = model(images, training=True)
                per_example = tf.reduce_sum(tf.square(predicted - targets["boxes"][:, 0]), -1)
                loss = tf.reduce_sum(per_example * real) / batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss, tf.shape(images)[0]
        return strategy.run(replica, args=(images, targets))

    sizes = set()
    it = iter(ds)
    for _ in range(3):
        images, targets = next(it)
        loss, per_replica = step(images, targets)
        sizes |= {int(n) for n in strategy.experimental_local_results(per_replica)}
        total = strategy.reduce("SUM", loss, axis=None)
        assert bool(tf.math.is_finite(total)), total
    print("PER_REPLICA", sorted(sizes))
    print("OK")
    """
)


@pytest.mark.e2e  # a fresh process: the logical CPUs are set before TensorFlow starts
def test_mirrored_strategy_trains_a_keras_step_on_detection_targets(numbered):
    proc = subprocess.run(
        tf_script(_MIRRORED, numbered, str(GLOBAL_BATCH)),
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=cli_env(CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert "PER_REPLICA [2]" in lines
    assert lines[-1] == "OK"
