"""Training records in the epoch order (pipeline/reader/epoch_order.py) from any global step:
each input pipeline's part of every global batch, epoch after epoch. TensorFlow + core only."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable

import tensorflow as tf

from pipeline.reader.epoch_order import EpochOrder
from pipeline.reader.partitions import (
    PartitionedOrder,
    default_partitions,
    partition,
    partition_seed,
)
from pipeline.reader.shard_records import Span
from pipeline.reader.shares import traced_as_written

__all__ = [
    "StartStep",
    "check_no_start_step",
    "epoch_order",
    "ordered_records",
    "partitioned_order",
    "read_start_step",
]

# What `make_dataset(start_step=...)` takes: a step, or something holding one that is read
# when iteration starts (a restored optimizer's `iterations`, a callable).
StartStep = int | Callable[[], int] | object

# Epochs "forever" for a repeating dataset (a Dataset.range bound).
_FOREVER = 2**62


def read_start_step(start_step: StartStep) -> int:
    """The global step `start_step` holds now (a variable's value, a callable's result)."""
    if hasattr(start_step, "numpy"):
        value = start_step.numpy()
    elif callable(start_step):
        value = start_step()
    else:
        value = start_step
    step = int(value)
    if step < 0:
        raise ValueError(f"start_step must be >= 0 (global steps already taken), got {step}")
    return step


def epoch_order(config, default_seed: int) -> EpochOrder:
    """The training split's epoch order over its pieces (pipeline/reader/pieces.py) from the
    reader's config (`default_seed` for seed=None: every worker and every restart must draw
    the same order)."""
    batch, pieces = config.global_batch_size, config.pieces
    window = config.window_records or _default_window(config)
    # Windows of whole global batches: no batch straddles two windows (ordered_records).
    return EpochOrder(
        counts=pieces.count,
        seed=default_seed if config.seed is None else config.seed,
        lanes=pieces.lanes,
        window=-(-window // batch) * batch,
        permute=window > batch,
    )


def _default_window(config) -> int:
    """Pieces read `lanes` at once mix a global batch well; a few whole shards need their
    records permuted over the shuffle buffer's window too (slower, docs/benchmarks.md)."""
    return config.global_batch_size if config.pieces.cut else config.shuffle_records


def check_no_start_step(config) -> None:
    """start_step needs the epoch order, which needs every shard's record count."""
    if config.training and not (isinstance(config.start_step, int) and config.start_step == 0):
        raise ValueError(
            f"start_step: {config.data_dir}'s dataset_info.json lacks shards' num_examples, so "
            "training cannot resume mid-epoch; re-run the conversion"
        )


