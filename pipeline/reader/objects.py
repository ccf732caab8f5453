"""Detection and segmentation targets of one record: parsed to fixed shapes, moved with the pixels
by the training crop, flip and resize and by the evaluation resize-with-pad, and written in the box
formats of Keras detection models (box_formats.py). TensorFlow graph functions of one example;
parse_targets, crop_targets and flip_targets also take a batch (leading dimension B) of boxes.
TensorFlow and the core only.

Targets are a dict: "boxes" float32 [M, 4] normalised (ymin, xmin, ymax, xmax), "classes" int32 [M]
(-1 marks a padding slot), "is_crowd" int32 [M], "num_instances" int32, "num_dropped" int32, and
optionally "masks" uint8 [N, H, W] (the N = num_instances real objects' only, so that crops and
resizes skip the padding; with_size pads them to [M, H, W]) and "segmentation" uint8 [H, W]. The
real objects always come first: slots num_instances..M-1 are padding (box 0, class -1,
is_crowd 0, mask 0).
"""

from __future__ import annotations

import tensorflow as tf

from core import schema

__all__ = [
    "IGNORE_VALUE",
    "MIN_VISIBLE",
    "SEGMENTATION",
    "augment",
    "with_size",
    "crop",
    "crop_targets",
    "flip",
    "flip_draw",
    "flip_targets",
    "parse_segmentation",
    "parse_targets",
    "random_crop",
    "random_flip",
    "resize",
    "resize_targets",
    "resize_with_pad",
    "sample_crop_window",
    "split_seed",
]

# The label map's "ignore" value: what --mask_ignore writes by default (docs/annotations.md).
IGNORE_VALUE = 255
# The key of the label map in the targets (parse_segmentation's output).
SEGMENTATION = "segmentation"
# The training crop is the Object Detection API's random_crop_image (core/preprocessor.py), with
# its defaults: a window of 10%-100% of the area and aspect 3/4-4/3 holding at least one whole
# object (the whole image when 100 tries find none); a box under 30% visible is dropped.
MIN_OBJECT_COVERED = 1.0
CROP_AREA_RANGE = (0.1, 1.0)
CROP_ASPECT_RANGE = (0.75, 1.33)
CROP_MAX_ATTEMPTS = 100
MIN_VISIBLE = 0.3
# The per-instance targets and the value a padding slot holds.
_PADDING = {"boxes": 0.0, "classes": -1, "is_crowd": 0}
_CORNERS = ("ymin", "xmin", "ymax", "xmax")


def parse_targets(
    features: dict, max_instances: int, masks: bool = False, mask_size=None
) -> dict[str, tf.Tensor]:
    """Fixed-shape detection targets of one parsed record.

    An image with more than `max_instances` objects keeps its largest (by box area), in the
    record's order; "num_dropped" counts the others.

    Args:
        features: `tf.io.parse_single_example(record, schema.object_feature_spec())` (the
            per-object lists as SparseTensors or dense vectors).
        max_instances: slots per image (dataset_info.json's annotations.splits[split].max_per_image
            keeps every object).
        masks: also decode each kept object's PNG into "masks" uint8 [num_instances, H, W].
        mask_size: (height, width) of the stored image; by default the features' image/height
            and image/width (parse them too, with `schema.feature_spec((HEIGHT, WIDTH))`).

    Returns:
        The targets dict of the module docstring.

    Raises:
        ValueError: max_instances < 1, or masks without a mask size.
    """
    if max_instances < 1:
        raise ValueError(f"max_instances must be at least 1, got {max_instances}")
    boxes = tf.stack([_dense(features[schema.OBJECT_BBOX[c]]) for c in _CORNERS], axis=-1)
    classes = tf.cast(_dense(features[schema.OBJECT_LABEL]), tf.int32)
    is_crowd = tf.cast(_dense(features[schema.OBJECT_IS_CROWD]), tf.int32)
    count = _count(features[schema.OBJECT_LABEL])
    targets, index = _largest(boxes, classes, is_crowd, count, max_instances)
    if masks:
        if classes.shape.rank != 1:
            raise ValueError("parse_targets(masks=True) takes one record, not a batch")
        size = _mask_size(features, mask_size)
        kept = index[: targets["num_instances"]]
        targets["masks"] = _decode_masks(features, kept, count, size, tf.gather(boxes, kept))
    return targets


