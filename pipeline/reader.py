"""The training-side reader: a converted dataset's shards to a batched, distributed tf.data pipeline."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import posixpath
from collections.abc import Callable, Sequence
from typing import Literal

import tensorflow as tf

from pipeline.core import raw_pixels, schema, shard_cache, versions

__all__ = ["ShardFile", "evaluation_images", "make_dataset", "split_files", "steps_per_epoch"]

_log = logging.getLogger(__name__)

AUTOTUNE = tf.data.AUTOTUNE

# Compression by shard-name suffix (CONTRACT.md: "GZIP adds .gz").
_COMPRESSION_BY_SUFFIX = {".gz": "GZIP", ".zz": "ZLIB", ".zlib": "ZLIB"}

# Shards read at once per input pipeline: enough outstanding reads to hide object-store latency
# (gs:// first-byte time is ~50 ms) while a 2-core laptop still reads a few files at a time.
_MAX_PARALLEL_SHARDS = 16
# Read-ahead per open shard. TF's default (256 KB) means one GCS round trip per ~3 records of
# ~100 KB; 8 MB is what TF official models' ImageNet reader uses. 16 open shards x 8 MB = 128 MB.
_READ_BUFFER_BYTES = 8 * 1024 * 1024

# Records counted at a time when checking each shard's record count (see _read_shard): 32 records
# of ~100 KB per open shard, x16 open shards, is ~50 MB of transient memory.
_COUNT_BATCH = 32

# Default RAM for the shuffle buffer of serialized records, per input pipeline. ~100 KB ImageNet
# records give ~2,600 records, ~20 batches of 128: enough to mix shards, since file order is
# already shuffled per epoch and 16 shards are interleaved record by record.
_DEFAULT_SHUFFLE_MB = 256
# Never shuffle fewer records than this, even for huge records: below ~1k the buffer barely mixes
# neighbouring records of one shard (which share a source folder order).
_MIN_SHUFFLE_RECORDS = 1024

# cache=True/"auto" may hold the split's serialized records in at most this fraction of physical
# RAM; the rest is for the shuffle buffer, prefetched batches, the framework and the model.
_CACHE_RAM_FRACTION = 0.25

# Random-resized crop ("Inception" crop), as in Szegedy et al. 2015 and every ImageNet reference
# trainer (TF official models, torchvision RandomResizedCrop): 8%-100% of the area, aspect 3/4-4/3.
_CROP_AREA_RANGE = (0.08, 1.0)
_CROP_ASPECT_RANGE = (3.0 / 4.0, 4.0 / 3.0)
_CROP_MIN_OBJECT_COVERED = 0.1
_CROP_MAX_ATTEMPTS = 10
# Evaluation centre crop: the central 87.5% (224 of 256), the ResNet/Inception convention.
_DEFAULT_CROP_FRACTION = 0.875

# JPEG DCT scaling: libjpeg can decode at 1/2, 1/4 or 1/8 size for a fraction of the cost.
_DCT_RATIOS = (1, 2, 4, 8)
# Auto mode turns DCT scaling on when the split's median shorter side is at least this many times
# the target's longer side. Measured on this repo's 2-core dev box (CPU ms per image, fused crop,
# output 224x224): 1600x1200 photos 2.58 -> 2.22 (train), 2.91 -> 2.25 (eval) with scaling; on
# ~450x400 photos the per-image ratio switch costs 0.69 -> 0.79, so it stays off there.
_DCT_MIN_SCALE = 2
# Without the converter's size statistics, records sampled from the split's first shard to
# decide DCT scaling (one small read).
_SIZE_SAMPLE_RECORDS = 64

# Images of one batch decoded at once inside the batch's map call (tf.map_fn iterations).
_DECODE_PARALLEL_ITERATIONS = 4

# Workers must agree on the per-epoch file order to split files without overlap; with seed=None
# and several input pipelines this shared seed is used for the file order only.
_SHARED_FILE_SEED = 20240611
# Spreads one user seed over independent streams (file order, record shuffle, augmentation).
_SEED_STRIDE = 1_000_003


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One shard of a split, as dataset_info.json lists it."""

    path: str  # absolute path or URI
    compression: str  # "", "GZIP" or "ZLIB", from the file name's suffix
    num_examples: int  # -1 when dataset_info.json does not say


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

    def __post_init__(self) -> None:
        if self.global_batch_size <= 0:
            raise ValueError(f"global_batch_size must be positive, got {self.global_batch_size}")
        if min(self.image_size) <= 0:
            raise ValueError(f"image_size must be positive (height, width), got {self.image_size}")
        if not 0.0 < self.crop_fraction <= 1.0:
            raise ValueError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")
        known = set(schema.FEATURE_SPEC_JSON)
        unknown = [key for key in self.extra_features if key not in known]
        if unknown:
            raise ValueError(
                f"extra_features {unknown} are not Example features; use keys from "
                f"pipeline.core.schema, e.g. schema.LABEL_TEXT or schema.FILENAME"
            )


