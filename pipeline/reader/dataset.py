"""The training-side reader: a converted dataset's shards to a batched, distributed tf.data pipeline.

The pipeline is assembled here; which files a split has is pipeline/reader/files.py, one shard's
records pipeline/reader/shard_records.py, how records become images pipeline/reader/decode.py
(crop math: pipeline/reader/crops.py). None of them imports Apache Beam.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import warnings
from collections.abc import Callable, Sequence

import tensorflow as tf

from core import leases, raw_pixels, schema, shard_cache, versions
from pipeline.reader.bands import PixelOutput, pixel_output, pixel_output_of_info
from pipeline.reader.batches import batched as _batched
from pipeline.reader.crops import DEFAULT_CROP_FRACTION as _DEFAULT_CROP_FRACTION
from pipeline.reader.decode import decode_batch_eagerly as _decode_batch_eagerly
from pipeline.reader.detection import TASKS, Detection, with_task
from pipeline.reader.files import ShardFile, split_files, steps_per_epoch
from pipeline.reader.files import load_split as _load_split
from pipeline.reader.files import median_jpeg_min_side as _median_jpeg_min_side
from pipeline.reader.files import resolve_version as _resolve_version
from pipeline.reader.files import typical_min_side as _typical_min_side
from pipeline.reader.options import (
    DEFAULT_ORDER,
    DEFAULT_PIXELS,
    DEFAULT_STORAGE,
    SHARDS_AT_ONCE,
    Classification,
    Order,
    Pixels,
    Storage,
    resolve_options,
)
from pipeline.reader.partitions import PartitionedOrder
from pipeline.reader.pieces import Pieces, record_offsets, split_pieces
from pipeline.reader.resumable import (
    StartStep,
    check_no_start_step,
    ordered_records,
    partitioned_order,
)
from pipeline.reader.shard_records import read_shard as _read_shard
from pipeline.reader.shares import pipeline_records

__all__ = ["ShardFile", "evaluation_images", "make_dataset", "split_files", "steps_per_epoch"]

_log = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE

# Shards read at once per input pipeline: enough outstanding reads to hide object-store latency,
# few enough that a small machine still reads a few files at a time.
_MAX_PARALLEL_SHARDS = 16
# Default RAM for the shuffle buffer of serialized records, per input pipeline (training's window
# over fewer shards than are read at once): a few thousand photos, enough to mix a few shards.
_DEFAULT_SHUFFLE_MB = 256
# Never shuffle fewer records than this, even for huge records: below ~1k the buffer barely mixes
# neighbouring records of one shard (which share a source folder order).
_MIN_SHUFFLE_RECORDS = 1024

# cache=True/"auto" may hold the split's serialized records in at most this fraction of physical
# RAM; the rest is for the shuffle buffer, prefetched batches, the framework and the model.
_CACHE_RAM_FRACTION = 0.25

# Auto mode turns JPEG DCT scaling on when the split's median shorter side is at least this many
# times the target's longer side: it pays on large photos, and costs more than it saves on photos
# near the output size.
_DCT_MIN_SCALE = 2

# Workers must agree on the per-epoch file order to split records without overlap; with seed=None
# and several input pipelines this shared seed is used for the file order only.
_SHARED_FILE_SEED = 20240611
# Spreads one user seed over independent streams (file order, record shuffle, augmentation).
_SEED_STRIDE = 1_000_003
# The training epoch order with seed=None: every worker, and every restart, must draw the same
# order (augmentation still draws fresh randomness).
_DEFAULT_ORDER_SEED = 20240611


@dataclasses.dataclass(frozen=True)
class _Config:
    """Everything the per-pipeline dataset function needs; validated once, up front."""

    shards: tuple[ShardFile, ...]
    num_examples: int
    num_bytes: int
    global_batch_size: int
    training: bool
    image_size: tuple[int, int]
    seed: int | None
    repeat: bool
    deterministic: bool
    cache: bool
    shuffle_records: int
    crop_fraction: float
    dct_scaling: bool
    extra_features: tuple[str, ...]
    postprocess: Callable | None
    normalize_dir: str | None = None
    local_copies: shard_cache.ShardCache | None = None  # stores TensorFlow cannot read
    # dataset_info.json["store"]: "encoded" (JPEG/PNG/GIF), "pixels" (raw) or "smart" (both).
    store: str = "encoded"
    # The dataset (a versioned root's version folder) the shards belong to, for error messages.
    data_dir: str = ""
    # Training's epoch order: records permuted together (rounded up to whole global batches);
    # 0: the default (pipeline/reader/resumable.py `epoch_order`).
    window_records: int = 0
    # Training: global steps already taken (an int, or read when iteration starts).
    start_step: StartStep = 0
    shards_at_once: int = SHARDS_AT_ONCE  # training: shards read at once
    partitions: int | None = None  # training: the epoch order's partitions (None: default)
    # Training: the units of the epoch order; None without every shard's record count.
    pieces: Pieces | None = None
    plan: PartitionedOrder | None = None  # training: the epoch order, in partitions
    pixels: PixelOutput = PixelOutput()  # output dtype and bands (pipeline/reader/bands.py)
    # task="detection" | "segmentation": (images, targets) elements (pipeline/reader/detection.py)
    task: str = "classification"
    detection: Detection = Detection()
    max_instances: int = 0  # detection: object slots per image

    def __post_init__(self) -> None:
        if self.global_batch_size <= 0:
            raise ValueError(f"global_batch_size must be positive, got {self.global_batch_size}")
        if min(self.image_size) <= 0:
            raise ValueError(f"image_size must be positive (height, width), got {self.image_size}")
        if self.shards_at_once <= 0:
            raise ValueError(f"shards_at_once must be positive, got {self.shards_at_once}")
        if not 0.0 < self.crop_fraction <= 1.0:
            raise ValueError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task != "classification" and (self.postprocess or self.extra_features):
            raise ValueError(
                f"task={self.task!r} returns (images, targets): postprocess and extra_features "
                "apply to classification only"
            )
        known = set(schema.FEATURE_SPEC_JSON)
        unknown = [key for key in self.extra_features if key not in known]
        if unknown:
            raise ValueError(
                f"extra_features {unknown} are not Example features; use keys from "
                f"core.schema, e.g. schema.LABEL_TEXT or schema.FILENAME"
            )


def make_dataset(
    data_dir: str,
    split: str,
    global_batch_size: int,
    *,
    strategy: tf.distribute.Strategy | tf.distribute.InputContext | None = None,
    training: bool = False,
    image_size: int | tuple[int, int] = (224, 224),
    seed: int | None = None,
    start_step: StartStep = 0,
    task: str | Classification | Detection = "classification",
    pixels: Pixels = DEFAULT_PIXELS,
    order: Order = DEFAULT_ORDER,
    storage: Storage = DEFAULT_STORAGE,
    **deprecated,
) -> tf.data.Dataset | tf.distribute.DistributedDataset:
    """The input pipeline of a converted split, batched per replica and prefetched.

    Files come from dataset_info.json. In training, which records make up each global step is a
    pure function of (seed, epoch) (pipeline/reader/epoch_order.py), so any number of workers
    or replicas reads each record once per epoch and `start_step` resumes mid-epoch
    (docs/training.md); images get a random-resized crop and flip, in evaluation a centre crop,
    and come out uint8 at `image_size`: normalise on the accelerator.

    Args:
        data_dir: the converter's output directory: local, gs:// or s3:// (docs/reader.md).
        split: split name from dataset_info.json, e.g. "train" or "validation".
        global_batch_size: examples per step over all replicas; must divide by the replicas.
        strategy: a tf.distribute.Strategy (each replica gets `global_batch_size /
            num_replicas_in_sync` examples a step), or an InputContext: that input pipeline's.
        training: augment, shuffle, drop the last partial batch and repeat by default.
        image_size: output (height, width), or one int for square images.
        seed: the epoch order and the augmentation (None: a fixed order, fresh augmentation).
        start_step: training: global steps taken so far (a restored step; a callable or
            variable is read when iteration starts: Keras' `resume_callback`, docs/training.md).
        task: "classification" or `Classification(...)`; with --annotations "detection",
            "segmentation" or `Detection(...)`: elements `(images, targets)` (docs/training.md).
        pixels, order, storage: `Pixels`, `Order`, `Storage` (pipeline/reader/options.py
            documents each default); the keywords they replaced work one release, deprecated.

    Returns:
        A `tf.data.Dataset` of `(images [B, H, W, C], labels int64 [B])` (uint8, C = 3 by
        default), or with a Strategy a distributed dataset of per-replica batches.

    Raises:
        schema.DatasetInfoError: `data_dir` has no readable dataset_info.json.
        ValueError: unknown split, bad arguments, or a batch size the replicas cannot share.
        FileNotFoundError: a shard listed in dataset_info.json is missing.
        shard_cache.ShardCacheError: `cache_dir`'s disk cannot hold the split's shards.

    A shard found corrupt while reading stops iteration naming it (docs/reader.md). A versioned
    root is read at the version LATEST names when this is called.
    """
    strategy, input_context = _strategy_or_context(strategy, deprecated)
    groups = {"pixels": pixels, "order": order, "storage": storage}
    task, options, groups = resolve_options(task, groups, deprecated)
    store = shard_cache.open_store(data_dir, groups["storage"].s3_endpoint_url)
    data_dir = _resolve_version(data_dir, store)  # once: every later read stays in this version
    is_version = versions.is_version_name(data_dir.rstrip("/").rpartition("/")[2])
    # Before the shards are checked: prunes see the lease.
    held = leases.hold(data_dir, store) if groups["storage"].lease and is_version else None
    try:
        config = _make_config(
            data_dir,
            split,
            store,
            global_batch_size,
            _replicas(strategy, input_context),
            training=training,
            image_size=image_size,
            seed=seed,
            **groups,
            task=(task, options),
        )
        config = _training_config(config, store, start_step, groups["order"])
        return _distribute(config, held, strategy, input_context)
    except BaseException:
        if held is not None:
            leases.release_unused(held)  # no dataset came of it
        raise


def _strategy_or_context(strategy, deprecated: dict):
    """(the Strategy, the InputContext): `strategy` may be either; the old input_context=
    keyword is taken from `deprecated` with a DeprecationWarning."""
    input_context = deprecated.pop("input_context", None)
    if input_context is not None:
        warnings.warn(
            "make_dataset(input_context=...) is deprecated: pass strategy=input_context",
            DeprecationWarning,
            stacklevel=3,
        )
    if isinstance(strategy, tf.distribute.InputContext):
        return None, strategy
    return strategy, input_context


def _make_config(
    data_dir: str,
    split: str,
    store: shard_cache.Store,
    global_batch_size: int,
    replicas: int | None,
    *,
    training: bool,
    image_size: int | tuple[int, int],
    seed: int | None,
    pixels: Pixels,
    order: Order,
    storage: Storage,
    task: tuple[str, Classification | Detection],
) -> _Config:
    """`make_dataset`'s arguments, resolved against the split's dataset_info.json and validated."""
    info, split_info, shards = _load_split(data_dir, split, store)
    where = f"split {split!r} of {data_dir}"
    output = pixel_output(split_info, where, pixels.dtype, pixels.channels, pixels.bands)
    if pixels.normalize and (output.dtype != tf.uint8 or output.channels != 3):
        raise ValueError(
            "normalize=True applies the RGB statistics of the transform: it needs the default "
            "dtype=tf.uint8 and 3 channels; normalise other bands in your model"
        )
    local_copies = _local_copies(store, data_dir, split, split_info, storage.cache_dir)
    num_examples = int(split_info.get("num_examples", sum(s.num_examples for s in shards)))
    num_bytes = int(split_info.get("num_bytes", 0))
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    _check_batch_divides(global_batch_size, replicas)
    avg_record = max(1, num_bytes // max(1, num_examples))
    window_mb = order.shuffle_buffer_mb
    buffer_records = int(
        (_DEFAULT_SHUFFLE_MB if window_mb is None else window_mb) * 2**20 / avg_record
    )
    store_mode = raw_pixels.store_mode(info)
    jpeg_dct_scaling = pixels.jpeg_dct_scaling
    if output.general:  # JPEGs there decode whole, like every other format
        jpeg_dct_scaling = False
    if jpeg_dct_scaling is None:
        jpeg_dct_scaling = store_mode != "pixels" and (
            _typical_min_side(info, shards[0], local_copies) >= _DCT_MIN_SCALE * max(image_size)
        )
    config = _Config(
        shards=shards,
        num_examples=num_examples,
        num_bytes=num_bytes,
        global_batch_size=global_batch_size,
        training=training,
        image_size=(int(image_size[0]), int(image_size[1])),
        seed=seed,
        repeat=training if order.repeat is None else order.repeat,
        deterministic=(not training) if order.deterministic is None else order.deterministic,
        cache=_want_cache(storage.cache, split, num_bytes),
        shuffle_records=max(_MIN_SHUFFLE_RECORDS, buffer_records),
        window_records=0 if window_mb is None else max(1, buffer_records),
        crop_fraction=pixels.crop_fraction,
        dct_scaling=bool(jpeg_dct_scaling),
        extra_features=tuple(getattr(task[1], "extra_features", ())),
        postprocess=getattr(task[1], "postprocess", None),
        normalize_dir=_export_dir(data_dir, local_copies) if pixels.normalize else None,
        local_copies=local_copies,
        store=store_mode,
        data_dir=data_dir,
        pixels=output,
    )
    return with_task(config, info, split, *task)


def _training_config(
    config: _Config, store: shard_cache.Store, start_step: StartStep, order: Order
) -> _Config:
    """`config` with how training reads: from which step, and, when every shard's record count
    is known (the epoch order needs them), in which pieces (a small split's shard markers)."""
    shards_at_once = order.shards_at_once
    config = dataclasses.replace(
        config, start_step=start_step, shards_at_once=shards_at_once, partitions=order.partitions
    )
    if config.training and all(s.num_examples >= 0 for s in config.shards):
        pieces = split_pieces(config.shards, store, config.num_bytes, shards_at_once)
        config = dataclasses.replace(config, pieces=pieces)
        # The shard markers of the shards a partition's edge cuts (one small read each).
        locate = functools.cache(lambda i: record_offsets(config.shards[i], store))
        plan = partitioned_order(config, _DEFAULT_ORDER_SEED, locate)
        config = dataclasses.replace(config, plan=plan)
        # Resuming needs the same count (it is never the workers'): say which it is.
        _log.info("training epoch order: %d partitions of %s", plan.count, config.data_dir)
    return config


def _local_copies(
    store: shard_cache.Store, data_dir: str, split: str, split_info: dict, cache_dir: str | None
) -> shard_cache.ShardCache | None:
    """The local cache of the split's shards, when TensorFlow cannot read them or it is asked for."""
    if cache_dir is None and shard_cache.tensorflow_reads(data_dir):
        return None
    if shard_cache.tensorflow_reads(data_dir) and "://" not in data_dir:
        _log.info("data_dir %s is local: cache_dir is not used", data_dir)
        return None
    local_copies = shard_cache.ShardCache(
        store,
        data_dir,
        split,
        split_info["shards"],
        cache_dir or shard_cache.DEFAULT_CACHE_DIR,
    )
    local_copies.check_space()
    return local_copies


def _replicas(
    strategy: tf.distribute.Strategy | None, input_context: tf.distribute.InputContext | None
) -> int | None:
    """Replicas in sync that share a global batch; None without a strategy or input context."""
    if strategy is not None:
        return strategy.num_replicas_in_sync
    if input_context is not None:
        return input_context.num_replicas_in_sync
    return None


def _check_batch_divides(global_batch_size: int, replicas: int | None) -> None:
    if replicas and global_batch_size % replicas:
        raise ValueError(
            f"global_batch_size {global_batch_size} is not divisible by the {replicas} replicas "
            f"in sync; use a multiple of {replicas} (e.g. {replicas * max(1, global_batch_size // replicas)})"
        )


def _distribute(
    config: _Config,
    held: leases.Lease | None,
    strategy: tf.distribute.Strategy | None,
    input_context: tf.distribute.InputContext | None,
) -> tf.data.Dataset | tf.distribute.DistributedDataset:
    """One input pipeline per `input_context`, or the strategy's; each keeps the lease `held`."""

    def pipeline(ctx, multi_device: bool) -> tf.data.Dataset:
        dataset = _pipeline_dataset(config, ctx, multi_device=multi_device)
        if held is not None:  # the lease lasts while a dataset (or its iterator) does
            leases.attach(held, dataset)
        return dataset

    if strategy is not None:
        return strategy.distribute_datasets_from_function(
            lambda ctx: pipeline(ctx, multi_device=True)
        )
    return pipeline(input_context, multi_device=False)


def _want_cache(cache: bool | str, split: str, num_bytes: int) -> bool:
    """Resolve cache=True/"auto"/False against a RAM budget."""
    if cache is False:
        return False
    if cache not in (True, "auto"):
        raise ValueError(f"cache must be True, False or 'auto', got {cache!r}")
    budget = _physical_memory() * _CACHE_RAM_FRACTION
    if num_bytes <= budget:
        return True
    if cache == "auto":
        _log.info(
            "split %r (%d MB) does not fit the cache budget; not caching",
            split,
            num_bytes >> 20,
        )
        return False
    raise ValueError(
        f"cache=True: split {split!r} holds {num_bytes >> 20} MB of records, more than "
        f"{_CACHE_RAM_FRACTION:.0%} of this machine's RAM ({int(budget) >> 20} MB); "
        "pass cache='auto' or cache=False"
    )


def _physical_memory() -> int:
    """Bytes of physical RAM (Linux/macOS); 0 where unknown, which disables caching."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def _export_dir(data_dir: str, local_copies: shard_cache.ShardCache | None) -> str:
    """Where normalize_layer finds `transform_fn/`: data_dir, or its copy in the cache."""
    if local_copies is None or shard_cache.tensorflow_reads(data_dir):
        return data_dir
    local_copies.mirror("transformed_metadata")
    return local_copies.mirror("transform_fn")


def evaluation_images(
    records: Sequence[bytes], info: dict, image_size: tuple[int, int] = (224, 224)
) -> tf.Tensor:
    """What `make_dataset(..., training=False)` yields for these serialized Examples, decoded
    eagerly one by one without a tf.data pipeline (the report shows a few dozen: building and
    tracing a pipeline costs more than decoding them; `decode.decode_batch_eagerly`).

    JPEG DCT scaling follows the dataset's statistics as in `make_dataset`; without statistics
    (--no_analyze), the median shorter side of the JPEGs among these records decides, as the
    JPEGs among a shard's first records do for `make_dataset` (raw-pixel records of --store
    smart do not count, so a smart dataset's large JPEGs are scaled as the reader scales them).

    Args:
        records: serialized tf.train.Examples of one dataset.
        info: its dataset_info.json.
        image_size: (height, width) of the output.

    Returns:
        uint8 [len(records), height, width, 3] (a multi-band image's first three bands).
    """
    store_mode = raw_pixels.store_mode(info)
    pixels = pixel_output_of_info(info)
    stats = info.get("statistics") or {}
    height = (stats.get("height_quantiles") or {}).get("p50")
    width = (stats.get("width_quantiles") or {}).get("p50")
    batch = tf.constant(list(records), tf.string)
    if height and width:
        min_side = int(min(height, width))
    else:  # the reader's rule for a dataset without statistics, on these records
        min_side = _median_jpeg_min_side(records)
    config = _Config(
        shards=(),
        num_examples=len(records),
        num_bytes=0,
        global_batch_size=max(1, len(records)),
        training=False,
        image_size=(int(image_size[0]), int(image_size[1])),
        seed=None,
        repeat=False,
        deterministic=True,
        cache=False,
        shuffle_records=_MIN_SHUFFLE_RECORDS,
        crop_fraction=_DEFAULT_CROP_FRACTION,
        dct_scaling=not pixels.general
        and store_mode != "pixels"
        and min_side >= _DCT_MIN_SCALE * max(image_size),
        extra_features=(),
        postprocess=None,
        store=store_mode,
        pixels=pixels,
    )
    images, _ = _decode_batch_eagerly(config, batch)
    return images


def _sub_seed(seed: int | None, stream: int, pipeline_id: int = 0) -> int | None:
    """An independent seed per random stream and input pipeline, derived from the user's seed."""
    if seed is None:
        return None
    return (seed * _SEED_STRIDE + stream * 7919 + pipeline_id) % (2**31 - 1)


def _pipeline_dataset(
    config: _Config, ctx: tf.distribute.InputContext | None, multi_device: bool
) -> tf.data.Dataset:
    """The dataset of one input pipeline: per-replica batches when `ctx` is given."""
    num_pipelines = ctx.num_input_pipelines if ctx else 1
    pipeline_id = ctx.input_pipeline_id if ctx else 0
    batch_size = (
        ctx.get_per_replica_batch_size(config.global_batch_size)
        if ctx
        else config.global_batch_size
    )
    if config.plan is not None:
        records = ordered_records(
            config,
            config.plan,
            num_pipelines,
            pipeline_id,
            batch_size,
            read_part=lambda path, compression, expected, span: _read_shard(
                path, compression, expected, True, config.data_dir, span
            ),
            start_step=config.start_step,
            crop_seed=_sub_seed(config.seed, 2),
        )
        return _batched(
            config, records, batch_size, multi_device, deterministic=True, prebatched=True
        )
    check_no_start_step(config)
    file_seed = config.seed
    if file_seed is None and num_pipelines > 1:
        file_seed = _SHARED_FILE_SEED
    records = pipeline_records(
        config,
        num_pipelines,
        pipeline_id,
        read_shard=lambda path, compression, expected, check_counts: _read_shard(
            path, compression, expected, check_counts, config.data_dir
        ),
        file_seed=_sub_seed(file_seed, 0),
        record_seed=_sub_seed(config.seed, 1, pipeline_id),
        crop_seed=_sub_seed(config.seed, 2, pipeline_id),
        max_parallel_shards=_MAX_PARALLEL_SHARDS,
    )
    return _batched(config, records, batch_size, multi_device, deterministic=None)
