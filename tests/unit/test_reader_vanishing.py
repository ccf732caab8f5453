"""A shard or version folder that disappears under a running reader stops it with an error
naming the shard, in seconds, in training and evaluation (issue 30: it used to spin forever)."""

from __future__ import annotations

import os
import re
import shutil
import threading

import pytest
import tensorflow as tf

from core import schema
from pipeline.reader import dataset as reader
from tests.unit.test_reader import IMAGE_SIZE, write_dataset

# Generous: the error comes after one shard's expected batches plus a few spare reads (ms
# here); a hang is what this bounds, not speed.
_DEADLINE_S = 120


def _drain(iterator) -> tuple[int, BaseException | None, bool]:
    """Read `iterator` to its end in a thread: (batches read, error raised, still running)."""
    out: dict = {"n": 0, "error": None}

    def run() -> None:
        try:
            for _ in iterator:
                out["n"] += 1
                if out["n"] > 10_000:  # a repeating dataset that never fails
                    return
        except Exception as e:  # noqa: BLE001 - returned to the test to assert on
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(_DEADLINE_S)
    return out["n"], out["error"], thread.is_alive()


def _version_root(tmp_path) -> tuple[str, str]:
    """A versioned root whose LATEST names one version; (root, version folder)."""
    root = str(tmp_path / "root")
    name = "v20261201T030000Z"
    folder = write_dataset(
        os.path.join(root, name), splits={"train": (60, 4), "validation": (21, 3)}
    )
    with open(os.path.join(root, "LATEST"), "w") as f:
        f.write(name + "\n")
    return root, folder


@pytest.mark.parametrize("cache", [False, True])
def test_training_reader_fails_naming_a_shard_when_its_version_is_removed(tmp_path, cache):
    root, folder = _version_root(tmp_path)
    ds = reader.make_dataset(
        root, "train", 4, training=True, image_size=IMAGE_SIZE, seed=1, cache=cache, lease=False
    )
    it = iter(ds)
    if not cache:
        next(it)  # training has started on the version
    # With a cache, before the first epoch is cached: open local files stay readable after
    # their removal, so a cached split read whole once keeps training, which is fine.
    shutil.rmtree(folder)
    n, error, running = _drain(it)
    assert not running, "the reader hung on a removed version"
    assert isinstance(error, tf.errors.InvalidArgumentError), (n, error)
    assert re.search(
        rf"shard {re.escape(folder)}/train/train-0000[0-3]-of-00004\.tfrecord is corrupt, "
        rf"truncated, missing or unreadable: read \d+ of 15 records of dataset {re.escape(folder)} ",
        error.message,
    ), error.message
    assert "if version v20261201T030000Z was pruned (--keep_versions) or removed" in error.message
    assert "restart the job" in error.message


def test_evaluation_reader_fails_naming_the_deleted_shard(tmp_path):
    root, folder = _version_root(tmp_path)
    ds = reader.make_dataset(root, "validation", 3, image_size=IMAGE_SIZE, lease=False)
    gone = os.path.join(folder, schema.shard_name("validation", 1, 3))
    os.remove(gone)  # after make_dataset checked the shards, before they are opened
    n, error, running = _drain(iter(ds))
    assert not running, "the reader hung on a deleted shard"
    assert isinstance(error, tf.errors.InvalidArgumentError), (n, error)
    assert f"shard {gone} is corrupt" in error.message
    assert f"read 0 of 7 records of dataset {folder} (" in error.message


def test_unreadable_shard_fails_instead_of_spinning(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their permissions")
    root = write_dataset(str(tmp_path / "plain"), splits={"validation": (6, 2)})
    shut = os.path.join(root, schema.shard_name("validation", 0, 2))
    ds = reader.make_dataset(root, "validation", 2, image_size=IMAGE_SIZE)
    os.chmod(shut, 0)
    try:
        n, error, running = _drain(iter(ds))
    finally:
        os.chmod(shut, 0o644)
    assert not running, "the reader hung on an unreadable shard"
    assert isinstance(error, tf.errors.InvalidArgumentError), (n, error)
    assert "validation-00000-of-00002.tfrecord" in error.message
    assert "version" not in error.message  # not a versioned dataset: no restart hint


def test_every_record_still_arrives_once(tmp_path):
    """The attempt counter never cuts a healthy shard short (its last partial batch included)."""
    root = write_dataset(str(tmp_path / "whole"), splits={"validation": (97, 3)})
    ds = reader.make_dataset(
        root, "validation", 5, image_size=IMAGE_SIZE, extra_features=(schema.FILENAME,)
    )
    names = [f for _, _, extras in ds for f in extras[schema.FILENAME].numpy()]
    assert len(names) == 97 and len(set(names)) == 97
