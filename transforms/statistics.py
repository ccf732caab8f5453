"""The "statistics" section of dataset_info.json: read back from TFT's export, or summed exactly.

`read_statistics` loads the exported transform and asks it for the analyzer results baked into it,
so the JSON and the normalisation applied in training and serving cannot disagree. The analysis
process (pipeline/launch/analysis_process.py) answers the job without that reload when it can prove the
same numbers (`exact_statistics`): every analyzer input is an integer (pixel sums and counts),
so while the totals stay below 2**53 every float64 addition TFT makes is exact, in any order, and
the totals are the integer sums; mean and std then come from those totals through the same
TensorFlow ops as in the transform (`mean_std`). Above 2**53 (at the earliest ~770,000 sampled
450x400 photos of pure white; ~2-3 million typical photos) TFT's totals depend on its summation
order, and the statistics are read back as before.
Measured at one file, where the analysis is the whole command's critical path: the reload took
0.22-0.32 s of it (docs/benchmarks.md).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

import apache_beam as beam

from core.normalize import IMAGE, LABEL

__all__ = [
    "EXPORT_DIRS",
    "UNKNOWN_LABEL_ID",
    "ExactSumsFn",
    "exact_statistics",
    "mean_std",
    "read_statistics",
]

# The two folders of TFT's export (tft.TFTransformOutput.TRANSFORM_FN_DIR and
# TRANSFORMED_METADATA_DIR), in the order they are published.
EXPORT_DIRS = ("transform_fn", "transformed_metadata")
# Label text absent from the label names maps here, like an out-of-vocabulary token.
UNKNOWN_LABEL_ID = -1

# Per-image statistics fed to the analyzers; the serving transform never needs them.
_PIXEL_SUM = "pixel_sum"
_PIXEL_SUMSQ = "pixel_sumsq"
_NUM_PIXELS = "num_pixels"
_HEIGHT = "height"
_WIDTH = "width"
# Outputs that carry the analyzer results back out of the transform (computable only when the
# per-image features are fed, so the serving layer never returns them). Values are decimal strings
# of the float64 results: TFT outputs cannot be float64, and float32 would round the statistics.
_STAT_PREFIX = "statistics/"
_STAT_KEYS = ("num_images", "num_stats_images", "pixel_mean", "pixel_std")
# Vocabulary (with frequencies) of the training labels, stored with the transform's assets.
# TFRecord format, because the text format silently drops empty labels (--label_from none).
_LABEL_VOCAB = "label_counts"
_CHANNELS = 3
# float64 holds every integer up to 2**53 exactly: below it, sums of integers are exact.
_EXACT_LIMIT = 2**53


def mean_std(num_pixels, sums, sumsq):
    """Per-channel (mean, std) from the float64 totals: the transform's own ops (traced in the
    preprocessing_fn) and `exact_statistics`'s (run eagerly), so both round alike."""
    import tensorflow as tf

    # Guard the empty case so tracing and export succeed; the statistics report it.
    safe_pixels = tf.maximum(num_pixels, 1.0)
    mean = sums / safe_pixels
    # Sums of integer pixel values are exact in float64 below 2**53 and round at ~1e-16
    # beyond; E[x^2] - E[x]^2 magnifies that only by E[x^2] / var (about 5 for photos). The
    # clamp absorbs rounding on constant images.
    std = tf.sqrt(tf.maximum(sumsq / safe_pixels - mean * mean, 0.0))
    return mean, std


def read_statistics(
    output_dir: str,
    train_split: str,
    label_names: Sequence[str] | None,
    size_quantiles: dict | None = None,
) -> dict:
    """The "statistics" section of dataset_info.json, read back from an exported transform.

    The numbers are the analyzer results baked into `output_dir/transform_fn/`, so the JSON and the
    normalisation applied in training and serving can never disagree.

    Args:
        output_dir: directory holding `transform_fn/` and `transformed_metadata/`.
        train_split: name of the split the statistics describe.
        label_names: dataset label names (index = label id), or None if unknown here.
        size_quantiles: {"height_quantiles": ..., "width_quantiles": ...} from `SizeQuantilesFn`
            (sizes are no part of the transform), or None to leave them out.

    Returns:
        A JSON-friendly dict; see `transforms.analyze.AnalyzeDataset`.

    Raises:
        ValueError: if no analysed image had pixel statistics.
    """
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(output_dir)
    # Feeding only a per-image feature makes the transform compute only the statistics outputs.
    probe = output.transform_raw_features({_HEIGHT: tf.zeros([1], tf.int64)})
    values = {key: [float(v) for v in probe[_STAT_PREFIX + key].numpy()[0]] for key in _STAT_KEYS}
    counts: dict[str, int] = {}
    for record in output.vocabulary_by_name(_LABEL_VOCAB):
        # "<count> <label>"; the label may itself contain spaces.
        count, _, label = record.decode("utf-8").partition(" ")
        counts[label] = int(count)
    return _statistics(values, counts, train_split, label_names, size_quantiles)