def split_files(
    data_dir: str, split: str, *, s3_endpoint_url: str | None = None
) -> tuple[dict, tuple[ShardFile, ...]]:
    """The split's entry in dataset_info.json and its shards, checked to exist.

    Args:
        data_dir: the converter's output directory (local path or URI: gs://, s3://, ...).
        split: a split name listed in dataset_info.json, e.g. "train".
        s3_endpoint_url: S3 endpoint for s3:// data (default: boto3's, or AWS_ENDPOINT_URL_S3).

    Returns:
        (the split's dict from dataset_info.json, its shards in listed order).

    Raises:
        schema.DatasetInfoError: `data_dir` has no readable dataset_info.json.
        ValueError: the split is not in dataset_info.json, or lists no shards.
        FileNotFoundError: a listed shard is missing, naming it.
    """
    store = shard_cache.open_store(data_dir, s3_endpoint_url)
    data_dir = _resolve_version(data_dir, store)  # a versioned root reads LATEST's version
    _, split_info, shards = _load_split(data_dir, split, store)
    return split_info, shards


def _resolve_version(data_dir: str, store: shard_cache.Store) -> str:
    """A versioned root -> the version folder its LATEST pointer names, read through `store`
    (so s3:// roots resolve with the reader's own client); other folders as they are."""

    def read_text(uri: str) -> str | None:
        return store.read_bytes(uri).decode("utf-8", "replace") if store.exists(uri) else None

    return versions.resolve_dataset_dir(data_dir, read_text=read_text)


def _load_split(
    data_dir: str, split: str, store: shard_cache.Store
) -> tuple[dict, dict, tuple[ShardFile, ...]]:
    """(dataset_info.json, the split's entry, its checked shards); see split_files."""
    info = store.load_dataset_info(data_dir)
    info_path = posixpath.join(data_dir.rstrip("/"), schema.DATASET_INFO)
    splits = info.get("splits") or {}
    if split not in splits:
        raise ValueError(
            f"unknown split {split!r}: {info_path} has splits {sorted(splits)}; pass one of them"
        )
    split_info = splits[split]
    listed = split_info.get("shards") or []
    if not listed:
        raise ValueError(f"split {split!r} in {info_path} lists no shards; re-run the conversion")
    shards = []
    for entry in listed:
        rel = entry["file"]
        suffix = os.path.splitext(rel)[1]
        shards.append(
            ShardFile(
                path=posixpath.join(data_dir.rstrip("/"), rel),
                compression=_COMPRESSION_BY_SUFFIX.get(suffix, ""),
                num_examples=int(entry.get("num_examples", -1)),
            )
        )
    _check_shards_exist(data_dir, split, shards, store)
    return info, split_info, tuple(shards)


def _check_shards_exist(
    data_dir: str, split: str, shards: Sequence[ShardFile], store: shard_cache.Store
) -> None:
    """One directory listing per folder (cheap on object stores) instead of a stat per shard."""
    present: dict[str, set[str]] = {}
    missing = []
    for shard in shards:
        folder, name = posixpath.split(shard.path)
        if folder not in present:
            present[folder] = set(store.listdir(folder))
        if name not in present[folder]:
            missing.append(shard.path)
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise FileNotFoundError(
            f"split {split!r} of {data_dir}: {len(missing)} shard(s) listed in "
            f"{schema.DATASET_INFO} are missing: {shown}; re-run the conversion (or copy the "
            f"whole output directory), then `imgrec verify {data_dir}`"
        )


