"""Detection and segmentation targets (pipeline/reader/objects.py), checked against the pixels.

Each object is painted in its class's own colour on black, so the pixels say where every target
must be: after parsing and augmenting, each kept box holds its colour, the rest is black (or what
is left of a dropped object), each mask and the label map are the painted pixels, padding is -1.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from core import schema
from pipeline.reader import box_formats, objects

pytestmark = pytest.mark.unit

HEIGHT, WIDTH = 96, 128
COLOURS = {1: (255, 0, 0), 2: (0, 255, 0), 3: (0, 0, 255), 4: (255, 255, 0), 5: (0, 255, 255)}
# (top, left, bottom, right) in pixels and class: apart, of five different areas (the largest
# three: classes 4, 1, 2).
OBJECTS = (
    ((8, 10, 40, 50), 1),
    ((50, 20, 90, 44), 2),
    ((12, 70, 30, 120), 3),
    ((60, 64, 84, 118), 4),
    ((44, 100, 56, 112), 5),
)
SPEC = {
    **schema.object_feature_spec(),
    **schema.feature_spec((schema.ENCODED, schema.HEIGHT, schema.WIDTH)),
}
SEEDS = [tf.constant([i, 17], tf.int64) for i in range(40)]


def _triangle(height: int, width: int) -> np.ndarray:
    """A lower-left triangle: a mask that a flip or a transpose within its box changes."""
    rows, cols = np.mgrid[0:height, 0:width]
    return ((cols + 0.5) / width <= (rows + 0.5) / height).astype(np.uint8)


def _paint(objs, shapes: dict | None = None):
    """The image and each object's mask: the object's pixels in its class's colour."""
    image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    masks = []
    for (top, left, bottom, right), label in objs:
        mask = np.zeros((HEIGHT, WIDTH), np.uint8)
        shape = (shapes or {}).get(label)
        mask[top:bottom, left:right] = shape(bottom - top, right - left) if shape else 1
        image[mask == 1] = COLOURS[label]
        masks.append(mask)
    return image, masks


def _png(array: np.ndarray) -> bytes:
    return tf.io.encode_png(array if array.ndim == 3 else array[:, :, None]).numpy()


def _record(objs=OBJECTS, *, masks=True, crowd=(), shapes=None) -> bytes:
    """A record as the converter writes it: make_example with the object keys in `extra`."""
    image, object_masks = _paint(objs, shapes)
    label_map = np.zeros((HEIGHT, WIDTH), np.uint8)
    for mask, (_, label) in zip(object_masks, objs, strict=True):
        label_map[mask == 1] = label
    corners = {c: [] for c in ("xmin", "ymin", "xmax", "ymax")}
    for (top, left, bottom, right), _ in objs:
        corners["xmin"].append(left / WIDTH)
        corners["ymin"].append(top / HEIGHT)
        corners["xmax"].append(right / WIDTH)
        corners["ymax"].append(bottom / HEIGHT)
    extra = {
        schema.SOURCE_ID: "1",
        **{schema.OBJECT_BBOX[c]: values for c, values in corners.items()},
        schema.OBJECT_LABEL: [label for _, label in objs],
        schema.OBJECT_TEXT: [f"class{label}" for _, label in objs],
        schema.OBJECT_AREA: [float(m.sum()) for m in object_masks],
        schema.OBJECT_IS_CROWD: [int(label in crowd) for _, label in objs],
        schema.OBJECT_DIFFICULT: [0] * len(objs),
        schema.OBJECT_TRUNCATED: [0] * len(objs),
        schema.OBJECT_MASK: [_png(m) for m in object_masks] if masks else [],
        schema.SEGMENTATION: _png(label_map),
        schema.SEGMENTATION_FORMAT: "png",
    }
    encoded = _png(image)
    return schema.make_example(
        encoded=encoded, image_format="png", height=HEIGHT, width=WIDTH, channels=3, label=0,
        label_text="", filename="/data/a.png", sha256="0" * 64, extra=extra,
    )  # fmt: skip


def _parse(record: bytes | tf.Tensor, max_instances: int = 8, masks: bool = True):
    """(image, targets with masks and the label map) of one record."""
    features = tf.io.parse_single_example(record, SPEC)
    targets = objects.parse_targets(features, max_instances, masks=masks)
    targets[objects.SEGMENTATION] = objects.parse_segmentation(features)
    return tf.io.decode_png(features[schema.ENCODED], channels=3), targets