def _start_tensor(start_step: StartStep, steps: int, repeat: bool) -> tf.Tensor:
    """The start step as an int64 scalar, read when an iteration of the dataset begins.

    A variable or callable is read then (a restored optimizer's step). An int is where the
    first iteration starts; without `repeat`, iteration k > 0 is the next epoch after the
    previous iteration's, from its start (a loop over a finite dataset reshuffles each pass).
    """
    if isinstance(start_step, int) and repeat:
        return tf.constant(read_start_step(start_step), tf.int64)
    passes = itertools.count()

    def read() -> int:
        step = read_start_step(start_step)
        k = next(passes)
        if k == 0 or not isinstance(start_step, int):
            return step
        return (step // steps + k) * steps

    return tf.ensure_shape(tf.py_function(read, [], tf.int64), [])


def partitioned_order(config, default_seed: int) -> PartitionedOrder:
    """The epoch order in partitions (pipeline/reader/partitions.py): `Order(partitions=)`, or
    by default from the split's pieces and the global batch only, never from the workers, so
    every worker and every restart with any number of workers draws the same order."""
    template, batch = epoch_order(config, default_seed), config.global_batch_size
    _steps(template, batch)
    count = config.partitions or default_partitions(len(template.counts), batch)
    steps_per_window = -(-(config.window_records or _default_window(config)) // batch)
    return partition(template, config.pieces, batch, count, steps_per_window)


def ordered_records(
    config,
    plan: PartitionedOrder,
    num_pipelines: int,
    pipeline_id: int,
    batch_size: int,
    *,
    read_part: Callable[..., tf.data.Dataset],
    start_step: StartStep,
    crop_seed: int | None,
) -> tf.data.Dataset:
    """`([batch_size] records, [batch_size, 2] crop seeds)` of one input pipeline, from global
    step `start_step` on; it reads only the partitions its part of each global batch comes from.

    Args:
        config: the reader's configuration (pipeline/reader/dataset.py `_Config`).
        plan: the split's epoch order in partitions.
        num_pipelines: input pipelines sharing each global batch (workers).
        pipeline_id: this pipeline's index.
        batch_size: records per element (the pipeline's part of a global batch, or a replica's).
        read_part: `(path, compression, records in the shard, Span) -> the span's records`
            (pipeline/reader/shard_records.py).
        start_step: global steps already taken (int, or read at iteration start).
        crop_seed: seeds the crop and flip of every position (None: fresh each run).

    Returns:
        This pipeline's part of each global batch, in order, `steps * B / P` records per epoch;
        epochs on forever when `config.repeat`, else to the end of the start epoch.
    """
    steps, per_window = plan.steps, plan.steps_per_window
    mine, low, high = plan.owned(num_pipelines, pipeline_id)
    crop_base = random.getrandbits(62) if crop_seed is None else crop_seed
    crops = [
        dataclasses.replace(plan.orders[p], seed=partition_seed(crop_base, p, plan.count))
        for p in mine
    ]
    make_windows = _cached_windows if config.cache else _streamed_windows
    windows = make_windows(config, plan, mine, read_part)
    # Its columns are whole partitions': no slice (and copy) of the steps' records.
    whole = low == 0 and high == plan.columns[mine[-1] + 1] - plan.columns[mine[0]]

    def part(index, begin, window, records) -> tuple[tf.Tensor, tf.Tensor]:
        """This pipeline's batches of the window's steps from step `begin` on, with their crop
        seeds: each partition's records in final order cut into its columns."""
        first = tf.maximum(begin - window * per_window, 0)
        rows = tf.minimum(tf.constant(per_window, tf.int64), steps - window * per_window)
        columns, seeds = [], []
        for j, p in enumerate(mine):
            width, order = plan.width(p), plan.orders[p]
            size = tf.shape(records[j], out_type=tf.int64)[0]
            used = tf.range(first * width, rows * width)
            if order.permute:
                used = tf.gather(order.window_permutation(index, window, size), used)
            columns.append(tf.reshape(tf.gather(records[j], used), [-1, width]))
            seed = tf.gather(crops[j].crop_seeds(index, window, size), used)
            seeds.append(tf.reshape(seed, [-1, width, 2]))
        records = columns[0] if len(columns) == 1 else tf.concat(columns, axis=1)
        seeds = seeds[0] if len(seeds) == 1 else tf.concat(seeds, axis=1)
        if not whole:
            records, seeds = records[:, low:high], seeds[:, low:high]
        return tf.reshape(records, [-1, batch_size]), tf.reshape(seeds, [-1, batch_size, 2])

    def epoch(index: tf.Tensor, begin: tf.Tensor) -> tf.data.Dataset:
        """This pipeline's records of epoch `index` from global step `begin` on."""
        first = begin // per_window
        wanted = -(-steps // per_window) - first
        numbers = tf.data.Dataset.range(first, _FOREVER)
        parts = tf.data.Dataset.zip(numbers, windows(index, first).take(wanted)).map(
            traced_as_written(lambda w, r: part(index, begin, w, r)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return parts.unbatch()

    return _epochs_from(start_step, steps, config.repeat, epoch)


def _epochs_from(
    start_step: StartStep, steps: int, repeat: bool, epoch: Callable
) -> tf.data.Dataset:
    """`epoch(index, begin)` from global step `start_step` on: the rest of its epoch, then
    later epochs (forever with `repeat`)."""

    def from_step(step: tf.Tensor) -> tf.data.Dataset:
        first_epoch, begin = step // steps, step % steps
        last = first_epoch + 1 if not repeat else _FOREVER
        epochs = tf.data.Dataset.range(first_epoch, last)
        return epochs.flat_map(
            traced_as_written(lambda e: epoch(e, tf.where(e == first_epoch, begin, 0)))
        )

    # The step is read when iteration begins: after a restore, not when the dataset was made.
    starts = tf.data.Dataset.range(1).map(
        traced_as_written(lambda _: _start_tensor(start_step, steps, repeat))
    )
    return starts.flat_map(traced_as_written(from_step))


def _steps(order: EpochOrder, batch: int) -> int:
    """Global steps per epoch; at least one."""
    if order.steps(batch) == 0:
        raise ValueError(
            f"training on {order.num_examples} examples with global_batch_size {batch}: "
            "not one full batch per epoch; lower the batch size"
        )
    return order.steps(batch)


def _streamed_windows(config, plan: PartitionedOrder, mine: range, read_part: Callable) -> Callable:
    """`windows(epoch, first)`: from window `first` on, a tuple per window of each partition
    in `mine`'s merged stream, each read from its pieces by its own interleave."""
    read = read_part
    if config.local_copies is not None:
        read = config.local_copies.after_download(read)

    def windows(epoch: tf.Tensor, first: tf.Tensor) -> tf.data.Dataset:
        return tf.data.Dataset.zip(
            tuple(_merged(config, plan.orders[p], plan.units[p], read)(epoch, first) for p in mine)
        )

    return windows


def _merged(config, order: EpochOrder, pieces, read: Callable) -> Callable:
    """`windows(epoch, first)`: one partition's merged stream from window `first` on, one
    tensor of records per window."""
    shards = config.shards
    shard_of = tf.constant(pieces.shard, tf.int64)
    paths = tf.gather(tf.constant([s.path for s in shards], tf.string), shard_of)
    compressions = tf.gather(tf.constant([s.compression for s in shards], tf.string), shard_of)
    in_shard = tf.gather(tf.constant([s.num_examples for s in shards], tf.int64), shard_of)
    firsts, counts = tf.constant(pieces.first, tf.int64), tf.constant(pieces.count, tf.int64)
    offsets, lengths = tf.constant(pieces.offset, tf.int64), tf.constant(pieces.length, tf.int64)
    # A shard's last piece is read to the shard's end: its record count is checked there.
    ends_shard = tf.equal(firsts + counts, in_shard)

    def pieces_from(i: tf.Tensor, skip: tf.Tensor) -> tuple:
        """read_part's arguments for pieces `i`, from record `skip` on in each."""
        unknown = tf.constant(-1, tf.int64)
        span = Span(
            first=tf.gather(firsts, i) + skip,
            offset=tf.where(skip == 0, tf.gather(offsets, i), unknown),  # inside: look it up
            limit=tf.where(tf.gather(ends_shard, i), unknown, tf.gather(counts, i) - skip),
            length=tf.where(skip == 0, tf.gather(lengths, i), unknown),
        )
        return tf.gather(paths, i), tf.gather(compressions, i), tf.gather(in_shard, i), span

    def windows(epoch: tf.Tensor, first: tf.Tensor) -> tf.data.Dataset:
        parts = tf.data.Dataset.from_tensor_slices(
            pieces_from(*order.resume_inputs(epoch, first * order.window))
        )
        if config.local_copies is not None:
            parts = config.local_copies.localize(parts)
        # The merge the epoch order is defined by; one reader per lane (AUTOTUNE read less).
        merged = parts.interleave(
            read,
            cycle_length=order.lanes,
            block_length=1,
            num_parallel_calls=order.lanes,
            deterministic=True,
        )
        return merged.batch(order.window).prefetch(2)

    return windows


def _cached_windows(config, plan: PartitionedOrder, mine: range, read_part: Callable) -> Callable:
    """`windows(epoch, first)` from the split's records kept in RAM (read once, in listed
    order): the same windows as streamed, gathered instead of read."""
    shards = config.shards
    files = tf.data.Dataset.from_tensor_slices(
        (
            [s.path for s in shards],
            [s.compression for s in shards],
            tf.constant([s.num_examples for s in shards], tf.int64),
            Span(*[tf.constant([v] * len(shards), tf.int64) for v in (0, 0, -1, -1)]),
        )
    )
    if config.local_copies is not None:
        files = config.local_copies.localize(files)
        read_part = config.local_copies.after_download(read_part)
    # One element, the whole split, kept after the first pass.
    listed = files.flat_map(read_part).batch(plan.starts[-1]).cache()
    last = -(-plan.steps // plan.steps_per_window)

    def windows(epoch: tf.Tensor, first: tf.Tensor) -> tf.data.Dataset:
        merged = [plan.orders[p].merged_records(epoch) + plan.starts[p] for p in mine]
        sizes = [(plan.orders[p].window, plan.orders[p].num_examples) for p in mine]
        # Read to its end (the cache is complete only then), once per epoch.
        everything = listed.get_single_element()

        def window(k: tf.Tensor) -> tuple:
            return tuple(
                tf.gather(everything, m[k * width : tf.minimum((k + 1) * width, total)])
                for m, (width, total) in zip(merged, sizes, strict=True)
            )

        return tf.data.Dataset.range(first, last).map(window)

    return windows