def steps_per_epoch(
    data_dir: str,
    split: str,
    global_batch_size: int,
    *,
    drop_remainder: bool = True,
    s3_endpoint_url: str | None = None,
) -> int:
    """Global steps in one pass over the split, exactly, from dataset_info.json.

    Args:
        data_dir: the converter's output directory.
        split: split name, e.g. "train".
        global_batch_size: examples per step over all replicas.
        drop_remainder: True (training) counts full batches only; False (evaluation) counts
            the last partial batch too.
        s3_endpoint_url: S3 endpoint for s3:// data, as for make_dataset.

    Returns:
        The number of steps.

    Raises:
        ValueError: unknown split, non-positive batch size, or (with drop_remainder) a split
            smaller than one batch.
    """
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    store = shard_cache.open_store(data_dir, s3_endpoint_url)
    data_dir = _resolve_version(data_dir, store)
    info = store.load_dataset_info(data_dir)
    splits = info.get("splits") or {}
    if split not in splits:
        raise ValueError(
            f"unknown split {split!r}: {data_dir} has splits {sorted(splits)}; pass one of them"
        )
    n = int(splits[split]["num_examples"])
    if not drop_remainder:
        return math.ceil(n / global_batch_size)
    if n < global_batch_size:
        raise ValueError(
            f"split {split!r} has {n} examples, fewer than one global batch of "
            f"{global_batch_size}: lower the batch size or pass drop_remainder=False"
        )
    return n // global_batch_size


