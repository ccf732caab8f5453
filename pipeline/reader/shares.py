"""Which records each input pipeline reads per epoch: contiguous, equal record ranges of the epoch's file order."""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

__all__ = ["epoch_parts", "pipeline_records", "records_per_epoch"]

# The reader's tf.data functions are traced as written, without AutoGraph (they use tf.cond and
# tf.map_fn where they branch or loop on tensors): AutoGraph's conversion would delay a fresh
# process's first batch by seconds. pipeline/reader/dataset.py uses the same.
traced_as_written = tf.autograph.experimental.do_not_convert


def records_per_epoch(
    num_examples: int, global_batch_size: int, num_pipelines: int, training: bool
) -> int | None:
    """Records one input pipeline yields per training epoch; None in evaluation (all of its range).

    Training drops the last partial global batch, so each of the `num_pipelines` pipelines
    yields `steps_per_epoch * global_batch_size / num_pipelines` records: the same number on
    every worker (no worker waits for a batch another never makes), and exactly the steps
    `steps_per_epoch(...)` counts. Each pipeline's range holds at least that many records.
    """
    if not training:
        return None
    steps = num_examples // global_batch_size
    return steps * (global_batch_size // num_pipelines)


def epoch_parts(
    counts: tf.Tensor,
    key: tf.Tensor | None,
    num_pipelines: int,
    pipeline_id: int,
) -> tf.data.Dataset:
    """The parts of shards one input pipeline reads in one epoch.

    The epoch's file order is the listed order (`key` None) or a permutation drawn from `key`
    (int64 scalar; every worker draws the same keys, so every worker computes the same order).
    Laid end to end in that order, the split's records are cut into `num_pipelines` contiguous
    ranges whose lengths differ by at most one, and pipeline `pipeline_id` reads range
    `pipeline_id`: each record once per epoch over all pipelines, whether the split has fewer
    shards than pipelines or many shards of uneven size. A range starts or ends inside at most
    one shard each, read by skipping or stopping early.

    Args:
        counts: int64 [F], the records of each shard in listed order (dataset_info.json).
        key: int64 scalar that draws this epoch's file order, or None for the listed order.
        num_pipelines: input pipelines reading the split.
        pipeline_id: this pipeline's index in [0, num_pipelines).

    Returns:
        A dataset of (shard index in listed order, records to skip, records to read), in this
        pipeline's reading order, shards it does not read left out.
    """
    counts = tf.cast(counts, tf.int64)
    if key is None:
        order = tf.range(tf.size(counts))
    else:
        seed = tf.stack([tf.cast(key, tf.int64), tf.constant(0, tf.int64)])
        order = tf.argsort(tf.random.stateless_uniform(tf.shape(counts), seed=seed))
    ordered = tf.gather(counts, order)
    ends = tf.cumsum(ordered)
    starts = ends - ordered
    total = tf.reduce_sum(counts)
    low = total * pipeline_id // num_pipelines
    high = total * (pipeline_id + 1) // num_pipelines
    skip = tf.clip_by_value(low - starts, 0, ordered)
    stop = tf.clip_by_value(high - starts, 0, ordered)
    keep = stop > skip
    return tf.data.Dataset.from_tensor_slices(
        (
            tf.boolean_mask(tf.cast(order, tf.int64), keep),
            tf.boolean_mask(skip, keep),
            tf.boolean_mask(stop - skip, keep),
        )
    )


def pipeline_records(
    config,
    num_pipelines: int,
    pipeline_id: int,
    *,
    read_shard: Callable[..., tf.data.Dataset],
    file_seed: int | None,
    record_seed: int | None,
    crop_seed: int | None,
    max_parallel_shards: int,
) -> tf.data.Dataset:
    """Serialized records of one input pipeline, epoch after epoch (with seeds in training).

    Each epoch, the split's records in that epoch's file order are cut into one contiguous range
    per input pipeline (`epoch_parts`): together the pipelines read every record
    once per epoch, and in training each yields exactly `records_per_epoch` of its range, the
    same on every worker, so `steps_per_epoch(...)` steps are one epoch on every worker. The
    record shuffle runs within an epoch: its buffer refills at each epoch's start, the price of
    never showing a record twice in one epoch (a buffer spanning epochs did).

    Args:
        config: the reader's validated configuration (pipeline/reader/dataset.py `_Config`).
        num_pipelines: input pipelines reading the split.
        pipeline_id: this pipeline's index.
        read_shard: `(path, compression, expected records, check counts) -> records` of a
            whole shard, failing with its name.
        file_seed: draws each epoch's file order; the same on every worker.
        record_seed: the record shuffle's seed (None: fresh randomness).
        crop_seed: the stream of per-record crop and flip seeds (None: fresh randomness).
        max_parallel_shards: shards read at once.

    Returns:
        Serialized records (training: `(record, [2] seed)` pairs), epoch after epoch.
    """
    check_counts = _counts_known(config.shards, num_pipelines)
    quota = records_per_epoch(
        config.num_examples, config.global_batch_size, num_pipelines, config.training
    )
    if quota == 0:  # else every epoch is empty and a repeating pipeline never yields a batch
        raise ValueError(
            f"training on {config.num_examples} examples with global_batch_size "
            f"{config.global_batch_size}: not one full batch per epoch; lower the batch size"
        )
    shuffle_records = min(config.shuffle_records, max(1, config.num_examples // num_pipelines))
    # One key per epoch draws its file order: the same keys on every worker (same seed), new
    # keys each time the dataset is iterated again (a second `repeat=False` pass reshuffles).
    keys = tf.data.Dataset.random(seed=file_seed, rerandomize_each_iteration=True)
    if not config.repeat or config.cache:
        keys = keys.take(1)
    epoch_records = _epoch_reader(
        config,
        num_pipelines,
        pipeline_id,
        read_shard=read_shard,
        check_counts=check_counts,
        record_seed=record_seed,
        quota=quota,
        shuffle_records=shuffle_records,
        max_parallel_shards=max_parallel_shards,
    )
    # Traced as written, and so are the functions nested in it (see traced_as_written above).
    records = keys.flat_map(traced_as_written(epoch_records))
    if config.cache:
        records = _cached(config, records, record_seed, quota, shuffle_records)
    if config.training:
        # A [2] seed per record for the stateless crop and flip: reproducible with `seed`.
        seeds = tf.data.Dataset.random(seed=crop_seed, rerandomize_each_iteration=True).batch(2)
        records = tf.data.Dataset.zip((records, seeds))
    return records


def _counts_known(shards, num_pipelines: int) -> bool:
    """Whether every shard's record count is known; several pipelines cannot do without them."""
    check_counts = all(s.num_examples >= 0 for s in shards)
    if not check_counts and num_pipelines > 1:
        unknown = next(s.path for s in shards if s.num_examples < 0)
        raise ValueError(
            f"{unknown} has no num_examples in dataset_info.json: {num_pipelines} input "
            "pipelines cannot share the split without overlap; re-run the conversion"
        )
    return check_counts


def _epoch_reader(
    config,
    num_pipelines: int,
    pipeline_id: int,
    *,
    read_shard: Callable[..., tf.data.Dataset],
    check_counts: bool,
    record_seed: int | None,
    quota: int | None,
    shuffle_records: int,
    max_parallel_shards: int,
) -> Callable[[tf.Tensor], tf.data.Dataset]:
    """`epoch_records(key)`: this pipeline's records of the epoch whose file order `key` draws."""
    shards = config.shards
    num_shards = len(shards)
    paths = tf.constant([s.path for s in shards], tf.string)
    compressions = tf.constant([s.compression for s in shards], tf.string)
    expected = tf.constant([s.num_examples for s in shards], tf.int64)
    # Unknown counts (one pipeline only): every shard read whole.
    counts = expected if check_counts else tf.fill([num_shards], tf.constant(2**40, tf.int64))
    shuffle = config.training and not config.cache

    def read(path, compression, expected_records, skip, take):
        records = read_shard(path, compression, expected_records, check_counts)
        # A range inside a shard: skip reads past the records before it; take stops reading.
        return records.skip(skip).take(take)

    if config.local_copies is not None:
        read = config.local_copies.after_download(read)

    def epoch_records(key: tf.Tensor) -> tf.data.Dataset:
        parts = epoch_parts(counts, key if shuffle else None, num_pipelines, pipeline_id)
        # (path, compression, records in the shard, records to skip, records to read)
        files = parts.map(
            lambda i, skip, take: (paths[i], compressions[i], expected[i], skip, take)
        )
        if config.local_copies is not None:
            # Downloads start a few files ahead; each shard is read from its verified local copy.
            files = config.local_copies.localize(files)
        records = files.interleave(
            read,
            cycle_length=max(1, min(max_parallel_shards, -(-num_shards // num_pipelines) + 1)),
            block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        if shuffle:
            seed = None if record_seed is None else tf.math.floormod(key + record_seed, 2**31 - 1)
            records = records.shuffle(shuffle_records, seed=seed).take(quota)
        return records

    return epoch_records


def _cached(
    config,
    records: tf.data.Dataset,
    record_seed: int | None,
    quota: int | None,
    shuffle_records: int,
) -> tf.data.Dataset:
    """`records` kept in RAM after the first epoch, reshuffled each epoch in training."""
    records = records.cache()
    if config.training:
        records = records.shuffle(shuffle_records, seed=record_seed, reshuffle_each_iteration=True)
        # Read the whole cached range every epoch (a partly read cache is dropped), keep
        # the epoch's quota.
        records = (
            records.enumerate()
            .filter(traced_as_written(lambda i, _: i < quota))
            .map(traced_as_written(lambda _, record: record))
        )
    if config.repeat:
        records = records.repeat()
    return records
