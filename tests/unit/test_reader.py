"""Tests of pipeline/reader/dataset.py on small shards written here (independent of the converter)."""

from __future__ import annotations

import hashlib
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import schema
from pipeline.reader import crops as reader_crops
from pipeline.reader import dataset as reader
from pipeline.reader import decode as reader_decode

LABELS = ["astronaut", "cat", "coffee"]
IMAGE_SIZE = (24, 32)
SPLITS = {"train": (60, 4), "validation": (21, 3)}  # split: (examples, shards)


def _image_bytes(index: int, fmt: str) -> tuple[bytes, int, int]:
    """A small noisy picture, sizes varying per index, as JPEG or PNG bytes."""
    rng = np.random.default_rng(index)
    height, width = 30 + index % 17, 40 + index % 23
    base = rng.integers(0, 256, size=(1, 1, 3))
    pixels = np.clip(base + rng.normal(0, 30, size=(height, width, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG" if fmt == "jpeg" else "PNG")
    return out.getvalue(), height, width


def write_dataset(root: str, gzip: bool = False, splits: dict = SPLITS) -> str:
    """Write shards and a matching dataset_info.json under `root`; returns `root`."""
    info = {
        "schema_version": schema.SCHEMA_VERSION,
        "label_names": LABELS,
        "splits": {},
    }
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    index = 0
    for split, (num_examples, num_shards) in splits.items():
        os.makedirs(os.path.join(root, split), exist_ok=True)
        shards = []
        for s in range(num_shards):
            rel = schema.shard_name(split, s, num_shards, ".gz" if gzip else "")
            path = os.path.join(root, rel)
            count = 0
            with tf.io.TFRecordWriter(path, options) as writer:
                for _ in range(s, num_examples, num_shards):
                    fmt = "png" if index % 5 == 0 else "jpeg"
                    encoded, height, width = _image_bytes(index, fmt)
                    label = index % len(LABELS)
                    writer.write(
                        schema.make_example(
                            encoded=encoded,
                            image_format=fmt,
                            height=height,
                            width=width,
                            channels=3,
                            label=label,
                            label_text=LABELS[label],
                            filename=f"mem://{split}/{index:04d}.{fmt}",
                            sha256=hashlib.sha256(encoded).hexdigest(),
                        )
                    )
                    index += 1
                    count += 1
            with open(path, "rb") as f:
                data = f.read()
            shards.append(
                {
                    "file": rel,
                    "num_examples": count,
                    "num_bytes": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
        info["splits"][split] = {
            "num_examples": num_examples,
            "num_bytes": sum(s["num_bytes"] for s in shards),
            "shards": shards,
        }
    with open(os.path.join(root, schema.DATASET_INFO), "w") as f:
        json.dump(info, f)
    return root


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("reader_ds")))


def _filenames(dataset) -> list[str]:
    return [f.decode() for _, _, extras in dataset for f in extras[schema.FILENAME].numpy()]


# ---------------------------------------------------------------- single pipeline, in process


def test_training_batches_are_uint8_images_and_int64_labels(data_dir):
    ds = reader.make_dataset(data_dir, "train", 8, training=True, image_size=IMAGE_SIZE, seed=1)
    images, labels = next(iter(ds))
    assert images.dtype == tf.uint8 and images.shape == (8, *IMAGE_SIZE, 3)
    assert labels.dtype == tf.int64 and labels.shape == (8,)
    assert set(labels.numpy()) <= {0, 1, 2}
    # Training repeats by default: more batches than one epoch holds.
    assert len(list(ds.take(3 * reader.steps_per_epoch(data_dir, "train", 8)))) == 21


def test_evaluation_epoch_yields_every_example_once_in_a_fixed_order(data_dir):
    ds = reader.make_dataset(
        data_dir,
        "validation",
        8,
        image_size=IMAGE_SIZE,
        extra_features=[schema.FILENAME],
    )
    names = _filenames(ds)
    assert len(names) == 21 and len(set(names)) == 21
    assert all(n.startswith("mem://validation/") for n in names)
    assert _filenames(ds) == names  # deterministic: same order on every pass
    last = list(ds)[-1]
    assert last[0].shape[0] == 21 - 2 * 8  # evaluation keeps the partial batch


def test_extra_features_return_label_text(data_dir):
    ds = reader.make_dataset(
        data_dir,
        "validation",
        21,
        image_size=IMAGE_SIZE,
        extra_features=[schema.LABEL_TEXT],
    )
    _, labels, extras = next(iter(ds))
    texts = [t.decode() for t in extras[schema.LABEL_TEXT].numpy()]
    assert texts == [LABELS[i] for i in labels.numpy()]


def test_centre_crop_is_the_middle_of_the_image():
    pixels = np.zeros((40, 40, 3), np.uint8)
    pixels[10:30, 10:30] = 255  # white square in the centre, exactly the 0.5 crop
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="PNG")
    record = schema.make_example(
        encoded=encoded.getvalue(),
        image_format="png",
        height=40,
        width=40,
        channels=3,
        label=0,
        label_text="x",
        filename="f",
        sha256="",
    )
    cfg = reader._Config(
        shards=(),
        num_examples=1,
        num_bytes=1,
        global_batch_size=1,
        training=False,
        image_size=(8, 8),
        seed=None,
        repeat=False,
        deterministic=True,
        cache=False,
        shuffle_records=1,
        crop_fraction=0.5,
        dct_scaling=False,
        extra_features=(),
        postprocess=None,
    )
    image, _ = reader_decode.decode_example(cfg, tf.constant(record), None)
    assert int(tf.reduce_min(image)) == 255


def test_seed_and_determinism_make_training_reproducible(data_dir):
    def first_batches(seed):
        ds = reader.make_dataset(
            data_dir,
            "train",
            8,
            training=True,
            image_size=IMAGE_SIZE,
            seed=seed,
            deterministic=True,
        )
        return [(i.numpy(), lab.numpy()) for i, lab in ds.take(3)]

    a, b, c = first_batches(7), first_batches(7), first_batches(8)
    assert all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(a, c, strict=True))


def test_training_epoch_without_repeat_drops_the_remainder_and_reshuffles(data_dir):
    ds = reader.make_dataset(
        data_dir,
        "train",
        16,
        training=True,
        repeat=False,
        image_size=IMAGE_SIZE,
        extra_features=[schema.FILENAME],
        seed=3,
    )
    first, second = _filenames(ds), _filenames(ds)
    assert len(first) == 16 * reader.steps_per_epoch(data_dir, "train", 16) == 48
    assert len(set(first)) == 48
    assert first != second


def test_input_pipelines_split_files_without_overlap(data_dir):
    def names(split, training, pipeline_id):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        ds = reader.make_dataset(
            data_dir,
            split,
            4,
            input_context=ctx,
            training=training,
            repeat=False,
            image_size=IMAGE_SIZE,
            extra_features=[schema.FILENAME],
        )
        batches = [extras[schema.FILENAME].numpy() for _, _, extras in ds]
        assert len(batches[0]) == 2  # per-replica batch: 4 global / 2 replicas
        return [f.decode() for batch in batches for f in batch]

    for split, training in (("validation", False), ("train", True)):
        a, b = names(split, training, 0), names(split, training, 1)
        assert not set(a) & set(b)
        if not training:  # evaluation keeps partial batches: the union is the whole split
            assert len(a) + len(b) == 21 and len(set(a) | set(b)) == 21


def test_gzip_shards_and_cache(tmp_path):
    root = write_dataset(str(tmp_path), gzip=True, splits={"validation": (10, 2)})
    ds = reader.make_dataset(
        root,
        "validation",
        4,
        image_size=IMAGE_SIZE,
        cache=True,
        extra_features=[schema.FILENAME],
    )
    assert sorted(_filenames(ds)) == sorted(_filenames(ds))
    assert len(set(_filenames(ds))) == 10


def test_postprocess_runs_per_example_before_batching(data_dir):
    def to_float(image, label):
        return tf.cast(image, tf.float32) / 255.0, label + 10

    ds = reader.make_dataset(data_dir, "validation", 5, image_size=IMAGE_SIZE, postprocess=to_float)
    images, labels = next(iter(ds))
    assert images.dtype == tf.float32 and float(tf.reduce_max(images)) <= 1.0
    assert set(labels.numpy()) <= {10, 11, 12}


def test_autograph_converts_the_users_postprocess_and_none_of_the_readers_own(
    data_dir, monkeypatch
):
    """The reader's tf.data functions are traced as written (pipeline/reader/shares.py `traced_as_written`:
    AutoGraph's conversion cost ~2.7 s of CPU on a process's first dataset); a user's hook is
    still converted, so Python control flow on tensors works in it as in any tf.data map."""
    from tensorflow.python.autograph.impl import api as autograph_api

    converted = []
    convert = autograph_api._convert_actual  # noqa: SLF001 - AutoGraph's one conversion entry

    def recording(entity, program_ctx):
        converted.append(f"{getattr(entity, '__module__', '?')}.{entity.__qualname__}")
        return convert(entity, program_ctx)

    monkeypatch.setattr(autograph_api, "_convert_actual", recording)

    def darken_odd_labels(image, label):
        if label % 2 == 1:  # a Python `if` on a tensor: AutoGraph makes it a tf.cond
            image = image // 2
        return image, label

    # Evaluation and training batches (decode_batch's two graphs), then per-example decoding.
    for postprocess, training in ((None, False), (None, True), (darken_odd_labels, True)):
        ds = reader.make_dataset(
            data_dir, "train", 4, training=training, image_size=IMAGE_SIZE, seed=2,
            postprocess=postprocess, repeat=False,
        )  # fmt: skip
        assert len(list(ds.take(1))) == 1
    # postprocess_fn's `apply` is the hook's wrapper: converting it is what converts the hook.
    ours = [
        name
        for name in converted
        if name.startswith(("pipeline.", "core."))
        and not name.endswith("postprocess_fn.<locals>.apply")
    ]
    assert ours == [], f"AutoGraph converted the reader's own functions: {ours}"
    assert any("darken_odd_labels" in name for name in converted), converted


@pytest.mark.parametrize("training", [False, True])
def test_batched_decode_matches_per_example_decode(data_dir, training):
    """Without a postprocess hook whole batches are parsed and decoded in one call; with one,
    each example is. Both give the same pixels, labels and extras (same seed in training)."""

    def identity(image, label):
        return image, label

    common = dict(
        training=training,
        image_size=IMAGE_SIZE,
        seed=3,
        repeat=False,
        deterministic=True,
        extra_features=(schema.FILENAME,),
    )
    batched = list(reader.make_dataset(data_dir, "train", 4, **common))
    per_example = list(reader.make_dataset(data_dir, "train", 4, postprocess=identity, **common))
    assert len(batched) == len(per_example) > 1
    for (a_img, a_lab, a_ext), (b_img, b_lab, b_ext) in zip(batched, per_example, strict=True):
        assert a_img.dtype == tf.uint8 and a_img.shape == b_img.shape
        assert np.array_equal(a_img.numpy(), b_img.numpy())
        assert np.array_equal(a_lab.numpy(), b_lab.numpy())
        assert np.array_equal(a_ext[schema.FILENAME].numpy(), b_ext[schema.FILENAME].numpy())


def test_dct_scaling_decodes_large_jpegs_at_reduced_scale(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, size=(200, 240, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    image = reader_crops.decode_and_crop_scaled(
        tf.constant(out.getvalue()), (10, 20, 160, 200), (40, 40)
    )
    assert image.shape == (40, 50, 3)  # ratio 4: the 160x200 window at quarter scale


def test_auto_sharding_is_off_because_the_reader_shards_itself(data_dir):
    for training in (True, False):
        ds = reader.make_dataset(data_dir, "validation", 4, training=training)
        policy = ds.options().experimental_distribute.auto_shard_policy
        assert policy == tf.data.experimental.AutoShardPolicy.OFF


def test_dct_scaling_in_the_pipeline(data_dir):
    for training in (True, False):
        ds = reader.make_dataset(
            data_dir, "validation", 7, training=training, image_size=(8, 8), jpeg_dct_scaling=True
        )
        images, _ = next(iter(ds))
        assert images.shape == (7, 8, 8, 3) and images.dtype == tf.uint8


def test_steps_per_epoch_is_exact(data_dir):
    assert reader.steps_per_epoch(data_dir, "train", 8) == 7
    assert reader.steps_per_epoch(data_dir, "validation", 8, drop_remainder=False) == 3
    with pytest.raises(ValueError, match="fewer than one global batch"):
        reader.steps_per_epoch(data_dir, "validation", 64)


# ---------------------------------------------------------------- bad input


def test_directory_without_dataset_info(tmp_path):
    with pytest.raises(schema.DatasetInfoError, match="dataset_info.json not found"):
        reader.make_dataset(str(tmp_path), "train", 8)
    with pytest.raises(schema.DatasetInfoError, match="dataset_info.json not found"):
        reader.steps_per_epoch(str(tmp_path), "train", 8)


def test_unknown_split_names_the_known_ones(data_dir):
    with pytest.raises(ValueError, match=r"unknown split 'test'.*\['train', 'validation'\]"):
        reader.make_dataset(data_dir, "test", 8)
    with pytest.raises(ValueError, match="unknown split 'test'"):
        reader.steps_per_epoch(data_dir, "test", 8)


def test_missing_shard_is_named(tmp_path):
    root = write_dataset(str(tmp_path), splits={"validation": (6, 2)})
    os.remove(os.path.join(root, schema.shard_name("validation", 1, 2)))
    with pytest.raises(FileNotFoundError, match=r"missing: .*validation-00001-of-00002\.tfrecord"):
        reader.make_dataset(root, "validation", 2)


def test_batch_not_divisible_by_replicas(data_dir):
    ctx = tf.distribute.InputContext(num_replicas_in_sync=2)
    with pytest.raises(ValueError, match="global_batch_size 7 is not divisible by the 2 replicas"):
        reader.make_dataset(data_dir, "train", 7, input_context=ctx)


def test_corrupt_shard_fails_with_its_name(tmp_path):
    root = write_dataset(str(tmp_path), splits={"validation": (12, 3)})
    bad = os.path.join(root, schema.shard_name("validation", 2, 3))
    with open(bad, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    ds = reader.make_dataset(root, "validation", 4, image_size=IMAGE_SIZE)
    with pytest.raises(tf.errors.OpError, match=r"validation-00002-of-00003\.tfrecord is corrupt"):
        list(ds)