def make_dataset(
    data_dir: str,
    split: str,
    global_batch_size: int,
    *,
    strategy: tf.distribute.Strategy | None = None,
    input_context: tf.distribute.InputContext | None = None,
    training: bool = False,
    image_size: int | tuple[int, int] = (224, 224),
    seed: int | None = None,
    repeat: bool | None = None,
    deterministic: bool | None = None,
    cache: bool | Literal["auto"] = False,
    shuffle_buffer_mb: float = _DEFAULT_SHUFFLE_MB,
    crop_fraction: float = _DEFAULT_CROP_FRACTION,
    jpeg_dct_scaling: bool | None = None,
    extra_features: Sequence[str] = (),
    postprocess: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None,
    normalize: bool = False,
    cache_dir: str | None = None,
    s3_endpoint_url: str | None = None,
) -> tf.data.Dataset | tf.distribute.DistributedDataset:
    """The input pipeline of a converted split, batched per replica and prefetched.

    Files come from dataset_info.json. In training the file order is reshuffled every epoch with
    a seed all workers share, files are split between input pipelines, shards are read in
    parallel, serialized records are shuffled, then decoded with a random-resized crop and a
    random flip. In evaluation the order is fixed and images get a centre crop. Images are
    resized to `image_size` and returned as uint8: normalise on the accelerator.

    Every storage mode reads the same way (docs/storage_modes.md): JPEG/PNG/GIF records are
    decoded (the crop fused into libjpeg's decode), raw-pixel records (`--store pixels|smart`,
    image/format "raw") are reshaped with `decode_raw` and cropped without a decoder.

    Args:
        data_dir: the converter's output directory: a local path, gs:// (read by TensorFlow),
            or s3:// and any other store Apache Beam's FileSystems reads (copied to
            `cache_dir` first, see below).
        split: split name from dataset_info.json, e.g. "train" or "validation".
        global_batch_size: examples per step over all replicas; must divide by the replicas.
        strategy: when given, returns `strategy.distribute_datasets_from_function(...)`, each
            replica getting `global_batch_size / num_replicas_in_sync` examples per step.
        input_context: build the dataset of one input pipeline yourself (e.g. inside your own
            `distribute_datasets_from_function`); ignored when `strategy` is given.
        training: augment, shuffle, drop the last partial batch and repeat by default.
        image_size: output (height, width), or one int for square images.
        seed: makes file order, record shuffle and augmentation reproducible (with
            `deterministic=True`); None draws fresh randomness each run.
        repeat: repeat the split forever (default: `training`). Pair with `steps_per_epoch`.
        deterministic: keep element order reproducible (default: not `training`).
        cache: True keeps the split's serialized records in RAM after the first epoch (an error
            if they exceed a quarter of physical memory); "auto" does so only when they fit.
        shuffle_buffer_mb: RAM for the shuffle buffer of serialized records, per input pipeline;
            the record count is derived from the split's average record size.
        crop_fraction: evaluation centre crop, as a fraction of the largest window of the
            output's aspect ratio.
        jpeg_dct_scaling: decode large JPEGs at 1/2, 1/4 or 1/8 scale when the crop stays at
            least `image_size`; None decides from the split's typical image size.
        extra_features: more schema keys to return (e.g. `schema.LABEL_TEXT`,
            `schema.FILENAME`); elements become `(images, labels, {key: [B] tensor})`.
        postprocess: per-example `fn(image uint8 [H, W, 3], label) -> (image, label)`, applied
            after resizing and before batching.
        normalize: apply the dataset's tensorflow-transform export (`DIR/transform_fn`) to each
            batch: float32 images `(x - pixel_mean) / pixel_std` with the training split's
            statistics. Off by default: uint8 batches are 4x smaller to move, and normalising on
            the accelerator is cheaper than on the host.
        cache_dir: copy shards to this local directory before reading them: each is checked
            against the size and sha256 in dataset_info.json, written under a temporary name
            and renamed, downloaded in parallel a few shards ahead of the reader, and reused by
            later runs. Default: for stores TensorFlow cannot read (s3://, ...) a folder under
            the system temp dir (`shard_cache.DEFAULT_CACHE_DIR`); none for local and gs://.
        s3_endpoint_url: S3 endpoint for s3:// data (MinIO, Ceph, ...); default: boto3's, or
            AWS_ENDPOINT_URL_S3. Credentials and region come from the standard AWS environment
            (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_DEFAULT_REGION, ...).

    Returns:
        A `tf.data.Dataset` of `(images uint8 [B, H, W, 3], labels int64 [B])` with `B` the
        global batch (or the per-replica batch with `input_context`), or, with `strategy`, a
        distributed dataset of per-replica batches.

    Raises:
        schema.DatasetInfoError: `data_dir` has no readable dataset_info.json.
        ValueError: unknown split, bad arguments, or a batch size the replicas cannot share.
        FileNotFoundError: a shard listed in dataset_info.json is missing.
        shard_cache.ShardCacheError: `cache_dir`'s disk cannot hold the split's shards.

    A shard that turns out corrupt while reading (CRC mismatch, truncation) stops iteration
    with `tf.errors.InvalidArgumentError` naming the shard; with a cache, a shard whose
    download fails or does not match its sha256 stops it with a `tf.errors.OpError` naming it.

    A versioned root (`imgrec convert --versioned`) is read at the version its LATEST pointer
    names when this is called; a version published later is picked up by the next call.
    """
    store = shard_cache.open_store(data_dir, s3_endpoint_url)
    data_dir = _resolve_version(data_dir, store)  # once: every later read stays in this version
    info, split_info, shards = _load_split(data_dir, split, store)
    local_copies = None
    if cache_dir is not None or not shard_cache.tensorflow_reads(data_dir):
        if shard_cache.tensorflow_reads(data_dir) and "://" not in data_dir:
            _log.info("data_dir %s is local: cache_dir is not used", data_dir)
        else:
            local_copies = shard_cache.ShardCache(
                store,
                data_dir,
                split,
                split_info["shards"],
                cache_dir or shard_cache.DEFAULT_CACHE_DIR,
            )
            local_copies.check_space()
    num_examples = int(split_info.get("num_examples", sum(s.num_examples for s in shards)))
    num_bytes = int(split_info.get("num_bytes", 0))
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    replicas = None
    if strategy is not None:
        replicas = strategy.num_replicas_in_sync
    elif input_context is not None:
        replicas = input_context.num_replicas_in_sync
    if replicas and global_batch_size % replicas:
        raise ValueError(
            f"global_batch_size {global_batch_size} is not divisible by the {replicas} replicas "
            f"in sync; use a multiple of {replicas} (e.g. {replicas * max(1, global_batch_size // replicas)})"
        )
    avg_record = max(1, num_bytes // max(1, num_examples))
    store_mode = raw_pixels.store_mode(info)
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
        repeat=training if repeat is None else repeat,
        deterministic=(not training) if deterministic is None else deterministic,
        cache=_want_cache(cache, split, num_bytes),
        shuffle_records=max(_MIN_SHUFFLE_RECORDS, int(shuffle_buffer_mb * 2**20 / avg_record)),
        crop_fraction=crop_fraction,
        dct_scaling=bool(jpeg_dct_scaling),
        extra_features=tuple(extra_features),
        postprocess=postprocess,
        normalize_dir=_export_dir(data_dir, local_copies) if normalize else None,
        local_copies=local_copies,
        store=store_mode,
    )
    if strategy is not None:
        return strategy.distribute_datasets_from_function(
            lambda ctx: _pipeline_dataset(config, ctx, multi_device=True)
        )
    return _pipeline_dataset(config, input_context, multi_device=False)


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
    eagerly in one batch without a tf.data pipeline (the report shows a few dozen: building and
    tracing a pipeline for them measured ~2 s, the decode itself ~0.1 s).

    JPEG DCT scaling follows the dataset's statistics as in `make_dataset`; without statistics
    (--no_analyze), the median shorter side of these records decides.

    Args:
        records: serialized tf.train.Examples of one dataset.
        info: its dataset_info.json.
        image_size: (height, width) of the output.

    Returns:
        uint8 [len(records), height, width, 3].
    """
    store_mode = raw_pixels.store_mode(info)
    stats = info.get("statistics") or {}
    height = (stats.get("height_quantiles") or {}).get("p50")
    width = (stats.get("width_quantiles") or {}).get("p50")
    batch = tf.constant(list(records), tf.string)
    if height and width:
        min_side = int(min(height, width))
    else:
        sides = tf.io.parse_example(batch, schema.feature_spec(keys=(schema.HEIGHT, schema.WIDTH)))
        shorter = tf.minimum(sides[schema.HEIGHT], sides[schema.WIDTH]).numpy()
        min_side = int(sorted(shorter)[len(shorter) // 2]) if len(shorter) else 0
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
        dct_scaling=store_mode != "pixels" and min_side >= _DCT_MIN_SCALE * max(image_size),
        extra_features=(),
        postprocess=None,
        store=store_mode,
    )
    images, _ = _decode_batch(config, batch)
    return images


def _typical_min_side(
    info: dict, shard: ShardFile, local_copies: shard_cache.ShardCache | None = None
) -> int:
    """Median shorter side of the images: from the converter's statistics, else sampled (with a
    cache, from the first records of `shard`, read without downloading the whole shard)."""
    stats = info.get("statistics") or {}
    height = (stats.get("height_quantiles") or {}).get("p50")
    width = (stats.get("width_quantiles") or {}).get("p50")
    if height and width:
        return int(min(height, width))
    if local_copies is not None:
        sample = local_copies.head_sample(shard.path, shard.compression, _SIZE_SAMPLE_RECORDS)
        shard = ShardFile(path=sample, compression="", num_examples=-1)
    return _sampled_min_side(shard)


def _sampled_min_side(shard: ShardFile) -> int:
    """Median shorter side of the JPEGs among the first records of `shard` (0 if none)."""
    records = tf.data.TFRecordDataset(shard.path, compression_type=shard.compression)
    spec = schema.feature_spec(keys=(schema.ENCODED, schema.FORMAT))
    sides = []
    try:
        for record in records.take(_SIZE_SAMPLE_RECORDS):
            features = tf.io.parse_single_example(record, spec)
            encoded = features[schema.ENCODED]
            if features[schema.FORMAT] != schema.RAW_FORMAT and bool(tf.io.is_jpeg(encoded)):
                height, width, _ = tf.io.extract_jpeg_shape(encoded).numpy()
                sides.append(min(height, width))
    except tf.errors.OpError as e:
        # The pipeline reads the shard again and fails there with the shard's name; here we
        # only lose the size hint, so decode at full scale.
        _log.warning("could not sample image sizes from %s (%s)", shard.path, e.message)
    return int(sorted(sides)[len(sides) // 2]) if sides else 0


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
    shards = config.shards
    # Split whole files between pipelines when there are enough; otherwise every pipeline reads
    # every file in the same order and keeps every n-th record.
    shard_files = num_pipelines > 1 and len(shards) >= num_pipelines
    shard_records = num_pipelines > 1 and not shard_files
    files_per_pipeline = len(shards) // num_pipelines if shard_files else len(shards)

    # (path, compression, expected records)
    files = tf.data.Dataset.from_tensor_slices(
        (
            [s.path for s in shards],
            [s.compression for s in shards],
            tf.constant([s.num_examples for s in shards], tf.int64),
        )
    )
    if config.training:
        file_seed = config.seed
        if file_seed is None and num_pipelines > 1:
            file_seed = _SHARED_FILE_SEED
        # Same seed on every worker: each epoch's order is one permutation, split without overlap.
        files = files.shuffle(
            len(shards), seed=_sub_seed(file_seed, 0), reshuffle_each_iteration=True
        )
    if shard_files:
        files = files.shard(num_pipelines, pipeline_id)
    if config.repeat and not config.cache:
        files = files.repeat()  # Repeat names, not records: no drain between epochs.
    check_counts = all(s.num_examples >= 0 for s in shards)

    def read(path, compression, expected):
        return _read_shard(path, compression, expected, check_counts)

    if config.local_copies is not None:
        # Downloads start a few files ahead; each shard is read from its verified local copy.
        files = config.local_copies.localize(files)
        read = config.local_copies.after_download(read)
    records = files.interleave(
        read,
        cycle_length=max(1, min(_MAX_PARALLEL_SHARDS, files_per_pipeline)),
        block_length=1,
        num_parallel_calls=AUTOTUNE,
        deterministic=True if shard_records else None,
    )
    if shard_records:
        records = records.shard(num_pipelines, pipeline_id)
    if config.cache:
        records = records.cache()
        if config.repeat:
            records = records.repeat()
    if config.training:
        per_pipeline = max(1, config.num_examples // num_pipelines)
        records = records.shuffle(
            min(config.shuffle_records, per_pipeline),
            seed=_sub_seed(config.seed, 1, pipeline_id),
            reshuffle_each_iteration=True,
        )
        # A [2] seed per record for the stateless crop and flip: reproducible with `seed`.
        seeds = tf.data.Dataset.random(
            seed=_sub_seed(config.seed, 2, pipeline_id), rerandomize_each_iteration=True
        ).batch(2)
        records = tf.data.Dataset.zip((records, seeds))
    if config.postprocess is None:
        # Batch the serialized records, then parse and decode a whole batch per call: one tf.data
        # function call per image measured ~40 us of CPU on top of the work (~10% of a 450x400
        # JPEG's decode), and parse_example over a batch 8 us/record against parse_single's 48.
        batches = records.batch(
            batch_size, drop_remainder=config.training, num_parallel_calls=AUTOTUNE
        ).map(lambda *batch: _decode_batch(config, *batch), num_parallel_calls=AUTOTUNE)
    else:
        # The user's hook runs per example, so decode per example too.
        examples = records.map(
            lambda record, seed=None: _decode_example(config, record, seed),
            num_parallel_calls=AUTOTUNE,
        )
        examples = examples.map(_postprocess_fn(config), num_parallel_calls=AUTOTUNE)
        batches = examples.batch(
            batch_size, drop_remainder=config.training, num_parallel_calls=AUTOTUNE
        )
    if config.normalize_dir is not None:
        from pipeline.core.normalize import normalize_layer  # TFT only when asked for.

        normalize = normalize_layer(config.normalize_dir)
        batches = batches.map(
            lambda images, *rest: (normalize(images), *rest), num_parallel_calls=AUTOTUNE
        )
    batches = batches.prefetch(AUTOTUNE)
    return batches.with_options(_options(config, multi_device))


def _options(config: _Config, multi_device: bool) -> tf.data.Options:
    """tf.data options, each set on purpose."""
    options = tf.data.Options()
    options.deterministic = config.deterministic
    # We shard by file ourselves (per InputContext); auto-sharding would shard again, or warn
    # that the source is unshardable.
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


def _read_shard(
    path: tf.Tensor, compression: tf.Tensor, expected: tf.Tensor, check_counts: bool
) -> tf.data.Dataset:
    """Serialized records of one shard; a corrupt shard fails with its name.

    TFRecordDataset's own DataLossError ("corrupted record at 12") does not say which file. So
    read errors end the shard early (`ignore_errors` logs the original error), and a count check
    against dataset_info.json after the shard's last record fails naming the shard. The count
    runs on small batches of records: per-record bookkeeping measured +48 us/record (~7% of a
    450x400 JPEG decode), batches of 32 measured within noise of a bare read.
    """
    records = tf.data.TFRecordDataset(
        path, compression_type=compression, buffer_size=_READ_BUFFER_BYTES
    )
    if not check_counts:
        return records
    batches = records.ignore_errors(log_warning=True).batch(_COUNT_BATCH)
    # One empty batch marks the end of the shard.
    batches = batches.concatenate(tf.data.Dataset.from_tensors(tf.constant([], tf.string)))

    def count(n: tf.Tensor, batch: tf.Tensor):
        size = tf.shape(batch, out_type=tf.int64)[0]
        ok = tf.logical_or(size > 0, tf.equal(n, expected))
        # Built per batch of records, not per record: cheap enough to read well on failure.
        message = tf.strings.join(
            [
                "imgrec reader: shard ",
                path,
                " is corrupt or truncated: read ",
                tf.strings.as_string(n),
                " of ",
                tf.strings.as_string(expected),
                " records (the read error is logged above); re-convert it or run `imgrec verify`",
            ]
        )
        with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
            return n + size, tf.identity(batch)

    return batches.scan(tf.constant(0, tf.int64), count).unbatch()


def _decode_batch(config: _Config, records: tf.Tensor, seeds: tf.Tensor | None = None):
    """A batch of records -> (images uint8 [B, H, W, 3], labels int64 [B][, {key: [B]}])."""
    keys = (schema.ENCODED, schema.LABEL) + config.extra_features + _raw_keys(config)
    if not config.training:
        keys += (schema.HEIGHT, schema.WIDTH)
    features = tf.io.parse_example(records, schema.feature_spec(keys=keys))
    height, width = config.image_size
    # Raw records need their sides (and, mixed with encoded ones, their format) per image.
    raw = _raw_elems(config, features)
    if config.training:
        elems = (features[schema.ENCODED], seeds) + raw

        def one(e):
            return _decode_image(config, e[0], e[1], raw=e[2:])
    else:
        # The centre crops of the whole batch at once, from the sides the converter recorded
        # (it decoded them): saves a header parse and a dozen scalar ops per image.
        windows = tf.stack(
            _crop_window(config, features[schema.HEIGHT], features[schema.WIDTH], None), axis=1
        )
        elems = (features[schema.ENCODED], windows) + raw

        def one(e):
            return _decode_image(config, e[0], None, window=tf.unstack(e[1]), raw=e[2:])

    images = tf.map_fn(
        one,
        elems,
        fn_output_signature=tf.TensorSpec((height, width, 3), tf.uint8),
        # A few images of the batch in flight: measured +5% images/s over one at a time on 2
        # cores, and no better with 8.
        parallel_iterations=_DECODE_PARALLEL_ITERATIONS,
    )
    return _with_extras(config, images, features)


def _with_extras(config: _Config, images: tf.Tensor, features: dict):
    """(images, labels) or (images, labels, {key: extra}) from the parsed features."""
    labels = features[schema.LABEL]
    if config.extra_features:
        return images, labels, {key: features[key] for key in config.extra_features}
    return images, labels


def _decode_example(config: _Config, record: tf.Tensor, seed: tf.Tensor | None):
    """Parse one record, crop, decode, resize: (image uint8 [H, W, 3], label int64[, extras])."""
    keys = (schema.ENCODED, schema.LABEL) + config.extra_features + _raw_keys(config)
    features = tf.io.parse_single_example(record, schema.feature_spec(keys=keys))
    image = _decode_image(config, features[schema.ENCODED], seed, raw=_raw_elems(config, features))
    return _with_extras(config, image, features)


def _raw_keys(config: _Config) -> tuple[str, ...]:
    """Features the raw-pixel path reads besides the encoded bytes (none for encoded datasets)."""
    if config.store == "encoded":
        return ()
    return (schema.HEIGHT, schema.WIDTH) + ((schema.FORMAT,) if config.store == "smart" else ())


def _raw_elems(config: _Config, features: dict) -> tuple:
    """(height, width[, is_raw]) for _decode_image's `raw`; () for encoded datasets."""
    if config.store == "encoded":
        return ()
    sides = (features[schema.HEIGHT], features[schema.WIDTH])
    if config.store == "smart":
        return sides + (raw_pixels.is_raw(features[schema.FORMAT]),)
    return sides