def _np(targets: dict) -> dict:
    return {key: np.asarray(value) for key, value in targets.items()}


def _box_pixels(box, height: int, width: int, margin: float):
    """Pixels whose centres lie inside `box` shrunk by `margin` pixels (negative: grown)."""
    ymin, xmin, ymax, xmax = box * [height, width, height, width]
    rows = np.arange(height) + 0.5
    cols = np.arange(width) + 0.5
    in_rows = (rows >= ymin + margin) & (rows <= ymax - margin)
    in_cols = (cols >= xmin + margin) & (cols <= xmax - margin)
    return in_rows[:, None] & in_cols[None, :]


def _is(image: np.ndarray, colour) -> np.ndarray:
    return (image == np.array(colour, np.uint8)).all(axis=-1)


def _check(image, targets, margin: float = 0.0, painted=tuple(COLOURS), shaped=()) -> list[int]:
    """Every target where the pixels say; returns the kept classes.

    `margin`: output pixels a resize blends at each edge (0: no resize, everything exact).
    `painted`: the classes in the record; `shaped`: those whose object does not fill its box.
    """
    image, t = np.asarray(image), _np(targets)
    height, width = image.shape[:2]
    n = int(t["num_instances"])
    kept = [int(c) for c in t["classes"][:n]]
    # Padding: after the objects, class -1, zero box, not crowd, empty mask.
    assert (t["classes"][n:] == -1).all() and (t["boxes"][n:] == 0).all()
    assert (t["is_crowd"][n:] == 0).all() and (t["masks"][n:] == 0).all()
    assert len(set(kept)) == n and set(kept) <= set(painted)
    near = np.zeros((height, width), bool)
    for i, label in enumerate(kept):
        box = t["boxes"][i]
        assert (0 <= box).all() and (box <= 1).all() and box[0] < box[2] and box[1] < box[3]
        inside = _box_pixels(box, height, width, margin)
        assert inside.any() or margin, (label, box)  # a resized sliver may be all edge
        if label not in shaped:
            assert _is(image[inside], COLOURS[label]).all(), (label, box)
            assert (t["masks"][i][inside] == 1).all(), label
        grown = _box_pixels(box, height, width, -margin)
        assert (t["masks"][i][~grown] == 0).all(), label
        near |= grown
    # Outside the kept boxes: black, or a dropped object's remains (blended with black).
    dropped = [np.array(COLOURS[c]) > 0 for c in painted if c not in kept]
    outside = image[~near] > 1
    remains = np.zeros(len(outside), bool)
    for channels in dropped:
        remains |= (outside <= channels).all(axis=-1)
    assert (~outside.any(axis=-1) | remains).all()
    _check_maps(image, t, kept)
    return kept


def _check_maps(image: np.ndarray, t: dict, kept: list[int]) -> None:
    """Masks and label map agree with every pixel of one pure colour: a nearest-neighbour pixel
    is the source pixel of the largest bilinear weight, so it is exact wherever colours are."""
    black = _is(image, (0, 0, 0))
    assert (t["masks"][:, black] == 0).all()
    for i, label in enumerate(kept):
        assert (t["masks"][i][_is(image, COLOURS[label])] == 1).all(), label
    if objects.SEGMENTATION in t:
        seg = t[objects.SEGMENTATION]
        assert (seg[black] == 0).all()
        for label, colour in COLOURS.items():
            assert (seg[_is(image, colour)] == label).all(), label


def _painted_area(label: int) -> int:
    (top, left, bottom, right), _ = next(o for o in OBJECTS if o[1] == label)
    return (bottom - top) * (right - left)