def _largest(boxes, classes, is_crowd, count, max_instances: int) -> tuple[dict, tf.Tensor]:
    """The targets of each image's `max_instances` largest objects (by box area) in the record's
    order, padded; and their indices in the record's lists (padding: past the lists)."""
    rank = classes.shape.rank
    found = tf.shape(classes)[-1]
    width = tf.maximum(found, max_instances)  # top_k needs max_instances candidates

    def padded(values, inner=0):
        spec = [[0, 0]] * (rank - 1) + [[0, width - found]] + [[0, 0]] * inner
        return tf.pad(values, spec)

    boxes, classes, is_crowd = padded(boxes, 1), padded(classes), padded(is_crowd)
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    listed = tf.range(width) < count[..., None]
    top = tf.math.top_k(tf.where(listed, area, -1.0), k=max_instances).indices
    kept = tf.minimum(count, max_instances)
    real = tf.range(max_instances) < kept[..., None]
    # The largest objects, put back in the record's order; padding slots after them.
    index = tf.sort(tf.where(real, top, width), axis=-1)
    safe = tf.minimum(index, width - 1)

    def take(values, padding):
        taken = tf.gather(values, safe, batch_dims=rank - 1)
        where = real[..., None] if taken.shape.rank > rank else real
        return tf.where(where, taken, tf.cast(padding, taken.dtype))

    targets = {
        "boxes": take(boxes, 0.0),
        "classes": take(classes, -1),
        "is_crowd": take(is_crowd, 0),
        "num_instances": kept,
        "num_dropped": count - kept,
    }
    return targets, index


def _count(values) -> tf.Tensor:
    """Objects per record: a scalar for one record, [B] for a batch's SparseTensor."""
    if isinstance(values, tf.SparseTensor) and values.shape.rank == 2:
        rows = tf.cast(values.dense_shape[0], tf.int32)
        first = tf.cast(values.indices[:, 0], tf.int32)
        return tf.math.bincount(first, minlength=rows, maxlength=rows)
    return tf.shape(_dense(values))[-1]


def _dense(values) -> tf.Tensor:
    """A per-object list as a dense vector (a VarLenFeature parses as a SparseTensor)."""
    if isinstance(values, tf.SparseTensor):
        return tf.sparse.to_dense(values)
    return tf.convert_to_tensor(values)


def _mask_size(features: dict, mask_size):
    if mask_size is not None:
        return tf.cast(mask_size[0], tf.int32), tf.cast(mask_size[1], tf.int32)
    if schema.HEIGHT not in features or schema.WIDTH not in features:
        raise ValueError(
            "parse_targets(masks=True) needs the stored image's size: parse "
            f"{schema.HEIGHT} and {schema.WIDTH} too, or pass mask_size=(height, width)"
        )
    return tf.cast(features[schema.HEIGHT], tf.int32), tf.cast(features[schema.WIDTH], tf.int32)


def _decode_masks(features, index, count, size, boxes) -> tf.Tensor:
    """uint8 [N, H, W]: the PNGs of the N objects at `index` (their `boxes`, filled, for a record
    whose objects have no segments: the converter writes no masks there)."""
    pngs = _dense(features[schema.OBJECT_MASK])
    height, width = size
    has_pngs = tf.size(pngs) > 0
    agree = tf.debugging.assert_equal(
        tf.logical_or(tf.equal(tf.size(pngs), count), tf.logical_not(has_pngs)),
        True,
        message="a record has fewer masks than objects: re-run the conversion",
    )

    def one(i):
        return tf.cond(
            has_pngs,
            lambda: tf.io.decode_png(tf.gather(pngs, tf.gather(index, i)), channels=1)[:, :, 0],
            lambda: _box_mask(tf.gather(boxes, i), height, width),
        )

    with tf.control_dependencies([agree]):
        masks = tf.cond(
            tf.size(index) > 0,
            lambda: tf.map_fn(
                one,
                tf.range(tf.size(index)),
                fn_output_signature=tf.TensorSpec([None, None], tf.uint8),
            ),
            lambda: tf.zeros([0, height, width], tf.uint8),
        )
    same = tf.debugging.assert_equal(
        tf.shape(masks)[1:], tf.stack([height, width]), message="a mask is not the image's size"
    )
    with tf.control_dependencies([same]):
        return tf.identity(masks)


