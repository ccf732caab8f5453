"""Analyze: train-split statistics reduced by tensorflow-transform, exported as a TFT transform."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
)

from core import storage
from core.normalize import IMAGE, LABEL, normalize_layer
from core.runners import is_local_runner

# The analyzers' feature names, the label id of an unknown label and the mean/std ops, shared
# with the statistics read back from the export or summed exactly (transforms/statistics.py).
from transforms.elements import AnalysisRow, InspectedImage
from transforms.statistics import (
    _CHANNELS,
    _HEIGHT,
    _LABEL_VOCAB,
    _NUM_PIXELS,
    _PIXEL_SUM,
    _PIXEL_SUMSQ,
    _STAT_PREFIX,
    _WIDTH,
    EXPORT_DIRS,
    UNKNOWN_LABEL_ID,
    mean_std,
    read_statistics,
)

__all__ = [
    "IMAGE",
    "LABEL",
    "QUANTILES",
    "UNKNOWN_LABEL_ID",
    "AnalyzeDataset",
    "EXPORT_DIRS",
    "export_to_scratch",
    "SizeQuantilesFn",
    "normalize_layer",
    "publish_export",
    "read_statistics",
    "scratch_root",
]

# Percentiles reported for height and width: the tails (1, 99) show outliers that would dominate
# a resize, the quartiles show where most images sit.
QUANTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)

# Rows per Arrow RecordBatch fed to TFT: large enough to amortise a TF call, small enough that a
# bundle of per-image dicts (a few hundred bytes each) never matters for memory.
_MIN_BATCH, _MAX_BATCH = 16, 1024


def scratch_root(options: PipelineOptions) -> str:
    """Where tensorflow-transform keeps its scratch files (written by TensorFlow, not Beam).

    TFT writes intermediate SavedModels and analyzer results through TensorFlow's file layer and
    reads them back in later steps, possibly on other workers. On a local runner every worker
    shares this machine's disk, so the scratch is the system temp dir (or a local
    --temp_location); a URL there (s3://, an emulated gs://) is left to Beam, which can reach it.
    On a distributed runner (Dataflow) the workers share only --temp_location (gs://, which
    TensorFlow's GCS client reaches from the workers).

    Args:
        options: the pipeline's options.

    Returns:
        A local folder, or the remote runner's --temp_location.
    """
    runner = options.view_as(StandardOptions).runner
    name = runner if runner is None or isinstance(runner, str) else type(runner).__name__
    temp_location = options.view_as(GoogleCloudOptions).temp_location
    if is_local_runner(name):
        if temp_location and storage.is_local(temp_location):
            return temp_location
        return tempfile.gettempdir()
    return temp_location or tempfile.gettempdir()


def publish_export(export_dir: str, output_dir: str) -> list[str]:
    """Copy TFT's export (`transform_fn/`, `transformed_metadata/`) into the dataset.

    The export was written by TensorFlow's file layer; the copies go through Beam's FileSystems
    (the layer every other output file uses, honouring --s3_endpoint_url and the GCS emulator),
    each file under a temporary name first and then renamed, as the shards are. Files of an
    older export that the new one lacks are deleted. On a local output the folder tree is
    recreated as is, empty folders included, so it matches what TFT's WriteTransformFn makes.

    Args:
        export_dir: the folder TFT's WriteTransformFn wrote (TensorFlow-readable).
        output_dir: the dataset folder (local, gs://, s3://).

    Returns:
        The paths written, sorted.
    """
    import tensorflow as tf  # TFT's own file layer: whatever TFT wrote to, this can read.

    local = storage.is_local(output_dir)
    written: list[str] = []
    for sub in EXPORT_DIRS:
        source_root = os.path.join(export_dir, sub)
        target_root = storage.join(output_dir, sub)
        kept = set()
        for folder, _, files in sorted(tf.io.gfile.walk(source_root)):
            rel = os.path.relpath(folder, source_root)
            parts = [] if rel == "." else rel.split(os.sep)
            if local:
                os.makedirs(os.path.join(target_root, *parts), exist_ok=True)
            for name in sorted(files):
                with tf.io.gfile.GFile(os.path.join(folder, name), "rb") as f:
                    data = f.read()
                target = storage.join(target_root, *parts, name)
                storage.write_bytes_atomic(target, data)
                kept.add(target)
        written.extend(sorted(kept))
        storage.delete_quietly(sorted(set(_files_under(target_root)) - kept))
    return written


def _files_under(root: str) -> list[str]:
    """Every file below `root` through FileSystems ([] when there is none)."""
    if storage.is_local(root):
        return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]
    try:
        found = storage.match_under(root, "**")
    except (OSError, ValueError) as e:
        if "No files found" in str(e) or "matched no files" in str(e):
            return []
        raise
    return [m.path for m in found if not m.path.endswith("/")]


def _quantile_dict(counts: dict[int, int]) -> dict[str, int]:
    """{size: images} -> {"min", "p1", ..., "p99", "max"}: exact nearest-rank percentiles.

    pN is the smallest size that at least N % of the images have or stay under.
    """
    if not counts:
        return {}
    sizes = sorted(counts)
    total = sum(counts.values())
    result = {"min": sizes[0]}
    cumulative, position = 0, 0
    for q in QUANTILES:
        rank = -(-q * total // 100)  # ceil(q * total / 100), at least 1
        while cumulative + counts[sizes[position]] < rank:
            cumulative += counts[sizes[position]]
            position += 1
        result[f"p{q}"] = sizes[position]
    result["max"] = sizes[-1]
    return result


class SizeQuantilesFn(beam.CombineFn):
    """InspectedImage -> {"height_quantiles", "width_quantiles"}, exact (see `_quantile_dict`).

    Image sides are small integers, so a count per distinct side is exact and tiny (a few
    hundred entries for a photo collection). Measured: moving the two quantile analyzers out of
    tensorflow-transform halved its fixed cost (graph building and stages) on every run.
    """

    def create_accumulator(self):
        return {}, {}

    def add_input(self, acc, item):
        heights, widths = acc
        h, w = item.height, item.width
        heights[h] = heights.get(h, 0) + 1
        widths[w] = widths.get(w, 0) + 1
        return acc

    def merge_accumulators(self, accumulators):
        heights, widths = {}, {}
        for hs, ws in accumulators:
            for side, total in ((hs, heights), (ws, widths)):
                for size, n in side.items():
                    total[size] = total.get(size, 0) + n
        return heights, widths

    def extract_output(self, acc):
        heights, widths = acc
        return {
            "height_quantiles": _quantile_dict(heights),
            "width_quantiles": _quantile_dict(widths),
        }


def _stats_columns(item: InspectedImage | AnalysisRow) -> tuple[list[float], list[float], float]:
    """An image -> (channel sums, channel sums of squares, pixels); zeros when not sampled."""
    stats = item.stats
    if stats is None:
        return [0.0] * _CHANNELS, [0.0] * _CHANNELS, 0.0
    if len(stats) != 2 * _CHANNELS + 1:
        raise ValueError(
            f"{item.path!r}: stats has {len(stats)} values; expected "
            "[sum_r, sum_g, sum_b, sumsq_r, sumsq_g, sumsq_b, num_pixels]"
        )
    return [float(v) for v in stats[:3]], [float(v) for v in stats[3:6]], float(stats[6])


def _arrow_schema():
    return pa.schema(
        [
            (_PIXEL_SUM, pa.list_(pa.float64())),
            (_PIXEL_SUMSQ, pa.list_(pa.float64())),
            (_NUM_PIXELS, pa.list_(pa.float64())),
            (_HEIGHT, pa.list_(pa.int64())),
            (_WIDTH, pa.list_(pa.int64())),
            (LABEL, pa.list_(pa.binary())),
        ]
    )


def _to_record_batch(items: list[InspectedImage | AnalysisRow]):
    """[InspectedImage] -> one Arrow RecordBatch of the analyzers' per-image features."""
    columns = list(zip(*(_stats_columns(item) for item in items), strict=True))
    schema = _arrow_schema()
    arrays = [
        pa.array(columns[0], schema.field(_PIXEL_SUM).type),
        pa.array(columns[1], schema.field(_PIXEL_SUMSQ).type),
        pa.array([[n] for n in columns[2]], schema.field(_NUM_PIXELS).type),
        pa.array([[i.height] for i in items], schema.field(_HEIGHT).type),
        pa.array([[i.width] for i in items], schema.field(_WIDTH).type),
        pa.array([[i.label.encode("utf-8")] for i in items], schema.field(LABEL).type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _tensor_adapter_config():
    """What TFT sees: the per-image features as fed, plus `image` in the traced signature only.

    `original_type_specs` is TFXIO's notion of a projected dataset: the transform is traced (and
    exported) with every key, while analysis converts only the fed columns. That gives the served
    transform a dense uint8 image input that no analysis batch ever has to carry.
    """
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.tfxio import tensor_adapter

    shapes = {
        _PIXEL_SUM: [_CHANNELS],
        _PIXEL_SUMSQ: [_CHANNELS],
        _NUM_PIXELS: [],
        _HEIGHT: [],
        _WIDTH: [],
        LABEL: [],
    }
    representations = {}
    for name, shape in shapes.items():
        rep = schema_pb2.TensorRepresentation()
        rep.dense_tensor.column_name = name
        for size in shape:
            rep.dense_tensor.shape.dim.add().size = size
        representations[name] = rep
    schema = _arrow_schema()
    fed = tensor_adapter.TensorAdapter(
        tensor_adapter.TensorAdapterConfig(schema, representations)
    ).TypeSpecs()
    original = dict(fed, **{IMAGE: tf.TensorSpec([None, None, None, _CHANNELS], tf.uint8)})
    return tensor_adapter.TensorAdapterConfig(schema, representations, original_type_specs=original)


class _SortedLabels(beam.PTransform):
    """TFT analyzer: the label names the transform maps to ids, as a 1-D string array.

    From `names` (a PCollection holding one list) when given, else the sorted distinct labels of
    the analysed batches. TFT pickles the preprocessing_fn (and this analyzer with it) to re-trace
    it on workers, where it is never expanded: the PCollection stays behind.
    """

    def __init__(self, names: beam.PCollection | None):
        super().__init__()
        self._names = names
        self._sort = names is None

    def __getstate__(self):
        return {**self.__dict__, "_names": None}

    def expand(self, batches):
        # batches: (label string array [B],) per record batch
        if not self._sort:
            names = self._names
        else:
            names = (
                batches
                | "Labels" >> beam.FlatMap(lambda batch: batch[0].tolist())
                | "Distinct" >> beam.Distinct()
                | "Collect" >> beam.combiners.ToList()
            )
        # [label names] -> np.ndarray of bytes, the analyzer's single output
        return names | "ToArray" >> beam.Map(_names_array, sort=self._sort)


def _names_array(names: Sequence[str | bytes], sort: bool) -> np.ndarray:
    """Label names -> the 1-D bytes array a TFT string analyzer output must be."""
    encoded = [n if isinstance(n, bytes) else n.encode("utf-8") for n in names]
    return np.array(sorted(encoded) if sort else encoded, dtype=object)


def _make_preprocessing_fn(label_names: Sequence[str] | beam.PCollection | None):
    """The TFT preprocessing_fn: analyzers over per-image statistics, a per-image serving path."""
    import tensorflow as tf
    import tensorflow_transform as tft

    if label_names is None or isinstance(label_names, beam.PCollection):
        names_analyzer, static_names = _SortedLabels(label_names), None
    else:
        names_analyzer, static_names = None, [str(n) for n in label_names]

    def preprocessing_fn(inputs: dict) -> dict:
        # --- analyze phase: every reduction is a TFT analyzer over the per-image features ---
        num_pixels = tft.sum(inputs[_NUM_PIXELS])
        sums = tft.sum(inputs[_PIXEL_SUM], reduce_instance_dims=False)
        sumsq = tft.sum(inputs[_PIXEL_SUMSQ], reduce_instance_dims=False)
        num_images = tft.sum(tf.ones_like(inputs[_HEIGHT]))
        num_stats_images = tft.sum(tf.cast(inputs[_NUM_PIXELS] > 0, tf.int64))
        mean, std = mean_std(num_pixels, sums, sumsq)
        safe_std = tf.where(std > 0, std, tf.ones_like(std))
        tft.vocabulary(
            inputs[LABEL],
            vocab_filename=_LABEL_VOCAB,
            store_frequency=True,
            file_format="tfrecord_gzip",
        )
        if names_analyzer is not None:
            (names,) = tft.experimental.ptransform_analyzer(
                [inputs[LABEL]], names_analyzer, [tf.string], [[None]], name="label_names"
            )
        else:
            names = tf.constant(static_names, tf.string, shape=[len(static_names)])

        # --- serving path: what training and serving apply to each batch ---
        image = tf.cast(inputs[IMAGE], tf.float32)
        image = (image - tf.cast(mean, tf.float32)) / tf.cast(safe_std, tf.float32)
        matches = tf.equal(inputs[LABEL][:, None], names[None, :])
        positions = tf.range(tf.size(names, out_type=tf.int64), dtype=tf.int64)[None, :]
        # Max over an empty vocabulary is int64 min: clamp to the unknown id.
        label_id = tf.maximum(
            tf.reduce_max(tf.where(matches, positions, UNKNOWN_LABEL_ID), axis=1),
            UNKNOWN_LABEL_ID,
        )

        # --- statistics outputs: batch-shaped from a per-image feature, never served ---
        per_row = tf.ones_like(inputs[_HEIGHT], tf.float64)[:, None]

        def as_text(value):
            row = tf.reshape(tf.cast(value, tf.float64), [1, -1])
            # %.16e: 17 significant digits round-trip any float64 exactly.
            return tf.strings.as_string(per_row * row, precision=16, scientific=True)

        return {
            IMAGE: tf.RaggedTensor.from_tensor(image, ragged_rank=2),
            LABEL: label_id,
            _STAT_PREFIX + "pixel_mean": as_text(mean),
            _STAT_PREFIX + "pixel_std": as_text(std),
            _STAT_PREFIX + "num_images": as_text(num_images),
            _STAT_PREFIX + "num_stats_images": as_text(num_stats_images),
        }

    return preprocessing_fn


class _PublishFn(beam.DoFn):
    """(once TFT exported to the scratch) -> the statistics dict; publishes the export.

    Reads the statistics from the scratch copy (TensorFlow's file layer, where TFT wrote it),
    copies the export into the dataset through Beam's FileSystems, then removes the scratch.
    An empty split fails here, before anything reaches the dataset.
    """

    def __init__(
        self, output_dir: str, export_dir: str, temp_dir: str, train_split: str, label_names
    ):
        self._output_dir = output_dir
        self._export_dir = export_dir
        self._temp_dir = temp_dir
        self._train_split = train_split
        self._label_names = label_names

    def process(self, unused_done, size_quantiles, label_names=None):
        import tensorflow as tf

        names = self._label_names if label_names is None else label_names
        statistics = read_statistics(self._export_dir, self._train_split, names, size_quantiles)
        publish_export(self._export_dir, self._output_dir)
        if tf.io.gfile.exists(self._temp_dir):
            tf.io.gfile.rmtree(self._temp_dir)
        yield statistics


class AnalyzeDataset(beam.PTransform):
    """InspectedImage (train split) -> one dict, the "statistics" section of dataset_info.json.

    Side effect: writes `output_dir/transform_fn/` and `output_dir/transformed_metadata/` (TFT's
    layout, loadable with `tft.TFTransformOutput(output_dir)`). The transform maps
    {"image": uint8 [B, H, W, 3], "label": string [B]} to {"image": float32 ragged [B, (H), (W), 3]
    normalised with the split's per-channel mean/std, "label": int64 id}.

    Items of other splits are dropped here, so validation and test never feed the statistics.
    Items whose "stats" is None (not sampled by --stats_sample_fraction) still count for labels
    and sizes but not for pixel statistics.

    The dict: {"train_split", "num_images", "num_stats_images", "pixel_mean": [r, g, b],
    "pixel_std": [r, g, b] (0..255 scale), "label_counts": {label: n}, "class_weights":
    {label: n / (k * n_label)}, "unknown_labels": [train labels not in label_names],
    "height_quantiles": {"min", "p1", ..., "p99", "max"}, "width_quantiles": {...},
    "transform": {"transform_fn", "transformed_metadata", "label_names", "inputs", "outputs"}}.

    Args:
        output_dir: dataset directory; the transform is written under it.
        label_names: label id -> name, as in dataset_info.json: a list, a PCollection holding one
            list (computed in the same job), or None for the sorted training labels.
        temp_dir: TFT's scratch space, written through TensorFlow's file layer (default:
            `scratch_root` of the pipeline's options); a unique subdirectory is used and removed
            at the end. The export is made there and then copied into `output_dir` through
            Beam's FileSystems, so `output_dir` may be any store Beam reaches (s3:// too).
        train_split: the split whose items are analysed.
    """

    def __init__(
        self,
        output_dir: str,
        label_names: Sequence[str] | beam.PCollection | None = None,
        temp_dir: str | None = None,
        train_split: str = "train",
    ):
        super().__init__()
        self._output_dir = output_dir
        self._label_names = label_names
        self._temp_dir = temp_dir
        self._train_split = train_split

    def expand(self, images):
        names = self._label_names
        deferred = isinstance(names, beam.PCollection)
        static_names = None if names is None or deferred else [str(n) for n in names]
        temp_root = self._temp_dir or scratch_root(images.pipeline.options)
        temp_dir = os.path.join(temp_root, f"imgrec-tft-{uuid.uuid4().hex}")
        # TFT's export goes here first; _PublishFn copies it into the dataset.
        export_dir = os.path.join(temp_dir, "export")
        split = self._train_split

        train = images | "KeepTrainSplit" >> beam.Filter(lambda item: item.split == split)
        exported, sizes = export_to_scratch(
            train, names if deferred else static_names, temp_dir, export_dir
        )
        side = {"size_quantiles": beam.pvalue.AsSingleton(sizes)}
        if deferred:
            side["label_names"] = beam.pvalue.AsSingleton(names)
        # exported: one None once the scratch holds transform_fn/ and transformed_metadata/
        return exported | "PublishTransformFn" >> beam.ParDo(
            _PublishFn(self._output_dir, export_dir, temp_dir, split, static_names), **side
        )


def export_to_scratch(
    train: beam.PCollection,
    label_names: Sequence[str] | beam.PCollection | None,
    temp_dir: str,
    export_dir: str,
) -> tuple[beam.PCollection, beam.PCollection]:
    """TFT's analysis of `train` (InspectedImage), exported to `export_dir`, nothing published.

    `AnalyzeDataset` and the analysis process beside a local run (pipeline/launch/analysis_process.py)
    share it; building it traces the preprocessing_fn. Returns (one None once the export is
    written, the size-quantiles dict)."""
    import tensorflow_transform.beam as tft_beam

    # Image sides, exact and cheap in plain Beam: no TFT analyzer stages for them.
    sizes = train | "SizeQuantiles" >> beam.CombineGlobally(SizeQuantilesFn())
    batches = (
        train
        | "Batch" >> beam.BatchElements(min_batch_size=_MIN_BATCH, max_batch_size=_MAX_BATCH)
        # [InspectedImage] -> pa.RecordBatch of per-image features
        | "ToRecordBatch" >> beam.Map(_to_record_batch)
    )
    preprocessing_fn = _make_preprocessing_fn(label_names)
    with tft_beam.Context(temp_dir=temp_dir):
        # (saved model dir, deferred metadata) of the transform with analyzer results baked in
        transform_fn = (batches, _tensor_adapter_config()) | "Analyze" >> (
            tft_beam.AnalyzeDataset(preprocessing_fn)
        )
        exported = transform_fn | "WriteTransformFnToScratch" >> (
            tft_beam.WriteTransformFn(export_dir)
        )
    return exported, sizes