def test_parse_targets_gives_yxyx_boxes_classes_masks_and_padding():
    image, targets = _parse(_record(crowd=(3,)), max_instances=8)
    t = _np(targets)
    assert t["boxes"].shape == (8, 4) and t["boxes"].dtype == np.float32
    # Masks of the real objects only (with_size pads them to the slots).
    assert t["classes"].dtype == np.int32 and t["masks"].shape == (5, HEIGHT, WIDTH)
    assert int(t["num_instances"]) == 5 and int(t["num_dropped"]) == 0
    assert t["classes"].tolist() == [1, 2, 3, 4, 5, -1, -1, -1]
    assert t["is_crowd"].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    # (ymin, xmin, ymax, xmax): the first object's rows 8-40, columns 10-50.
    np.testing.assert_allclose(t["boxes"][0], [8 / 96, 10 / 128, 40 / 96, 50 / 128], rtol=1e-6)
    assert _check(image, targets) == [1, 2, 3, 4, 5]
    _, painted = _paint(OBJECTS)
    np.testing.assert_array_equal(t["masks"][:5], np.stack(painted))
    assert t[objects.SEGMENTATION].shape == (HEIGHT, WIDTH)


def test_max_instances_keeps_the_largest_in_the_records_order_and_counts_the_rest():
    image, targets = _parse(_record(), max_instances=3)
    t = _np(targets)
    assert t["classes"].tolist() == [1, 2, 4]  # areas 1280, 960, 1296; 900 and 144 dropped
    assert int(t["num_instances"]) == 3 and int(t["num_dropped"]) == 2
    assert t["masks"].shape == (3, HEIGHT, WIDTH)
    _, painted = _paint(OBJECTS)
    np.testing.assert_array_equal(t["masks"], np.stack([painted[0], painted[1], painted[3]]))


def test_a_negative_is_all_padding_and_augments():
    image, targets = _parse(_record(()), max_instances=4)
    t = _np(targets)
    assert int(t["num_instances"]) == 0 and t["classes"].tolist() == [-1] * 4
    assert (t["boxes"] == 0).all() and t["masks"].shape == (0, HEIGHT, WIDTH)
    out, moved = objects.augment(image, targets, SEEDS[0], (48, 64))
    assert out.shape == (48, 64, 3) and _check(out, moved, 2, painted=()) == []
    assert moved["masks"].shape == (4, 48, 64) and not moved["masks"].numpy().any()


def test_masks_of_a_record_without_them_are_its_boxes_filled():
    # The converter writes no masks for an image none of whose objects has a segment (and none
    # with --no_instance_masks): such an object's mask is its box, as mask_from_box writes it.
    features = tf.io.parse_single_example(_record(masks=False), SPEC)
    targets = objects.parse_targets(features, 8, masks=True)
    assert int(targets["num_instances"]) == 5
    for box, mask in zip(targets["boxes"][:5].numpy(), targets["masks"][:5].numpy(), strict=True):
        ys, xs = np.nonzero(mask)
        assert ys.min() == round(box[0] * HEIGHT) and ys.max() + 1 == round(box[2] * HEIGHT)
        assert xs.min() == round(box[1] * WIDTH) and xs.max() + 1 == round(box[3] * WIDTH)
        assert mask.sum() == len(set(ys)) * len(set(xs))
    assert not targets["masks"][5:].numpy().any()


def test_masks_without_the_image_size_say_what_to_parse():
    features = tf.io.parse_single_example(_record(), schema.object_feature_spec())
    with pytest.raises(ValueError, match="image/height"):
        objects.parse_targets(features, 8, masks=True)
    masks = objects.parse_targets(features, 8, masks=True, mask_size=(HEIGHT, WIDTH))["masks"]
    assert masks.shape == (5, HEIGHT, WIDTH)


def test_parse_segmentation_is_the_label_map_and_its_absence_names_the_option():
    image, targets = _parse(_record())
    seg = targets[objects.SEGMENTATION].numpy()
    assert seg.dtype == np.uint8 and sorted(np.unique(seg)) == [0, 1, 2, 3, 4, 5]
    assert (seg[8:40, 10:50] == 1).all() and seg[0, 0] == 0
    features = tf.io.parse_single_example(_record(), schema.object_feature_spec())
    features[schema.SEGMENTATION] = tf.constant(b"")
    with pytest.raises(tf.errors.InvalidArgumentError, match="--masks"):
        objects.parse_segmentation(features)


_random_crop = tf.function(objects.random_crop)


