"""Records to the batches a training step takes: batch, decode, optional normalisation, prefetch,
and the tf.data options the reader sets. TensorFlow + core only."""

from __future__ import annotations

import os

import tensorflow as tf

from core.normalize import normalize_layer  # TFT's import: in normalize_layer, when asked for
from pipeline.reader.decode import decode_batch as _decode_batch
from pipeline.reader.decode import decode_example as _decode_example
from pipeline.reader.decode import postprocess_fn as _postprocess_fn
from pipeline.reader.detection import decode_targets_batch
from pipeline.reader.shares import traced_as_written

__all__ = ["batched"]

AUTOTUNE = tf.data.AUTOTUNE
# Decode calls beyond one per core when batches must stay in order (_in_order_calls).
_SPARE_CALLS = 4
# `traced_as_written(fn)`: traced without AutoGraph (pipeline/reader/shares.py says why), and so
# are the functions nested in it (interleave, scan, map_fn). The user's `postprocess` is not.


def batched(
    config,
    records: tf.data.Dataset,
    batch_size: int,
    multi_device: bool,
    deterministic: bool | None,
    prebatched: bool = False,
) -> tf.data.Dataset:
    """Records (training: with crop seeds) -> decoded batches, prefetched. `prebatched`: the
    records come in batches of `batch_size` already. `deterministic` True keeps the batches in
    the order of their records whatever the options say."""
    if config.task != "classification" or config.postprocess is None:
        # Batch the serialized records, then parse and decode a whole batch per call: a tf.data
        # function call per image, and parse_single_example, cost more than parsing a batch.
        # Detection and segmentation decode each image with its targets, augmented together
        # (pipeline/reader/detection.py).
        decode = _decode_batch if config.task == "classification" else decode_targets_batch
        if not prebatched:
            records = records.batch(
                batch_size,
                drop_remainder=config.training,
                num_parallel_calls=AUTOTUNE,
                deterministic=deterministic,
            )
        batches = records.map(
            traced_as_written(lambda *batch: decode(config, *batch)),
            num_parallel_calls=_in_order_calls() if deterministic else AUTOTUNE,
            deterministic=deterministic,
        )
    else:
        # The user's hook runs per example, so decode per example too.
        batches = _per_example(config, records, batch_size, deterministic, prebatched)
    if config.normalize_dir is not None:
        normalize = normalize_layer(config.normalize_dir)
        batches = batches.map(
            traced_as_written(lambda images, *rest: (normalize(images), *rest)),
            num_parallel_calls=AUTOTUNE,
            deterministic=deterministic,
        )
    batches = batches.prefetch(AUTOTUNE)
    return batches.with_options(_options(config, multi_device))


def _per_example(config, records, batch_size: int, deterministic, prebatched: bool):
    """Records decoded one by one, given to the user's postprocess, then batched."""
    if prebatched:
        records = records.unbatch()
    examples = records.map(
        traced_as_written(lambda record, seed=None: _decode_example(config, record, seed)),
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )
    examples = examples.map(
        _postprocess_fn(config), num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )
    return examples.batch(
        batch_size,
        drop_remainder=config.training,
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )


def _in_order_calls() -> int:
    """Batches decoded at once when they must come out in order: a slow batch holds up those
    behind it, and AUTOTUNE, which allows about one call per core, then leaves cores idle
    (docs/benchmarks.md, issue 57); a few spare calls keep them busy."""
    if hasattr(os, "sched_getaffinity"):  # Linux: the cores this process may run on
        return len(os.sched_getaffinity(0)) + _SPARE_CALLS
    return (os.cpu_count() or 1) + _SPARE_CALLS


def _options(config, multi_device: bool) -> tf.data.Options:
    """tf.data options, each set on purpose."""
    options = tf.data.Options()
    options.deterministic = config.deterministic
    # We split records between pipelines ourselves (per InputContext); auto-sharding would
    # shard again, or warn that the source is unshardable.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # Parallelism comes from many images at once (parallel map); per-op thread pools only add
    # contention. TF official models' image readers set the same.
    options.threading.max_intra_op_parallelism = 1
    options.experimental_optimization.map_parallelization = True
    options.experimental_optimization.parallel_batch = True
    # With several local devices, stagger the last prefetch so input work does not collide with
    # the host's step launch.
    options.experimental_slack = multi_device and config.training
    return options
