"""Which records each input pipeline reads per epoch: contiguous, equal record ranges of the epoch's file order."""

from __future__ import annotations

import tensorflow as tf

__all__ = ["epoch_parts", "records_per_epoch"]


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