def test_random_crops_move_every_target_with_the_pixels_and_drop_the_hidden():
    image, targets = _parse(_record(crowd=(2,)))
    dropped_some = partial = 0
    for seed in SEEDS:
        out, moved = _random_crop(image, targets, seed)
        kept = _check(out, moved)
        t, pixels = _np(moved), np.asarray(out)
        counts = {c: int(_is(pixels, COLOURS[c]).sum()) for c in COLOURS}
        for label, count in counts.items():
            visible = count / _painted_area(label)
            assert (visible >= objects.MIN_VISIBLE) == (label in kept), (label, visible)
        # The Object Detection API's crop holds one whole object at least.
        assert any(counts[c] == _painted_area(c) for c in kept)
        assert [int(c) for c in t["is_crowd"][: len(kept)]] == [int(c == 2) for c in kept]
        assert t["masks"][: len(kept)].sum(axis=(1, 2)).tolist() == [counts[c] for c in kept]
        dropped_some += len(kept) < 5
        partial += out.shape[:2] != (HEIGHT, WIDTH)
    assert dropped_some >= 5 and partial >= 20  # the draws did crop and drop


@pytest.mark.parametrize(
    "min_visible, classes",
    [(0.3, [1, 3, 5, -1, -1]), (0.5, [1, 3, -1, -1, -1]), (None, [1, 2, 3, 4, 5])],
)
def test_boxes_under_min_visible_become_padding_after_the_kept_in_their_order(min_visible, classes):
    # Rows 0-48: classes 1 and 3 whole, 5 a third (rows 44-48 of 44-56), 2 and 4 not at all.
    image, targets = _parse(_record(crowd=(3,)), max_instances=5)
    out, moved = objects.crop(image, targets, (0, 0, 48, WIDTH), min_visible)
    t = _np(moved)
    assert t["classes"].tolist() == classes and out.shape == (48, WIDTH, 3)
    np.testing.assert_allclose(t["boxes"][0], [8 / 48, 10 / 128, 40 / 48, 50 / 128], rtol=1e-6)
    assert t["is_crowd"][t["classes"].tolist().index(3)] == 1
    if min_visible is None:  # clipped, never dropped: a hidden box is empty
        assert t["boxes"][1].tolist() == [1.0, 20 / 128, 1.0, 44 / 128]
    elif 5 in classes:  # clipped to the window's bottom
        _check(out, moved)
        np.testing.assert_allclose(t["boxes"][2], [44 / 48, 100 / 128, 1, 112 / 128], rtol=1e-6)
    else:
        _check(out, moved)


def test_a_window_past_the_image_pads_black_empty_masks_and_the_ignore_value():
    image, targets = _parse(_record())
    window = (-10, -20, HEIGHT + 20, WIDTH + 40)
    out, moved = objects.crop(image, targets, window)
    t, pixels = _np(moved), np.asarray(out)
    assert pixels.shape == (HEIGHT + 20, WIDTH + 40, 3)
    pad = np.ones(pixels.shape[:2], bool)
    pad[10 : 10 + HEIGHT, 20 : 20 + WIDTH] = False
    np.testing.assert_array_equal(pixels[~pad].reshape(image.shape), image)
    assert (pixels[pad] == 0).all() and (t["masks"][:, pad] == 0).all()
    seg = t[objects.SEGMENTATION]
    assert (seg[pad] == objects.IGNORE_VALUE).all() and (seg[~pad] != objects.IGNORE_VALUE).all()
    t.pop(objects.SEGMENTATION)  # its padding is the ignore value, not background
    assert _check(out, t) == [1, 2, 3, 4, 5]
    expected = (np.array([8, 10, 40, 50]) + [10, 20, 10, 20]) / [116, 168, 116, 168]
    np.testing.assert_allclose(t["boxes"][0], expected, rtol=1e-6)
    # Without dropping, too, the padding slots stay zeros when the window starts before the image.
    kept_all = _np(objects.crop_targets(targets, window, (HEIGHT, WIDTH), min_visible=None))
    np.testing.assert_array_equal(kept_all["boxes"], t["boxes"])


