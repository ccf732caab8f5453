"""The training epoch order and `start_step` (pipeline/reader/epoch_order.py, resumable.py), in
process on shards written by hand: an epoch is a permutation that depends on (seed, epoch) only,
any number of input pipelines reads each global batch's records once, and a dataset started at
step N yields what an uninterrupted one yields from step N on.

Killed and restarted training processes (no strategy, MirroredStrategy, a two-worker cluster,
Keras' BackupAndRestore): tests/e2e/test_resume.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from core import schema
from pipeline.reader import dataset as reader
from pipeline.reader import dataset_info
from pipeline.reader.epoch_order import EpochOrder
from pipeline.reader.partitions import partition
from pipeline.reader.pieces import Pieces
from pipeline.reader.shard_records import Span, read_shard
from tests.unit.test_reader_shares import UNEVEN, write_shards

BATCH = 8
STEPS = sum(UNEVEN) // BATCH  # 7 steps of the 56 records


@pytest.fixture(scope="module", params=["whole shards", "pieces"])
def data_dir(request, tmp_path_factory) -> str:
    """The 8 shards as another tool writes them (read whole), and with the converter's shard
    markers (cut into pieces of one record: 56 records, 8 lanes of 16 pieces at least)."""
    root = write_shards(str(tmp_path_factory.mktemp("resume")), UNEVEN)
    if request.param == "pieces":
        for index, entry in enumerate(dataset_info(root)["splits"]["train"]["shards"]):
            _write_marker(Path(root), entry["file"], index, len(UNEVEN))
    return root


def _write_marker(root: Path, rel: str, index: int, num_shards: int, delta: int = 0) -> bytes:
    """The shard marker the converter writes for shard `rel` (core/shard_markers.py); with
    `delta`, one of another shard: its size and offsets off by that much. Returns the shard."""
    from core import dali_index, shard_markers

    data = (root / rel).read_bytes()
    rows = [line.split() for line in dali_index.index_of_shard(data).decode().splitlines()]
    records = [
        shard_markers.RecordLocation(
            f"in/{i}.png", "", "", "a", 0, int(offset) + delta, int(size), "png", ""
        )
        for i, (offset, size) in enumerate(rows)
    ]
    marker = root / shard_markers.marker_name("train", index, num_shards)
    marker.parent.mkdir(parents=True, exist_ok=True)
    shard = {"file": rel, "num_bytes": len(data) + delta}
    body = {shard_markers.SHARD_KEY: shard, shard_markers.RECORDS_KEY: records}
    marker.write_text(json.dumps(body))
    return data


@pytest.fixture(scope="module")
def full(data_dir) -> list[str]:
    """The names of 4 uninterrupted epochs, one pipeline, seed 5."""
    return _names(_dataset(data_dir).take(4 * STEPS))


def _names(batches) -> list[str]:
    return [n.decode()[-4:] for batch in batches for n in batch[2][schema.FILENAME].numpy()]


def _dataset(data_dir, **kwargs):
    return reader.make_dataset(
        data_dir,
        "train",
        kwargs.pop("global_batch_size", BATCH),
        training=True,
        image_size=(16, 16),
        extra_features=[schema.FILENAME],
        seed=kwargs.pop("seed", 5),
        **kwargs,
    )


def _steps(names: list[str]) -> list[list[str]]:
    return [names[i : i + BATCH] for i in range(0, len(names), BATCH)]


def _pipelines(data_dir, num_pipelines, steps, **kwargs) -> list[list[list[str]]]:
    """Per global step, each pipeline's names (pipeline p of `num_pipelines`)."""
    out = []
    for p in range(num_pipelines):
        ctx = tf.distribute.InputContext(num_pipelines, p, num_pipelines)
        batches = list(_dataset(data_dir, input_context=ctx, **kwargs).take(steps))
        out.append([_names([b]) for b in batches])
    return [[name for part in step for name in part] for step in zip(*out, strict=True)]


@pytest.mark.parametrize("counts", [UNEVEN, (10,), (1, 0, 30, 2), (5,) * 40])
@pytest.mark.parametrize(("lanes", "window"), [(1, 1), (3, 10), (16, 1024)])
def test_each_epoch_is_a_permutation_drawn_from_seed_and_epoch(counts, lanes, window):
    order = EpochOrder(counts, seed=7, lanes=lanes, window=window)
    epochs = [order.epoch_records(e) for e in range(3)]
    for records in epochs:
        assert sorted(records) == list(range(sum(counts)))
    assert EpochOrder(counts, seed=7, lanes=lanes, window=window).epoch_records(1) == epochs[1]
    if window > 1:  # lanes and windows of 1: only the few shards' order changes
        assert epochs[0] != epochs[1] != epochs[2]
        assert EpochOrder(counts, seed=8, lanes=lanes, window=window).epoch_records(1) != epochs[1]