def _box_mask(box: tf.Tensor, height, width) -> tf.Tensor:
    """uint8 [height, width]: 1 on the pixels whose centres lie in the normalised `box`."""
    rows = (tf.cast(tf.range(height), tf.float32) + 0.5) / tf.cast(height, tf.float32)
    cols = (tf.cast(tf.range(width), tf.float32) + 0.5) / tf.cast(width, tf.float32)
    inside_y = (rows >= box[0]) & (rows < box[2])
    inside_x = (cols >= box[1]) & (cols < box[3])
    return tf.cast(inside_y[:, None] & inside_x[None, :], tf.uint8)


def parse_segmentation(features: dict) -> tf.Tensor:
    """The label map of one parsed record: uint8 [H, W] (IGNORE_VALUE: no class).

    Args:
        features: parsed with `schema.object_feature_spec()` (image/segmentation/class/encoded).

    Returns:
        The decoded PNG's values (class ids, by index for palette PNGs).
    """
    encoded = features[schema.SEGMENTATION]
    present = tf.debugging.assert_greater(
        tf.strings.length(encoded),
        0,
        message=f"a record has no {schema.SEGMENTATION}: convert with --masks",
    )
    with tf.control_dependencies([present]):
        return tf.io.decode_png(encoded, channels=1)[:, :, 0]