def test_flip_mirrors_boxes_masks_and_the_label_map_with_the_pixels():
    # A triangle object: its mask mirrored inside its box, not only its box moved.
    record = _record(shapes={3: _triangle})
    image, targets = _parse(record)
    out, moved = objects.flip(image, targets)
    t = _np(moved)
    np.testing.assert_allclose(t["boxes"][0], [8 / 96, 78 / 128, 40 / 96, 118 / 128], rtol=1e-6)
    assert (t["boxes"][5:] == 0).all()  # padding stays put
    pixels = np.asarray(out)
    for i, label in enumerate(t["classes"][:5]):
        np.testing.assert_array_equal(t["masks"][i], _is(pixels, COLOURS[label]))
    triangle = t["masks"][2][12:30, 8:58]
    np.testing.assert_array_equal(triangle, _triangle(18, 50)[:, ::-1])
    _check_maps(pixels, t, [1, 2, 3, 4, 5])


def test_random_flip_flips_half_the_draws_as_the_classification_reader_draws():
    image, targets = _parse(_record())
    flips = []
    for seed in SEEDS:
        out, moved = objects.random_flip(image, targets, seed)
        flipped = bool(np.asarray(moved["boxes"])[0][1] > 0.5)
        assert flipped == bool(tf.random.stateless_uniform([], seed=seed) < 0.5)
        np.testing.assert_array_equal(out, image[:, ::-1] if flipped else image)
        _check(out, moved)
        flips.append(flipped)
    assert 10 <= sum(flips) <= 30


_augment = tf.function(objects.augment)


def _margin(image, targets, seed, image_size) -> float:
    """The output pixels a bilinear resize blends at an edge: one source pixel, and one more."""
    _, _, h, w = objects.sample_crop_window(tf.shape(image), targets, objects.split_seed(seed)[0])
    return 1 + max(image_size[0] / int(h), image_size[1] / int(w))


@pytest.mark.parametrize("image_size", [(64, 96), (160, 160)])
def test_augment_keeps_every_target_on_its_pixels(image_size):
    image, targets = _parse(_record(shapes={5: _triangle}))
    both = set()
    for seed in SEEDS[:25]:
        out, moved = _augment(image, targets, seed, image_size)
        assert out.shape == (*image_size, 3) and out.dtype == tf.uint8
        assert moved["masks"].shape == (8, *image_size)
        assert moved[objects.SEGMENTATION].shape == image_size
        margin = _margin(image, targets, seed, image_size)
        _check(out, moved, margin, shaped=(5,))  # 5: a triangle, not its box
        flip_seed = objects.split_seed(seed)[1]
        both.add(bool(tf.random.stateless_uniform([], seed=flip_seed) < 0.5))
    assert both == {True, False}


@pytest.mark.parametrize(
    "image_size, scaled",
    [((64, 64), (48, 64)), ((48, 128), (48, 64)), ((192, 256), (192, 256)), ((80, 90), (68, 90))],
)
def test_resize_with_pad_maps_boxes_into_the_padded_frame(image_size, scaled):
    image, targets = _parse(_record(), max_instances=6)
    out, moved = objects.resize_with_pad(image, targets, image_size)
    t, pixels = _np(moved), np.asarray(out)
    assert pixels.shape == (*image_size, 3) and t["masks"].shape == (6, *image_size)
    frame = [scaled[0] / image_size[0], scaled[1] / image_size[1]] * 2
    expected = np.array([8 / 96, 10 / 128, 40 / 96, 50 / 128]) * frame
    np.testing.assert_allclose(t["boxes"][0], expected, rtol=1e-5)
    assert t["classes"].tolist() == [1, 2, 3, 4, 5, -1]
    np.testing.assert_allclose(
        t["image_info"], [[96, 128], scaled, [scaled[0] / 96, scaled[1] / 128], [0, 0]], rtol=1e-6
    )
    pad = np.ones(image_size, bool)
    pad[: scaled[0], : scaled[1]] = False
    assert (pixels[pad] == 0).all() and (t["masks"][:, pad] == 0).all()
    seg = t[objects.SEGMENTATION]
    assert (seg[pad] == objects.IGNORE_VALUE).all() and (seg[~pad] != objects.IGNORE_VALUE).all()
    margin = 1 + max(scaled[0] / 96, scaled[1] / 128)
    t.pop(objects.SEGMENTATION)  # its padding is the ignore value, not background
    assert _check(pixels, t, margin) == [1, 2, 3, 4, 5]


BOX = np.array([0.1, 0.2, 0.5, 0.6], np.float32)  # (ymin, xmin, ymax, xmax)


