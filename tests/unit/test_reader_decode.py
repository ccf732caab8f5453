"""pipeline/reader/decode.py's fast paths give the pixels of the plain path they replace."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import schema
from pipeline.reader import crops as reader_crops
from pipeline.reader import dataset as reader
from pipeline.reader import decode as reader_decode

_CONFIG = dict(
    shards=(),
    num_examples=1,
    num_bytes=1,
    global_batch_size=1,
    training=False,
    image_size=(56, 56),
    seed=None,
    repeat=False,
    deterministic=True,
    cache=False,
    shuffle_records=1,
    crop_fraction=0.875,
    dct_scaling=False,
    extra_features=(),
    postprocess=None,
    store="pixels",
)


def _photo(height: int, width: int, index: int) -> np.ndarray:
    """A real photo crop (scikit-image's), resized to height x width: smooth and detailed parts."""
    from pipeline.demo import PHOTOS, photo_dir

    names = sorted(PHOTOS.values())
    image = Image.open(os.path.join(photo_dir(), names[index % len(names)])).convert("RGB")
    return np.asarray(image.resize((width, height), Image.Resampling.BILINEAR), np.uint8)


def _raw_record(pixels: np.ndarray) -> bytes:
    data = pixels.tobytes()
    return schema.make_example(
        encoded=data,
        image_format=schema.RAW_FORMAT,
        height=pixels.shape[0],
        width=pixels.shape[1],
        channels=3,
        label=0,
        label_text="a",
        filename="f",
        sha256=hashlib.sha256(data).hexdigest(),
    )


def _resized_one_by_one(config, records: list[bytes]) -> np.ndarray:
    """Each record through decode_image with the resize always on (the plain path)."""
    out = []
    for record in records:
        features = tf.io.parse_single_example(
            record, schema.feature_spec(keys=(schema.ENCODED, schema.HEIGHT, schema.WIDTH))
        )
        h, w = features[schema.HEIGHT], features[schema.WIDTH]
        window = reader_crops.crop_window(config, h, w, None)
        image = reader_decode.decode_image(
            config, features[schema.ENCODED], None, window=window, raw=(h, w), resize=True
        )
        out.append(image.numpy())
    return np.stack(out)


def test_resize_skip_gives_the_resized_pixels_exactly():
    """Evaluation on raw pixels whose centre crop already has the output size skips the resize;
    the pixels are those of the resize path, bit for bit (bilinear at scale 1 is exact)."""
    config = reader._Config(**_CONFIG)
    # Shorter side 64: the 0.875 centre crop is 56x56, the output size.
    shapes = [(64, 64), (64, 90), (77, 64), (64, 71)]
    records = [_raw_record(_photo(h, w, i)) for i, (h, w) in enumerate(shapes)]
    images, _ = reader_decode.decode_batch(config, tf.constant(records))
    assert images.shape == (4, 56, 56, 3) and images.dtype == tf.uint8
    assert np.array_equal(images.numpy(), _resized_one_by_one(config, records))
    # The same crops cut out of the stored pixels (what the skip returns), as a check that the
    # reference above really is an identity.
    for image, (h, w), record in zip(images.numpy(), shapes, records, strict=True):
        stored = np.frombuffer(tf.io.parse_single_example(
            record, schema.feature_spec(keys=(schema.ENCODED,)))[schema.ENCODED].numpy(),
            np.uint8).reshape(h, w, 3)  # fmt: skip
        top, left = (h - 56) // 2, (w - 56) // 2
        assert np.array_equal(image, stored[top : top + 56, left : left + 56])


def test_mixed_batch_is_resized():
    """One crop of the batch needs a resize: the whole batch takes the resize path, same pixels."""
    config = reader._Config(**_CONFIG)
    shapes = [(64, 64), (100, 80), (64, 90)]
    records = [_raw_record(_photo(h, w, i)) for i, (h, w) in enumerate(shapes)]
    images, _ = reader_decode.decode_batch(config, tf.constant(records))
    assert np.array_equal(images.numpy(), _resized_one_by_one(config, records))


@pytest.mark.parametrize("store", ["pixels", "encoded"])
def test_training_flip_before_the_resize_matches_flipping_the_output(store, tmp_path):
    """Training flips the crop before resizing it. Against the old order (resize, then
    stateless_random_flip_left_right with the same seed): same flip decision per image, pixels
    within 1 level (float rounding of mirrored sample positions), nearly all identical."""
    config = reader._Config(**{**_CONFIG, "training": True, "store": store})
    flipped = 0
    diffs = []
    for i in range(24):
        pixels = _photo(90 + 3 * i, 120 - 2 * i, i)
        if store == "pixels":
            encoded, raw = pixels.tobytes(), (pixels.shape[0], pixels.shape[1])
        else:
            path = tmp_path / f"{i}.png"
            Image.fromarray(pixels).save(path)
            encoded, raw = path.read_bytes(), ()
        seed = tf.constant([i, 7 * i + 1], tf.int64)
        got = reader_decode.decode_image(config, tf.constant(encoded), seed, raw=raw).numpy()
        top, left, h, w = (
            int(v) for v in reader_crops.crop_window(config, *pixels.shape[:2], seed)
        )
        crop = pixels[top : top + h, left : left + w]
        old = reader_decode.resize_to_output(tf.constant(crop), config.image_size)
        old = tf.image.stateless_random_flip_left_right(old, seed=seed).numpy()
        unflipped = reader_decode.resize_to_output(tf.constant(crop), config.image_size).numpy()
        flipped += int(not np.array_equal(old, unflipped))
        diff = np.abs(got.astype(int) - old.astype(int))
        assert diff.max() <= 1, i
        diffs.append(float((diff > 0).mean()))
    assert 4 <= flipped <= 20  # both decisions occur
    assert float(np.mean(diffs)) < 0.01


def test_decode_settings_protocol_is_what_the_config_has():
    fields = {f.name for f in dataclasses.fields(reader._Config)}
    assert set(reader_decode.DecodeSettings.__annotations__) <= fields
    assert set(reader_crops.CropSettings.__annotations__) <= fields
