"""Training records in the epoch order (pipeline/reader/partitions.py, epoch_order.py) from any
global step: each input pipeline's part of every global batch, read from the partitions it
comes from only, epoch after epoch. TensorFlow + core only."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import tensorflow as tf

from pipeline.reader.epoch_order import EpochOrder, crop_seeds
from pipeline.reader.partitions import (
    PartitionedOrder,
    PartitionTables,
    default_partitions,
    partition,
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
# A partition hands on at least this many records at a time (a few steps' worth) when its
# order is not permuted: one tf.data element per partition and step cost more than decoding
# small images (docs/benchmarks.md, "Several workers").
_PARTITION_RECORDS = 16


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


def partitioned_order(config, default_seed: int, locate=None) -> PartitionedOrder:
    """The epoch order in partitions (pipeline/reader/partitions.py): `Order(partitions=)`, or
    by default from the split's pieces and the global batch only, never from the workers, so
    every worker and every restart with any number of workers draws the same order.
    `locate(i)`: listed shard i's record offsets (or None), for pieces cut by a partition."""
    template, batch = epoch_order(config, default_seed), config.global_batch_size
    _steps(template, batch)
    count = config.partitions or default_partitions(
        len(template.counts), batch, config.shards_at_once
    )
    if template.permute:
        steps_per_window = -(-template.window // batch)
    else:  # the window is one step; a partition hands on a few steps' records at a time
        steps_per_window = -(-_PARTITION_RECORDS // (batch // count))
    return partition(template, config.pieces, batch, count, steps_per_window, locate)


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
    crop_base = random.getrandbits(62) if crop_seed is None else crop_seed
    order = _PipelineOrder(
        config, plan, plan.owned(num_pipelines, pipeline_id), batch_size, read_part, crop_base
    )
    return _epochs_from(start_step, plan.steps, config.repeat, order.epoch)


class _PipelineOrder:
    """One input pipeline's part of the partitioned order: the partitions it owns (`mine`) and its
    columns `low:high` of each global batch, read window by window."""

    def __init__(self, config, plan, owned, batch_size: int, read_part, crop_base: int) -> None:
        mine, low, high = owned
        self.steps, self.per_window = plan.steps, plan.steps_per_window
        self.batch, self.batch_size = plan.global_batch_size, batch_size
        self.mine, self.crop_base = mine, crop_base
        self.tables = PartitionTables(plan)
        self.source = (_Cached if config.cache else _Streamed)(config, plan, self.tables, read_part)
        self.columns = _Columns(plan, mine, low, high)
        # The global batch's columns of this pipeline (from its partitions' first column).
        mine_from = plan.columns[mine.start]
        self.seed_columns = slice(mine_from + low, mine_from + high)

    def rows_of(self, window, begin) -> tuple[tf.Tensor, tf.Tensor]:
        """The window's first step to yield (from step `begin` on) and one past its last."""
        first = tf.maximum(begin - window * self.per_window, 0)
        last = tf.minimum(
            tf.constant(self.per_window, tf.int64), self.steps - window * self.per_window
        )
        return first, last

    def final(self, p, index, begin, window, records) -> tuple[tf.Tensor, tf.Tensor]:
        """Partition `p`'s records of the window's steps from step `begin` on, in final order,
        step after step (and the window's number)."""
        first, rows = self.rows_of(window, begin)
        width = tf.gather(self.tables.widths, p)
        if not self.tables.permute:
            return records[first * width : rows * width], window
        size = tf.shape(records, out_type=tf.int64)[0]
        used = tf.range(first * width, rows * width)
        permutation = self.tables.permutation(p, index, window, size)
        return tf.gather(records, tf.gather(permutation, used)), window

    def batches(self, index, begin, records, window) -> tuple[tf.Tensor, tf.Tensor]:
        """This pipeline's batches of the window's steps, with the crop and flip seeds of
        their global positions."""
        window = tf.reshape(window, [-1])[0]
        first, rows = self.rows_of(window, begin)
        seeds = crop_seeds(self.crop_base, index, window, self.per_window * self.batch)
        seeds = tf.reshape(seeds, [-1, self.batch, 2])[first:rows, self.seed_columns]
        return (
            tf.reshape(self.columns.select(records), [-1, self.batch_size]),
            tf.reshape(seeds, [-1, self.batch_size, 2]),
        )

    def epoch(self, index: tf.Tensor, begin: tf.Tensor) -> tf.data.Dataset:
        """This pipeline's records of epoch `index` from global step `begin` on."""
        first = begin // self.per_window
        wanted = -(-self.steps // self.per_window) - first
        context = self.source.epoch_context()
        mine = self.mine

        def partition_steps(j: tf.Tensor) -> tf.data.Dataset:
            p = j + mine.start
            windows = self.source.windows(p, index, first, context).take(wanted)
            numbered = tf.data.Dataset.zip(tf.data.Dataset.range(first, _FOREVER), windows)
            return numbered.map(traced_as_written(lambda w, r: self.final(p, index, begin, w, r)))

        # One element per partition in turn (each has `wanted` windows), read side by side.
        parts = tf.data.Dataset.range(len(mine)).interleave(
            traced_as_written(partition_steps),
            cycle_length=len(mine),
            block_length=1,
            num_parallel_calls=len(mine),
            deterministic=True,
        )
        if len(mine) > 1:
            parts = parts.ragged_batch(len(mine))
        parts = parts.map(
            traced_as_written(lambda records, window: self.batches(index, begin, records, window)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        return parts.unbatch()


class _Columns:
    """One window's records of the partitions `mine` (ragged when several: one row each,
    step after step) to the pipeline's part of each of its steps: columns `[low, high)` of
    theirs."""

    def __init__(self, plan: PartitionedOrder, mine: range, low: int, high: int):
        self.width = plan.width(mine.start)
        self.single = len(mine) == 1
        # Column c of the steps comes from partition `part[c]` (of mine), its column `inner[c]`.
        owned = [(j, c) for j, p in enumerate(mine) for c in range(plan.width(p))]
        self.part = tf.constant([j for j, _ in owned[low:high]], tf.int64)
        self.inner = tf.constant([c for _, c in owned[low:high]], tf.int64)
        self.widths = tf.constant([plan.width(p) for p in mine], tf.int64)
        self.whole = self.single and low == 0 and high == self.width
        self.low, self.high = low, high

    def select(self, records) -> tf.Tensor:
        """[steps, high - low] records."""
        if self.single:  # one partition: its columns, no gather
            records = tf.reshape(records, [-1, self.width])
            return records if self.whole else records[:, self.low : self.high]
        splits = records.row_splits
        rows = (splits[1] - splits[0]) // self.widths[0]
        index = (
            tf.gather(splits[:-1], self.part)[tf.newaxis, :]
            + tf.range(rows)[:, tf.newaxis] * tf.gather(self.widths, self.part)[tf.newaxis, :]
            + self.inner[tf.newaxis, :]
        )
        return tf.gather(records.flat_values, index)


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


class _Streamed:
    """Each partition's merged stream, window by window, read from its pieces by its own
    interleave: one traced function for every partition (its tables indexed by partition)."""

    def __init__(self, config, plan: PartitionedOrder, tables, read_part: Callable):
        self.config, self.plan, self.tables = config, plan, tables
        self.read = read_part
        if config.local_copies is not None:
            self.read = config.local_copies.after_download(read_part)
        units = plan.all_units()
        shards = config.shards
        shard_of = tf.constant(units.shard, tf.int64)
        self.paths = tf.gather(tf.constant([s.path for s in shards], tf.string), shard_of)
        self.compressions = tf.gather(
            tf.constant([s.compression for s in shards], tf.string), shard_of
        )
        self.in_shard = tf.gather(tf.constant([s.num_examples for s in shards], tf.int64), shard_of)
        self.firsts, self.counts = (tf.constant(v, tf.int64) for v in (units.first, units.count))
        self.offsets = tf.constant(units.offset, tf.int64)
        self.lengths = tf.constant(units.length, tf.int64)
        # A shard's last piece is read to the shard's end: its record count is checked there.
        self.ends_shard = tf.equal(self.firsts + self.counts, self.in_shard)
        self.window_sizes = tf.constant([o.window for o in plan.orders], tf.int64)

    def epoch_context(self) -> None:
        return None

    def _pieces_from(self, i: tf.Tensor, skip: tf.Tensor) -> tuple:
        """read_part's arguments for pieces `i`, from record `skip` on in each."""
        unknown = tf.constant(-1, tf.int64)
        span = Span(
            first=tf.gather(self.firsts, i) + skip,
            offset=tf.where(skip == 0, tf.gather(self.offsets, i), unknown),  # inside: look up
            limit=tf.where(
                tf.gather(self.ends_shard, i), unknown, tf.gather(self.counts, i) - skip
            ),
            length=tf.where(skip == 0, tf.gather(self.lengths, i), unknown),
        )
        paths, compressions = tf.gather(self.paths, i), tf.gather(self.compressions, i)
        return paths, compressions, tf.gather(self.in_shard, i), span

    def windows(self, p: tf.Tensor, epoch: tf.Tensor, first: tf.Tensor, _) -> tf.data.Dataset:
        """Partition `p`'s merged stream of `epoch` from window `first` on."""
        window = tf.gather(self.window_sizes, p)
        units, skips = self.tables.resume_inputs(p, epoch, first * window)
        parts = tf.data.Dataset.from_tensor_slices(self._pieces_from(units, skips))
        if self.config.local_copies is not None:
            parts = self.config.local_copies.localize(parts)
        if self.plan.lanes == 1:
            # One piece at a time: the partitions' interleave is this one's reader thread.
            return parts.flat_map(self.read).batch(window)
        # The merge the partition's order is defined by; one reader per lane.
        merged = parts.interleave(
            self.read,
            cycle_length=self.plan.lanes,
            block_length=1,
            num_parallel_calls=self.plan.lanes,
            deterministic=True,
        )
        return merged.batch(window).prefetch(2)


class _Cached:
    """The same windows from the split's records kept in RAM (read once, in listed order),
    gathered instead of read."""

    def __init__(self, config, plan: PartitionedOrder, tables, read_part: Callable):
        self.tables = tables
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
        self.listed = files.flat_map(read_part).batch(plan.starts[-1]).cache()
        self.plan = plan
        self.window_sizes = tf.constant([o.window for o in plan.orders], tf.int64)
        self.totals = tf.constant([o.num_examples for o in plan.orders], tf.int64)
        self.last = -(-plan.steps // plan.steps_per_window)

    def epoch_context(self) -> tf.Tensor:
        # Read to its end (the cache is complete only then), once per epoch.
        return self.listed.get_single_element()

    def windows(self, p, epoch, first, everything) -> tf.data.Dataset:
        merged = self.tables.merged_records(p, epoch)
        width, total = tf.gather(self.window_sizes, p), tf.gather(self.totals, p)

        def window(k: tf.Tensor) -> tf.Tensor:
            return tf.gather(everything, merged[k * width : tf.minimum((k + 1) * width, total)])

        return tf.data.Dataset.range(first, self.last).map(window)