@pytest.mark.parametrize(
    "fmt, normalized, expected",
    [
        ("yxyx", False, [10, 40, 50, 120]),
        ("xyxy", False, [40, 10, 120, 50]),
        ("xywh", False, [40, 10, 80, 40]),
        ("center_xywh", False, [80, 30, 80, 40]),
        ("xyxy", True, [0.2, 0.1, 0.6, 0.5]),
        ("xywh", True, [0.2, 0.1, 0.4, 0.4]),
    ],
)
def test_box_format_writes_keras_formats(fmt, normalized, expected):
    out = box_formats.box_format(BOX, fmt, normalized, image_size=(100, 200))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("fmt", box_formats.BOX_FORMATS)
@pytest.mark.parametrize("normalized", [True, False])
def test_box_format_round_trips(fmt, normalized):
    rng = np.random.default_rng(3)
    corners = np.sort(rng.uniform(size=(2, 5, 2, 2)), axis=2).astype(np.float32)
    boxes = np.concatenate([corners[:, :, 0], corners[:, :, 1]], axis=-1)  # ymin<ymax, xmin<xmax
    size = tf.constant([480, 640])
    there = box_formats.box_format(boxes, fmt, normalized, size)
    back = box_formats.from_box_format(there, fmt, normalized, size)
    assert there.shape == (2, 5, 4)
    np.testing.assert_allclose(back, boxes, atol=1e-6)


def test_box_format_refuses_unknown_formats_and_pixels_without_a_size():
    with pytest.raises(ValueError, match="center_xywh"):
        box_formats.box_format(BOX, "rel_xyxy")
    with pytest.raises(ValueError, match="image_size"):
        box_formats.from_box_format(BOX, "xyxy", normalized=False)


def _seed(index) -> tf.Tensor:
    return tf.stack([tf.cast(index, tf.int64), tf.constant(5, tf.int64)])


def _train(record, index):
    image, targets = _parse(record, max_instances=6)
    return objects.augment(image, targets, _seed(index), (64, 80))


def test_a_dataset_map_in_graph_mode_batches_what_eager_gives():
    records = [_record(), _record(()), _record(OBJECTS[:2], crowd=(2,)), _record(OBJECTS[3:])]
    ds = tf.data.Dataset.from_tensor_slices(records).enumerate().map(lambda i, r: _train(r, i))
    images, targets = next(iter(ds.batch(4)))
    assert ds.element_spec[0].shape == (64, 80, 3)
    assert ds.element_spec[1]["masks"].shape == (6, 64, 80)
    assert images.shape == (4, 64, 80, 3) and targets["boxes"].shape == (4, 6, 4)
    assert targets["classes"].shape == (4, 6) and targets["num_instances"].shape == (4,)
    assert int(targets["num_instances"][1]) == 0
    for i, record in enumerate(records):
        image, eager = _train(record, i)
        np.testing.assert_array_equal(images[i], image)
        for key, value in eager.items():
            np.testing.assert_array_equal(targets[key][i], value, err_msg=key)
        painted = [label for _, label in ([OBJECTS, (), OBJECTS[:2], OBJECTS[3:]][i])]
        margin = _margin(*_parse(record, max_instances=6), _seed(i), (64, 80))
        _check(images[i], {k: v[i] for k, v in targets.items()}, margin, painted)


def test_evaluation_batches_in_a_dataset_map():
    def evaluate(record):
        image, targets = _parse(record, max_instances=6)
        return objects.resize_with_pad(image, targets, (64, 64))

    ds = tf.data.Dataset.from_tensor_slices([_record(), _record(())]).map(evaluate).batch(2)
    images, targets = next(iter(ds))
    assert images.shape == (2, 64, 64, 3) and targets["image_info"].shape == (2, 4, 2)
    assert targets[objects.SEGMENTATION].shape == (2, 64, 64)
    assert targets["classes"].numpy()[1].tolist() == [-1] * 6
    keras = box_formats.box_format(targets["boxes"], "xyxy", normalized=False, image_size=(64, 64))
    assert keras.shape == (2, 6, 4)
    assert math.isclose(float(keras[0, 0, 0]), 10 / 128 * 64, rel_tol=1e-5)
