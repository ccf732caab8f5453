"""Training on several workers, each reading only its partitions of the epoch order
(pipeline/reader/partitions.py), simulated in process with one InputContext per worker: every
record once per epoch for 1, 2, 3 and 4 workers, the same global batches whatever their number,
resumed on another number mid-epoch, and on s3:// each worker's shard cache holds only the
shards of its partitions, about 1/N of the split.

Killed and restarted training processes on other worker counts: tests/e2e/test_resume.py.
"""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from core import schema
from pipeline.reader import Classification, Order, Storage, make_dataset, steps_per_epoch
from tests.unit.test_reader_shares import write_shards

pytestmark = pytest.mark.integration

BATCH = 24  # 2, 3 and 4 workers share it
EVEN = (8,) * 16  # 128 records: with a global batch of 16, 16 partitions of one shard each
UNEVEN = (3, 17, 5, 9, 11, 2, 8, 1, 30, 14)  # 100 records: 8 partitions, cut inside shards


@pytest.fixture(scope="module", params=[EVEN, UNEVEN], ids=["even", "uneven"])
def split(request, tmp_path_factory) -> tuple[str, tuple[int, ...]]:
    return write_shards(str(tmp_path_factory.mktemp("partitions")), request.param), request.param


def _names(batch) -> list[str]:
    return [n.decode()[-4:] for n in batch[2][schema.FILENAME].numpy()]


def _dataset(data_dir: str, workers: int, worker: int, batch: int = BATCH, **kwargs):
    """Worker `worker` of `workers`' input pipeline (one replica each)."""
    context = tf.distribute.InputContext(workers, worker, workers)
    return make_dataset(
        data_dir,
        "train",
        batch,
        strategy=context,
        training=True,
        image_size=8,
        seed=3,
        task=Classification(extra_features=[schema.FILENAME]),
        **kwargs,
    )


def _global_steps(data_dir: str, workers: int, steps: int, **kwargs) -> list[list[str]]:
    """Each global step's names: every worker's part, in worker order."""
    parts = [
        [_names(b) for b in _dataset(data_dir, workers, w, **kwargs).take(steps)]
        for w in range(workers)
    ]
    return [[n for part in step for n in part] for step in zip(*parts, strict=True)]


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_every_worker_count_reads_the_same_global_batches_once_per_epoch(split, workers):
    data_dir, counts = split
    steps = steps_per_epoch(data_dir, "train", BATCH)
    one = _global_steps(data_dir, 1, 2 * steps)
    assert _global_steps(data_dir, workers, 2 * steps) == one
    for epoch in (one[:steps], one[steps:]):
        seen = [n for step in epoch for n in step]
        assert len(seen) == len(set(seen)) == steps * BATCH
    assert one[:steps] != one[steps:], "each epoch draws a new order"


def test_a_resume_on_other_worker_counts_reads_the_epoch_once(split):
    """2 workers to step 3, then 4 to step 6, then 3 to the end of the second epoch: the
    uninterrupted single worker's steps."""
    data_dir, _ = split
    steps = steps_per_epoch(data_dir, "train", BATCH)
    one = _global_steps(data_dir, 1, 2 * steps)
    resumed = (
        _global_steps(data_dir, 2, 3)
        + _global_steps(data_dir, 4, 3, start_step=3)
        + _global_steps(data_dir, 3, 2 * steps - 6, start_step=6)
    )
    assert resumed == one


def test_partitions_are_asked_for_and_checked(split):
    data_dir, _ = split
    steps = steps_per_epoch(data_dir, "train", BATCH)
    two = _global_steps(data_dir, 1, steps, order=Order(partitions=2))
    assert _global_steps(data_dir, 2, steps, order=Order(partitions=2)) == two
    assert two != _global_steps(data_dir, 1, steps), "the partitions make the order"
    with pytest.raises(ValueError, match=r"partitions=25.*between 1 and global_batch_size"):
        _dataset(data_dir, 1, 0, order=Order(partitions=25))


@pytest.mark.parametrize("workers", [2, 4])
def test_each_worker_caches_only_its_partitions_shards_from_s3(s3, tmp_path, workers):
    """16 shards, 16 partitions: worker w of N downloads shards [16w/N, 16(w+1)/N) only, and
    together the workers read every record once."""
    local = write_shards(str(tmp_path / "local"), EVEN)
    uri = s3.uri(s3.new_bucket(), "ds")
    for folder, _, files in os.walk(local):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, local).replace(os.sep, "/")
            with open(path, "rb") as f:
                s3.put(f"{uri}/{rel}", f.read())
    steps = steps_per_epoch(local, "train", 16)
    seen, shards = [], []
    for w in range(workers):
        cache = tmp_path / f"cache{w}"
        storage = Storage(cache_dir=str(cache), s3_endpoint_url=s3.relay.url)
        ds = _dataset(uri, workers, w, batch=16, storage=storage)
        seen += [n for b in ds.take(steps) for n in _names(b)]
        shards.append(sorted(p.name for p in cache.rglob("*.tfrecord")))
    assert sorted(seen) == sorted(set(seen)) and len(seen) == steps * 16 == sum(EVEN)
    share = len(EVEN) // workers
    for w, names in enumerate(shards):
        listed = range(share * w, share * (w + 1))
        assert names == [schema.shard_name("train", s, len(EVEN)).split("/")[-1] for s in listed]