def test_an_unpermuted_order_is_the_merge_and_still_new_each_epoch():
    """Windows of one global batch are not permuted: the merge alone orders the epoch."""
    order = EpochOrder(UNEVEN, seed=7, lanes=3, window=BATCH, permute=False)
    epochs = [order.epoch_records(e) for e in range(2)]
    assert epochs[0] == order.merged_records(0).numpy().tolist()
    assert sorted(epochs[1]) == list(range(sum(UNEVEN))) and epochs[0] != epochs[1]


def _tf_interleave(counts, shards, skips, lanes: int) -> list[int]:
    """tf.data's own merge of `shards` (from record `skips` on): listed record indices."""
    firsts = np.cumsum(counts) - np.asarray(counts)
    starts = (firsts[shards] + skips).astype(np.int64)
    ends = (firsts[shards] + np.asarray(counts)[shards]).astype(np.int64)
    merged = tf.data.Dataset.from_tensor_slices((starts, ends)).interleave(
        tf.data.Dataset.range, cycle_length=lanes, block_length=1, num_parallel_calls=lanes
    )
    return [int(r) for r in merged]


@pytest.mark.parametrize(("counts", "lanes"), [(UNEVEN, 3), ((1, 0, 30, 2), 2), ((5,) * 40, 16)])
def test_the_merge_is_tf_datas_interleave(counts, lanes):
    order = EpochOrder(counts, seed=3, lanes=lanes, window=10)
    shards = order.shard_order(2).numpy()
    expected = _tf_interleave(counts, shards, np.zeros_like(shards), lanes)
    assert order.merged_records(2).numpy().tolist() == expected


@pytest.mark.parametrize("merged_start", [0, 1, 13, 40, 56, sum(UNEVEN)])
def test_resume_inputs_go_on_where_the_merge_stopped(merged_start):
    order = EpochOrder(UNEVEN, seed=3, lanes=3, window=10)
    merged = order.merged_records(2).numpy().tolist()
    shards, skips = order.resume_inputs(2, tf.constant(merged_start, tf.int64))
    resumed = _tf_interleave(UNEVEN, shards.numpy(), skips.numpy(), 3)
    assert resumed == merged[merged_start:]


@pytest.mark.parametrize("partitions", [None, 1, 2])
def test_the_reader_follows_the_epoch_order(data_dir, full, partitions):
    """The default: 8 partitions (the units and the batch allow no more), one column of each
    global batch each; one partition is the whole split's order, as before partitions."""
    names = (
        full
        if partitions is None
        else _names(_dataset(data_dir, partitions=partitions).take(2 * STEPS))
    )
    if os.path.exists(os.path.join(data_dir, ".imgrec")):  # pieces: one global batch mixes
        order = EpochOrder((1,) * sum(UNEVEN), seed=5, lanes=8, window=BATCH, permute=False)
        pieces = Pieces(tuple(range(56)), (0,) * 56, (1,) * 56, (0,) * 56, (0,) * 56, 8, True)
        per_window = 1
    else:  # 8 whole shards: windows of the 256 MB buffer (>= 1024 records), 8 lanes
        order = EpochOrder(UNEVEN, seed=5, lanes=8, window=1024)
        pieces = Pieces(tuple(range(8)), (0,) * 8, UNEVEN, (0,) * 8, (0,) * 8, 8, False)
        per_window = 1024 // BATCH
    plan = partition(order, pieces, BATCH, partitions or 8, per_window)
    expected = plan.epoch_records(0) + plan.epoch_records(1)
    assert names[: 2 * STEPS * BATCH] == [f"{i:04d}" for i in expected]
    if partitions == 1:
        whole = order.epoch_records(0)[: STEPS * BATCH] + order.epoch_records(1)[: STEPS * BATCH]
        assert expected == whole


def test_a_dataset_started_at_step_n_is_the_rest_of_an_uninterrupted_one(data_dir, full):
    for start in (3, STEPS, 2 * STEPS + 5):
        resumed = _dataset(data_dir, start_step=start)
        assert _names(resumed.take(4 * STEPS - start)) == full[start * BATCH :]