class ExactSumsFn(beam.CombineFn):
    """Analysis items (`stats`, `label`) -> their exact integer totals, or None if any input is
    not a whole number (then only the export can say what TFT computed)."""

    def create_accumulator(self):
        # [images, sampled images, pixels, channel sums, channel sums of squares, labels, exact]
        return [0, 0, 0, [0] * _CHANNELS, [0] * _CHANNELS, collections.Counter(), True]

    def add_input(self, acc, item):
        acc[0] += 1
        acc[5][item.label] += 1
        stats = item.stats
        if stats is None or not acc[6]:
            return acc
        if len(stats) != 2 * _CHANNELS + 1 or not all(_whole(v) for v in stats):
            acc[6] = False
            return acc
        if stats[-1] > 0:
            acc[1] += 1
        acc[2] += int(stats[-1])
        for c in range(_CHANNELS):
            acc[3][c] += int(stats[c])
            acc[4][c] += int(stats[_CHANNELS + c])
        return acc

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for acc in accumulators:
            for i in range(3):
                merged[i] += acc[i]
            for i in (3, 4):
                merged[i] = [a + b for a, b in zip(merged[i], acc[i], strict=True)]
            merged[5].update(acc[5])
            merged[6] = merged[6] and acc[6]
        return merged

    def extract_output(self, acc):
        images, sampled, pixels, sums, sumsq, labels, exact = acc
        if not exact:
            return None
        return {
            "num_images": images,
            "num_stats_images": sampled,
            "num_pixels": pixels,
            "sums": sums,
            "sumsq": sumsq,
            "label_counts": dict(labels),
        }


def _whole(value) -> bool:
    return isinstance(value, int | float) and value >= 0 and float(value).is_integer()


def exact_statistics(
    totals: dict | None,
    train_split: str,
    label_names: Sequence[str] | None,
    size_quantiles: dict | None = None,
    exact: bool = True,
) -> dict | None:
    """`read_statistics`'s dict from `ExactSumsFn`'s totals, without loading the export; None
    when TFT's float64 totals may differ from the integer ones (see the module's docstring), or
    when `exact` is False (IMGREC_EXACT_STATISTICS=0, pipeline/launch/switches.py).

    Raises:
        ValueError: as `read_statistics` does (an empty split, no sampled image).
    """
    if totals is None or not exact:
        return None
    if any(n >= _EXACT_LIMIT for n in _integers(totals)):
        return None
    import tensorflow as tf

    mean, std = mean_std(
        tf.constant(float(totals["num_pixels"]), tf.float64),
        tf.constant([float(v) for v in totals["sums"]], tf.float64),
        tf.constant([float(v) for v in totals["sumsq"]], tf.float64),
    )
    values = {
        "num_images": [float(totals["num_images"])],
        "num_stats_images": [float(totals["num_stats_images"])],
        "pixel_mean": [float(v) for v in mean.numpy()],
        "pixel_std": [float(v) for v in std.numpy()],
    }
    counts = {str(label): int(n) for label, n in totals["label_counts"].items()}
    return _statistics(values, counts, train_split, label_names, size_quantiles)


def _integers(totals: dict) -> Iterable[int]:
    yield from (totals["num_images"], totals["num_pixels"])
    yield from totals["sums"]
    yield from totals["sumsq"]


def _statistics(
    values: dict,
    counts: dict[str, int],
    train_split: str,
    label_names: Sequence[str] | None,
    size_quantiles: dict | None,
) -> dict | None:
    """The statistics dict from the analyzers' values ({key: [floats]}) and the label counts."""
    num_images = int(values["num_images"][0])
    num_stats_images = int(values["num_stats_images"][0])
    if num_images == 0:
        # Nothing to compute from (every file rejected under --max_bad_fraction 1.0, or a split
        # without files): the dataset is written without statistics, as with --no_analyze.
        return None
    if num_stats_images == 0:
        raise ValueError(
            f"none of the {num_images} {train_split!r} images was sampled for pixel statistics: "
            "raise --stats_sample_fraction, or pass --no_analyze"
        )
    present = {label: n for label, n in counts.items() if n > 0}
    # Without names the transform numbers the sorted training labels (analyze._SortedLabels).
    names = list(label_names) if label_names is not None else sorted(counts)
    return {
        "train_split": train_split,
        "num_images": num_images,
        "num_stats_images": num_stats_images,
        "pixel_mean": values["pixel_mean"],
        "pixel_std": values["pixel_std"],
        "label_counts": dict(sorted(counts.items())),
        # Inverse-frequency weights with mean 1 over the present classes: n / (k * n_label).
        "class_weights": {
            label: num_images / (len(present) * n) for label, n in sorted(present.items())
        },
        "unknown_labels": sorted(set(counts) - set(names)),
        **(size_quantiles or {}),
        "transform": {
            "transform_fn": EXPORT_DIRS[0],
            "transformed_metadata": EXPORT_DIRS[1],
            "label_names": names,
            "inputs": {IMAGE: "uint8 [B, H, W, 3]", LABEL: "string [B]"},
            "outputs": {
                IMAGE: "float32 ragged [B, (H), (W), 3]: (image - pixel_mean) / pixel_std",
                LABEL: f"int64 [B]: index in label_names, {UNKNOWN_LABEL_ID} if absent",
            },
        },
    }