def _decode_image(
    config: _Config, encoded: tf.Tensor, seed: tf.Tensor | None, window=None, raw=()
) -> tf.Tensor:
    """One encoded image -> cropped, resized uint8 [H, W, 3] (augmented in training).

    `window` (top, left, height, width), when known, is the crop; else it is computed from the
    image's own header (random-resized in training, centre otherwise). `raw` is (height, width)
    of raw-pixel records (--store pixels), plus a bool "this one is raw" for --store smart.
    """
    height, width = config.image_size

    def jpeg() -> tf.Tensor:
        # Fused crop+decode: libjpeg skips the IDCT outside the window and stops after its last
        # row. Measured faster than a full decode even on ~450x400 photos (see module constants).
        crop = window
        if crop is None:
            shape = tf.io.extract_jpeg_shape(encoded)
            crop = _crop_window(config, shape[0], shape[1], seed)
        if not config.dct_scaling:
            return tf.io.decode_and_crop_jpeg(encoded, tf.stack(crop), channels=3)
        return _decode_and_crop_scaled(encoded, crop, config.image_size)

    def other() -> tf.Tensor:
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        crop = window
        if crop is None:
            shape = tf.shape(image)
            crop = _crop_window(config, shape[0], shape[1], seed)
        top, left, h, w = crop
        return tf.slice(image, tf.stack([top, left, 0]), tf.stack([h, w, 3]))

    def raw_crop() -> tf.Tensor:
        # No decoder: the stored pixels, reshaped, then the same crop as an encoded image gets.
        pixels = raw_pixels.decode_raw_image(encoded, raw[0], raw[1])
        crop = window
        if crop is None:
            crop = _crop_window(config, raw[0], raw[1], seed)
        top, left, h, w = crop
        return tf.slice(pixels, tf.stack([top, left, 0]), tf.stack([h, w, 3]))

    def decoded() -> tf.Tensor:
        return tf.cond(tf.io.is_jpeg(encoded), jpeg, other)

    # Only decode+crop sits in the branch: resizing inside a tf.cond branch measured ~15% slower.
    if config.store == "pixels":
        image = raw_crop()
    elif config.store == "smart":
        image = tf.cond(raw[2], raw_crop, decoded)
    else:
        image = decoded()
    # Resizing float32 pixels measured 30-40 us cheaper per 224x224 output than resizing the
    # uint8 image (TF's uint8 bilinear kernel converts as it goes); the cast costs less.
    image = tf.image.resize(tf.cast(image, tf.float32), (height, width), method="bilinear")
    # Bilinear output stays within [0, 255]: +0.5 and truncate rounds without a clip
    # (measured 0.035 ms/image cheaper than round + saturate_cast).
    image = tf.cast(image + 0.5, tf.uint8)
    if config.training:
        image = tf.image.stateless_random_flip_left_right(image, seed=seed)
    image.set_shape((height, width, 3))
    return image