def test_windows_of_shuffle_buffer_mb_resume_inside_a_window(tmp_path):
    """Windows of ~500 records (`shuffle_buffer_mb`) over a split of 1200: step 70 starts
    inside the second."""
    data_dir = write_shards(str(tmp_path), (300, 250, 350, 300))
    record = dataset_info(data_dir)["splits"]["train"]["num_bytes"] / 1200
    window_mb = 500 * record / 2**20
    kwargs = {"global_batch_size": 10, "shuffle_buffer_mb": window_mb, "shards_at_once": 2}
    full = _names(_dataset(data_dir, **kwargs).skip(70).take(30))
    assert _names(_dataset(data_dir, start_step=70, **kwargs).take(30)) == full


@pytest.mark.parametrize("num_pipelines", [4])
def test_global_batches_do_not_depend_on_the_number_of_pipelines(data_dir, full, num_pipelines):
    one = _steps(full)[: 2 * STEPS]
    many = _pipelines(data_dir, num_pipelines, 2 * STEPS)
    assert many == one
    for epoch in (one[:STEPS], one[STEPS:]):
        seen = [name for step in epoch for name in step]
        assert len(seen) == len(set(seen)) == STEPS * BATCH


def test_elastic_resume_two_pipelines_then_one(data_dir, full):
    """Two workers to step 4, then one from step 4: the epoch once, as without a restart."""
    before = _pipelines(data_dir, 2, 4)
    after = _pipelines(data_dir, 1, 2 * STEPS - 4, start_step=4)
    assert before + after == _steps(full)[: 2 * STEPS]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"deterministic": False, "cache": True},
        {"postprocess": lambda image, label: (image, label)},
    ],
)
def test_the_order_does_not_depend_on_how_records_are_read(data_dir, full, kwargs):
    expected = full[: 2 * STEPS * BATCH]
    assert _names(_dataset(data_dir, **kwargs).take(2 * STEPS)) == expected
    resumed = _dataset(data_dir, start_step=STEPS + 2, **kwargs).take(STEPS - 2)
    assert _names(resumed) == expected[(STEPS + 2) * BATCH :]


def test_augmentation_after_a_resume_is_the_uninterrupted_runs(data_dir):
    full = [b[0].numpy() for b in _dataset(data_dir).take(STEPS)]
    resumed = [b[0].numpy() for b in _dataset(data_dir, start_step=4).take(STEPS - 4)]
    assert all((a == b).all() for a, b in zip(full[4:], resumed, strict=True))


def test_a_variable_start_step_is_read_when_iteration_starts(data_dir, full):
    step = tf.Variable(0, dtype=tf.int64)
    ds = _dataset(data_dir, start_step=step, repeat=False)
    step.assign(STEPS + 3)  # as a checkpoint restore would, after make_dataset
    assert _names(ds) == full[(STEPS + 3) * BATCH : 2 * STEPS * BATCH]
    step.assign(2 * STEPS)  # the next pass, from where training is now
    assert _names(ds) == full[2 * STEPS * BATCH : 3 * STEPS * BATCH]


def test_passes_over_a_finite_dataset_are_the_next_epochs(data_dir, full):
    ds = _dataset(data_dir, repeat=False, start_step=2)
    passes = [_names(ds) for _ in range(3)]
    assert passes == [
        full[2 * BATCH : STEPS * BATCH],
        full[STEPS * BATCH : 2 * STEPS * BATCH],
        full[2 * STEPS * BATCH : 3 * STEPS * BATCH],
    ]


def test_a_negative_start_step_is_refused(data_dir):
    with pytest.raises(tf.errors.InvalidArgumentError, match="start_step must be >= 0"):
        list(_dataset(data_dir, start_step=lambda: -1).take(1))


def _read_from(
    path: str, compression: str, expected: int, skip: int, offset=-1, limit=-1, length=-1
) -> list[bytes]:
    """read_shard(..., Span(skip, offset, limit, length)) as the reader runs it: inside a
    dataset function (the offset kernel cannot be serialized, which an eager top-level dataset
    does)."""
    span = [tf.constant(v, tf.int64) for v in (skip, offset, limit, length)]
    part = tf.data.Dataset.from_tensors(tuple(span)).flat_map(
        lambda *s: read_shard(
            tf.constant(path),
            tf.constant(compression),
            tf.constant(expected, tf.int64),
            True,
            "",
            Span(*s),
        )
    )
    return [r.numpy() for r in part]


def _offsets(data: bytes) -> list[int]:
    from core import dali_index

    rows = dali_index.index_of_shard(data).decode().splitlines()
    return [int(line.split()[0]) for line in rows] + [len(data)]