def split_seed(seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(crop seed, flip seed) of one stateless seed.

    Two stateless ops given one seed read the same random stream, so the flip would follow the
    crop's first draw: each gets its own seed.
    """
    seeds = tf.random.experimental.stateless_split(seed, 2)
    return seeds[0], seeds[1]


def sample_crop_window(
    image_shape: tf.Tensor,
    targets: dict,
    seed: tf.Tensor,
    min_object_covered: float = MIN_OBJECT_COVERED,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """The Object Detection API's random crop window (see MIN_OBJECT_COVERED).

    Args:
        image_shape: [height, width, channels] (`tf.shape(image)`, or the JPEG header's
            `tf.io.extract_jpeg_shape`, so that the window can go to a fused crop decode).
        targets: the boxes to cover, if it has any; without boxes, the image is the box.
        seed: a stateless seed, shape [2].
        min_object_covered: the part of one box the window must hold (0.1 without boxes gives
            crops of any part of the image).

    Returns:
        (top, left, height, width) int32, inside the image.
    """
    boxes = tf.zeros([0, 4], tf.float32)
    if "boxes" in targets:
        boxes = targets["boxes"][: targets["num_instances"]]
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.cast(image_shape, tf.int32),
        bounding_boxes=boxes[None],
        seed=seed,
        min_object_covered=min_object_covered,
        aspect_ratio_range=CROP_ASPECT_RANGE,
        area_range=CROP_AREA_RANGE,
        max_attempts=CROP_MAX_ATTEMPTS,
        use_image_if_no_bounding_boxes=True,
    )
    return begin[0], begin[1], size[0], size[1]


def crop_targets(
    targets: dict,
    window,
    image_size,
    min_visible: float | None = MIN_VISIBLE,
    ignore_value: int = IGNORE_VALUE,
) -> dict[str, tf.Tensor]:
    """The targets of the image's `window`.

    Boxes are clipped to the window; with `min_visible`, a box keeping less than that part of its
    area (or none) is dropped: its slot becomes padding, after the kept objects, which keep their
    order. Where the window reaches past the image, masks are padded with 0 and the label map
    with `ignore_value`.

    Args:
        targets: as parse_targets returns them (any of its keys; "segmentation" too), or a
            batch of boxes (no masks nor label maps).
        window: (top, left, height, width) in pixels; may reach past the image. For a batch,
            each a [B] tensor.
        image_size: (height, width) of the image the window is in ([B] each for a batch).
        min_visible: the part of a box's area that must stay in the window; None keeps
            every box (clipped).
        ignore_value: the label map's value where there is no image.

    Returns:
        The moved targets.
    """
    out = dict(targets)
    if "masks" in out:
        out["masks"] = _crop_pixels(out["masks"], window, 0, axis=1)
    if SEGMENTATION in out:
        out[SEGMENTATION] = _crop_pixels(out[SEGMENTATION], window, ignore_value)
    if "boxes" not in out:
        return out
    # Scalars for one image, [B] for a batch: each [..., 1, 1] against boxes [..., M, 4].
    top, left, height, width = (tf.cast(v, tf.float32)[..., None, None] for v in window)
    image_h, image_w = (tf.cast(v, tf.float32)[..., None, None] for v in image_size)
    offset = tf.concat([top / image_h, left / image_w] * 2, axis=-1)
    scale = tf.concat([image_h / height, image_w / width] * 2, axis=-1)
    moved = (out["boxes"] - offset) * scale
    clipped = tf.clip_by_value(moved, 0.0, 1.0)
    # Padding slots stay zeros (a window past the top left would move them inside).
    out["boxes"] = clipped = tf.where(_real(out)[..., None], clipped, out["boxes"])
    if min_visible is None:
        return out
    area = _area(clipped)
    keep = tf.logical_and(area > 0, area >= min_visible * _area(moved))
    return _compact(out, keep)


def _real(targets: dict) -> tf.Tensor:
    """bool [..., M]: the slots holding objects."""
    slots = tf.shape(targets["boxes"])[-2]
    return tf.range(slots) < tf.convert_to_tensor(targets["num_instances"])[..., None]


def _area(boxes: tf.Tensor) -> tf.Tensor:
    sides = tf.maximum(boxes[..., 2:] - boxes[..., :2], 0.0)
    return sides[..., 0] * sides[..., 1]


def _compact(targets: dict, keep: tf.Tensor) -> dict[str, tf.Tensor]:
    """The objects `keep` says first (in order), every other slot padding."""
    keep = tf.logical_and(keep, _real(targets))
    batch_dims = keep.shape.rank - 1
    # A stable sort of "dropped" puts the kept slots first, each side in its order.
    order = tf.argsort(tf.cast(tf.logical_not(keep), tf.int32), axis=-1, stable=True)
    out = dict(targets)
    out["num_instances"] = tf.reduce_sum(tf.cast(keep, tf.int32), axis=-1)
    kept = _real(out)
    if "masks" in out:  # one image's: only the kept objects' rows
        out["masks"] = tf.gather(out["masks"], order[: out["num_instances"]])
    for key, padding in _PADDING.items():
        if key in out:
            value = tf.gather(out[key], order, batch_dims=batch_dims)
            where = kept[..., None] if key == "boxes" else kept
            out[key] = tf.where(where, value, tf.cast(padding, value.dtype))
    return out


def _crop_pixels(pixels: tf.Tensor, window, fill, axis: int = 0) -> tf.Tensor:
    """`window` of the rows and columns at `axis`, `axis` + 1, padded with `fill` outside them."""
    top, left, height, width = (tf.cast(v, tf.int32) for v in window)
    shape = tf.shape(pixels)
    rows, cols = shape[axis], shape[axis + 1]
    y0, y1 = tf.clip_by_value(top, 0, rows), tf.clip_by_value(top + height, 0, rows)
    x0, x1 = tf.clip_by_value(left, 0, cols), tf.clip_by_value(left + width, 0, cols)
    after = pixels.shape.rank - axis - 2
    begin = tf.stack([0] * axis + [y0, x0] + [0] * after)
    size = tf.stack([-1] * axis + [y1 - y0, x1 - x0] + [-1] * after)
    inside = tf.slice(pixels, begin, size)
    paddings = [[0, 0]] * axis + [[y0 - top, top + height - y1], [x0 - left, left + width - x1]]
    paddings = tf.stack([tf.stack(p) for p in paddings + [[0, 0]] * after])
    return tf.pad(inside, paddings, constant_values=tf.cast(fill, pixels.dtype))


def crop(
    image: tf.Tensor,
    targets: dict,
    window,
    min_visible: float | None = MIN_VISIBLE,
    ignore_value: int = IGNORE_VALUE,
) -> tuple[tf.Tensor, dict]:
    """The image's `window` (padded with 0 past the image) and its targets (crop_targets).

    Args:
        image: [H, W, C].
        targets: as parse_targets returns them.
        window: (top, left, height, width) in pixels.
        min_visible: see crop_targets.
        ignore_value: see crop_targets.

    Returns:
        (image [height, width, C], targets).
    """
    shape = tf.shape(image)
    targets = crop_targets(targets, window, (shape[0], shape[1]), min_visible, ignore_value)
    return _crop_pixels(image, window, 0), targets


def random_crop(
    image: tf.Tensor,
    targets: dict,
    seed: tf.Tensor,
    min_visible: float = MIN_VISIBLE,
    ignore_value: int = IGNORE_VALUE,
) -> tuple[tf.Tensor, dict]:
    """The Object Detection API's random crop (sample_crop_window), targets moved (crop).

    Args:
        image: [H, W, C].
        targets: as parse_targets returns them.
        seed: a stateless seed, shape [2].
        min_visible: see crop_targets.
        ignore_value: see crop_targets.

    Returns:
        (image, targets) of the window.
    """
    window = sample_crop_window(tf.shape(image), targets, seed)
    return crop(image, targets, window, min_visible, ignore_value)


def flip_targets(targets: dict) -> dict[str, tf.Tensor]:
    """The targets of the image mirrored left to right (padding boxes stay zeros).

    Args:
        targets: as parse_targets returns them, for one image or a batch.

    Returns:
        The mirrored targets.
    """
    out = dict(targets)
    if "boxes" in out:
        ymin, xmin, ymax, xmax = tf.unstack(out["boxes"], axis=-1)
        mirrored = tf.stack([ymin, 1.0 - xmax, ymax, 1.0 - xmin], axis=-1)
        out["boxes"] = tf.where(_real(out)[..., None], mirrored, out["boxes"])
    if "masks" in out:
        out["masks"] = tf.reverse(out["masks"], [-1])
    if SEGMENTATION in out:
        out[SEGMENTATION] = tf.reverse(out[SEGMENTATION], [-1])
    return out


def flip(image: tf.Tensor, targets: dict) -> tuple[tf.Tensor, dict]:
    """The image [H, W, C] mirrored left to right, and its targets (flip_targets)."""
    return tf.reverse(image, [1]), flip_targets(targets)


def random_flip(image: tf.Tensor, targets: dict, seed: tf.Tensor) -> tuple[tf.Tensor, dict]:
    """flip, half of the time.

    The draw is `stateless_uniform([], seed) < 0.5`, the classification reader's own
    (decode.decode_image): given the same seed, both flip or neither does.

    Args:
        image: [H, W, C].
        targets: as parse_targets returns them.
        seed: a stateless seed, shape [2].

    Returns:
        (image, targets), both flipped or both as given.
    """
    return tf.cond(flip_draw(seed), lambda: flip(image, targets), lambda: (image, dict(targets)))


def flip_draw(seed: tf.Tensor) -> tf.Tensor:
    """random_flip's draw: bool, True half of the time."""
    return tf.random.stateless_uniform([], seed=seed) < 0.5


def resize_targets(targets: dict, image_size) -> dict[str, tf.Tensor]:
    """The targets of the image resized to `image_size` (masks, label map: nearest neighbour).

    Args:
        targets: as parse_targets returns them; normalised boxes do not change.
        image_size: (height, width).

    Returns:
        The resized targets.
    """
    out = dict(targets)
    nearest = tf.image.ResizeMethod.NEAREST_NEIGHBOR
    if "masks" in out:
        out["masks"] = tf.image.resize(out["masks"][..., None], image_size, nearest)[..., 0]
    if SEGMENTATION in out:
        out[SEGMENTATION] = tf.image.resize(out[SEGMENTATION][..., None], image_size, nearest)
        out[SEGMENTATION] = out[SEGMENTATION][..., 0]
    return out


def resize(image: tf.Tensor, targets: dict, image_size) -> tuple[tf.Tensor, dict]:
    """The image resized (bilinear, rounded back to its dtype) and its targets (resize_targets).

    Args:
        image: [H, W, C].
        targets: as parse_targets returns them.
        image_size: (height, width).

    Returns:
        (image [height, width, C], targets).
    """
    resized = tf.image.resize(tf.cast(image, tf.float32), image_size, method="bilinear")
    # Bilinear stays within the input's range, so rounding needs no clip: +0.5 then truncate
    # (floor first where values may be negative), as the classification reader rounds.
    if image.dtype.is_integer:
        resized += 0.5
        if not image.dtype.is_unsigned:
            resized = tf.floor(resized)
    return tf.cast(resized, image.dtype), resize_targets(targets, image_size)


def augment(
    image: tf.Tensor,
    targets: dict,
    seed: tf.Tensor,
    image_size: tuple[int, int],
    min_visible: float = MIN_VISIBLE,
    ignore_value: int = IGNORE_VALUE,
) -> tuple[tf.Tensor, dict]:
    """Training augmentation: random_crop, random_flip, resize to `image_size`.

    Args:
        image: [H, W, C].
        targets: as parse_targets returns them.
        seed: a stateless seed, shape [2] (split_seed gives the crop and the flip theirs).
        image_size: (height, width) of the output.
        min_visible: see crop_targets.
        ignore_value: see crop_targets.

    Returns:
        (image [height, width, C], targets) with static shapes.
    """
    channels = image.shape[-1]
    crop_seed, flip_seed = split_seed(seed)
    image, targets = random_crop(image, targets, crop_seed, min_visible, ignore_value)
    image, targets = random_flip(image, targets, flip_seed)
    image, targets = resize(image, targets, image_size)
    return with_size(image, targets, image_size, channels)


def resize_with_pad(
    image: tf.Tensor, targets: dict, image_size: tuple[int, int], ignore_value: int = IGNORE_VALUE
) -> tuple[tf.Tensor, dict]:
    """Evaluation: the image scaled to fit `image_size` (aspect kept) at the top left, padded.

    The padding is black in the image, 0 in the masks and `ignore_value` in the label map; the
    boxes are mapped into the padded frame, none dropped. Top-left, as Model Garden's
    resize_and_crop_image: a box maps back to the original by scale alone. targets["image_info"]
    is Model Garden's float32 [4, 2]: [[height, width], [scaled height, scaled width],
    [y scale, x scale], [0, 0]].

    Args:
        image: [H, W, C].
        targets: as parse_targets returns them.
        image_size: (height, width) of the output.
        ignore_value: the label map's value in the padding.

    Returns:
        (image [height, width, C], targets) with static shapes.
    """
    shape, channels = tf.shape(image), image.shape[-1]
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    out_h, out_w = image_size
    scale = tf.minimum(out_h / height, out_w / width)
    scaled_h = tf.clip_by_value(tf.cast(tf.round(height * scale), tf.int32), 1, out_h)
    scaled_w = tf.clip_by_value(tf.cast(tf.round(width * scale), tf.int32), 1, out_w)
    image, targets = resize(image, targets, tf.stack([scaled_h, scaled_w]))
    window = (0, 0, out_h, out_w)
    targets = crop_targets(targets, window, (scaled_h, scaled_w), None, ignore_value)
    scaled = tf.cast(tf.stack([scaled_h, scaled_w]), tf.float32)
    targets["image_info"] = tf.stack(
        [tf.stack([height, width]), scaled, scaled / tf.stack([height, width]), tf.zeros([2])]
    )
    return with_size(_crop_pixels(image, window, 0), targets, image_size, channels)


def with_size(image: tf.Tensor, targets: dict, image_size, channels) -> tuple[tf.Tensor, dict]:
    """`image` and `targets` with the static shapes of an output of `image_size`, which
    batching and Keras need."""
    height, width = image_size
    image = tf.ensure_shape(image, [height, width, channels])
    if "masks" in targets:  # the objects' masks, then empty ones for the padding slots
        slots = targets["classes"].shape[0]
        masks = targets["masks"]
        masks = tf.pad(masks, [[0, slots - tf.shape(masks)[0]], [0, 0], [0, 0]])
        targets["masks"] = tf.ensure_shape(masks, [slots, height, width])
    if SEGMENTATION in targets:
        targets[SEGMENTATION] = tf.ensure_shape(targets[SEGMENTATION], [height, width])
    return image, targets