def _crop_window(config: _Config, height: tf.Tensor, width: tf.Tensor, seed: tf.Tensor | None):
    """(top, left, crop_height, crop_width) int32: random-resized crop in training, else centre."""
    height = tf.cast(height, tf.int32)
    width = tf.cast(width, tf.int32)
    if config.training:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.stack([height, width, 3]),
            bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
            seed=seed,
            min_object_covered=_CROP_MIN_OBJECT_COVERED,
            aspect_ratio_range=_CROP_ASPECT_RANGE,
            area_range=_CROP_AREA_RANGE,
            max_attempts=_CROP_MAX_ATTEMPTS,
            use_image_if_no_bounding_boxes=True,
        )
        return begin[0], begin[1], size[0], size[1]
    out_h, out_w = config.image_size
    h_f, w_f = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    # Largest window with the output's aspect ratio, then its central crop_fraction.
    crop_h = tf.minimum(h_f, w_f * out_h / out_w) * config.crop_fraction
    crop_w = tf.minimum(w_f, h_f * out_w / out_h) * config.crop_fraction
    crop_h = tf.clip_by_value(tf.cast(tf.round(crop_h), tf.int32), 1, height)
    crop_w = tf.clip_by_value(tf.cast(tf.round(crop_w), tf.int32), 1, width)
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


def _decode_and_crop_scaled(encoded: tf.Tensor, window, image_size: tuple[int, int]) -> tf.Tensor:
    """Fused crop+decode at the largest DCT scale that keeps the crop >= image_size."""
    top, left, h, w = window
    out_h, out_w = image_size
    index = tf.constant(0)
    for i, ratio in enumerate(_DCT_RATIOS[1:], start=1):
        fits = tf.logical_and(h // ratio >= out_h, w // ratio >= out_w)
        index = tf.where(fits, i, index)

    def branch(ratio: int) -> Callable[[], tf.Tensor]:
        # libjpeg's crop window is in scaled coordinates.
        scaled = tf.stack([top // ratio, left // ratio, h // ratio, w // ratio])
        return lambda: tf.io.decode_and_crop_jpeg(encoded, scaled, channels=3, ratio=ratio)

    return tf.switch_case(index, [branch(r) for r in _DCT_RATIOS])


def _postprocess_fn(config: _Config) -> Callable:
    """Apply the user's per-example (image, label) hook, passing extras through."""
    fn = config.postprocess

    def apply(image, label, *extras):
        image, label = fn(image, label)
        return (image, label, *extras)

    return apply