def test_a_piece_is_read_from_its_offset_to_its_limit_only(tmp_path):
    """Records 5-11 of 20, opened at record 5's offset: the bytes before it are never read
    (garbage there), and the records after it are not returned."""
    path = tmp_path / "s.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(20):
            writer.write(bytes([i]) * (40 + i))
    data = path.read_bytes()
    whole, at = [r.numpy() for r in tf.data.TFRecordDataset(str(path))], _offsets(data)
    path.write_bytes(b"\xff" * at[5] + data[at[5] :])
    got = _read_from(str(path), "", 20, 5, offset=at[5], limit=7, length=at[12] - at[5])
    assert got == whole[5:12]


def test_a_piece_cut_short_fails_naming_its_shard(tmp_path):
    path = tmp_path / "s.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(20):
            writer.write(bytes([i]) * 100)
    at = _offsets(path.read_bytes())
    os.truncate(path, at[9] + 30)  # inside record 9 of the piece 5-11
    with pytest.raises(tf.errors.InvalidArgumentError, match="s.tfrecord is corrupt"):
        _read_from(str(path), "", 20, 5, offset=at[5], limit=7, length=at[12] - at[5])


@pytest.mark.parametrize("gzip", [False, True])
def test_a_shard_read_from_record_k_is_the_rest_of_the_shard(tmp_path, gzip):
    path = str(tmp_path / ("s.tfrecord" + (".gz" if gzip else "")))
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    with tf.io.TFRecordWriter(path, options) as writer:
        for i in range(20):
            writer.write(b"x" * (i * 37 % 11) + bytes([i]))
    whole = list(tf.data.TFRecordDataset(path, compression_type="GZIP" if gzip else ""))
    for skip in (0, 1, 7, 19, 20):
        assert _read_from(path, "GZIP" if gzip else "", 20, skip) == [
            r.numpy() for r in whole[skip:]
        ]


def test_a_truncated_shard_read_from_record_k_fails_naming_it(tmp_path):
    path = str(tmp_path / "s.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(10):
            writer.write(bytes([i]) * 100)
    os.truncate(path, 5 * 117 + 30)
    with pytest.raises(tf.errors.InvalidArgumentError, match="s.tfrecord is corrupt"):
        _read_from(path, "", 10, 3)


def test_a_seek_with_a_dali_index_reads_none_of_the_skipped_records(tmp_path):
    """With `<shard>.idx` (--dali_index) the offset comes from the index: skipped frames whose
    length fields are garbage (a walk through them would fail) are never read."""
    from core import dali_index

    path = tmp_path / "s.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(10):
            writer.write(bytes([i]) * (50 + i))
    data = path.read_bytes()
    (tmp_path / "s.tfrecord.idx").write_bytes(dali_index.index_of_shard(data))
    whole = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    broken = bytearray(data)
    broken[: 8 * 4] = b"\xff" * 32  # record 0's length and crc, and into its data
    path.write_bytes(bytes(broken))
    for skip in (1, 6, 10):
        assert _read_from(str(path), "", 10, skip) == whole[skip:]


def _split_with_marker(root, num_bytes_delta: int = 0) -> tuple[str, bytes]:
    """DIR/train/train-00000-of-00001.tfrecord (10 records) and its shard marker (with
    `num_bytes_delta`, another shard's: see _write_marker)."""
    path = root / "train" / "train-00000-of-00001.tfrecord"
    path.parent.mkdir()
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(10):
            writer.write(bytes([i]) * (60 + 3 * i))
    data = _write_marker(root, "train/train-00000-of-00001.tfrecord", 0, 1, num_bytes_delta)
    return str(path), data


def test_a_seek_in_a_converted_shard_reads_its_marker_not_the_skipped_records(tmp_path):
    """The converter's shard marker lists every record's offset: skipped frames whose length
    fields are garbage (a walk through them would fail) are never read."""
    path, data = _split_with_marker(tmp_path)
    whole = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    broken = bytearray(data)
    broken[: 8 * 4] = b"\xff" * 32
    with open(path, "wb") as f:
        f.write(bytes(broken))
    for skip in (1, 6, 10):
        assert _read_from(path, "", 10, skip) == whole[skip:]


def test_a_marker_of_another_size_is_not_trusted(tmp_path):
    """A shard replaced after its marker was written (another size): the frames are walked."""
    path, _ = _split_with_marker(tmp_path, num_bytes_delta=3)
    whole = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    for skip in (1, 6, 10):
        assert _read_from(path, "", 10, skip) == whole[skip:]
