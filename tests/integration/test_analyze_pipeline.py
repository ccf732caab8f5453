"""AnalyzeDataset's TFT pipelines: statistics against NumPy, label counts, split isolation, the
exported transform. Its checks without a pipeline are in tests/unit/test_analyze.py."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import BeamAssertException, assert_that, equal_to

from tests.runs import ROOT as ROOT_PATH
from tests.runs import tf_script
from tests.unit.test_analyze import _totals, image
from transforms import analyze, statistics
from transforms.analyze import AnalyzeDataset

ROOT = str(ROOT_PATH)
LABEL_NAMES = ["bird", "cat", "dog"]
# float64 sums of integer pixels: the TFT result may differ from NumPy only in the last few bits.
RTOL = 1e-9


def channel_stats(pixels: np.ndarray) -> list:
    """What the inspect step emits for a decoded [H, W, 3] uint8 image."""
    flat = pixels.reshape(-1, 3).astype(np.float64)
    return [*flat.sum(axis=0), *np.einsum("ij,ij->j", flat, flat), flat.shape[0]]


def make_corpus(seed: int = 0):
    """Train images of varied sizes and labels; validation/test images far from them.

    Returns:
        (items, train_images_with_stats, train_items)
    """
    rng = np.random.default_rng(seed)
    items, sampled, train = [], [], []
    labels = ["cat"] * 5 + ["dog"] * 3 + ["bird"] * 1 + [""] * 1  # imbalanced, one unnamed
    for i, label in enumerate(labels):
        h, w = int(rng.integers(3, 12)), int(rng.integers(3, 12))
        # Channels with different means so a swapped channel would show.
        pixels = np.clip(rng.normal([60, 128, 200], [20, 40, 30], size=(h, w, 3)), 0, 255)
        pixels = pixels.astype(np.uint8)
        # One image not sampled by --stats_sample_fraction: counts for labels and sizes only.
        stats = None if i == 3 else channel_stats(pixels)
        item = image(f"mem://train/{i}.png", label=label, height=h, width=w, stats=stats)
        items.append(item)
        train.append(item)
        if stats is not None:
            sampled.append(pixels)
    for split, value, label in (("validation", 255, "cat"), ("test", 0, "zebra")):
        for i in range(3):
            pixels = np.full((50, 40, 3), value, np.uint8)
            items.append(
                # Stats present on purpose: they must still not count.
                image(
                    f"mem://{split}/{i}.png",
                    label=label,
                    split=split,
                    height=50,
                    width=40,
                    stats=channel_stats(pixels),
                )
            )
    return items, sampled, train


def _save_one(path: str):
    """A matcher that checks there is exactly one dict and saves it as JSON for the test."""

    def check(actual):
        if len(actual) != 1:
            raise BeamAssertException(f"expected one statistics dict, got {len(actual)}")
        with open(path, "w") as f:
            json.dump(actual[0], f)

    return check


def run_analyze(out: str, label_names, items, options=None, expect_statistics=True) -> dict:
    """Run AnalyzeDataset in a TestPipeline; returns the one statistics dict it produced (None:
    an empty training split)."""
    saved = out + ".statistics.json"  # matchers are pickled: hand the result over through a file
    with TestPipeline(options=options) as p:
        names = label_names(p) if callable(label_names) else label_names
        stats = (
            p
            | "Images" >> beam.Create(items)
            | AnalyzeDataset(out, names, temp_dir=os.path.join(os.path.dirname(out), "tmp"))
        )
        assert_that(
            stats | "Keys" >> beam.Map(lambda s: sorted(s) if s is not None else s),
            equal_to(
                [
                    sorted(
                        [
                            "train_split",
                            "num_images",
                            "num_stats_images",
                            "pixel_mean",
                            "pixel_std",
                            "label_counts",
                            "class_weights",
                            "unknown_labels",
                            "height_quantiles",
                            "width_quantiles",
                            "transform",
                        ]
                    )
                ]
                if expect_statistics
                else [None]
            ),
            label="HasEveryKey",
        )
        assert_that(stats, _save_one(saved), label="SaveStatistics")
    with open(saved) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    items, sampled, train = make_corpus()
    out = str(tmp_path_factory.mktemp("analyzed") / "ds")
    stats = run_analyze(out, LABEL_NAMES, items)
    return out, stats, sampled, train


def test_pixel_statistics_equal_numpy_over_train_images(analyzed):
    _, stats, sampled, _ = analyzed
    pixels = np.concatenate([im.reshape(-1, 3) for im in sampled]).astype(np.float64)
    np.testing.assert_allclose(stats["pixel_mean"], pixels.mean(axis=0), rtol=RTOL)
    np.testing.assert_allclose(stats["pixel_std"], pixels.std(axis=0), rtol=RTOL)
    assert stats["num_stats_images"] == len(sampled)


def test_label_counts_and_class_weights_follow_train_items(analyzed):
    _, stats, _, train = analyzed
    expected = {"": 1, "bird": 1, "cat": 5, "dog": 3}
    assert stats["label_counts"] == expected  # "zebra" (test) and validation cats are absent
    assert stats["num_images"] == len(train) == 10
    assert stats["class_weights"] == pytest.approx(
        {label: 10 / (4 * n) for label, n in expected.items()}
    )
    assert stats["unknown_labels"] == [""]
    assert stats["train_split"] == "train"
    assert stats["transform"]["label_names"] == LABEL_NAMES


def test_size_quantiles_span_train_sizes(analyzed):
    _, stats, _, train = analyzed
    for key in ("height", "width"):
        sizes = sorted(getattr(item, key) for item in train)
        q = stats[f"{key}_quantiles"]
        assert list(q) == ["min"] + [f"p{p}" for p in analyze.QUANTILES] + ["max"]
        assert (q["min"], q["max"]) == (sizes[0], sizes[-1])  # 50x40 val/test images excluded
        assert list(q.values()) == sorted(q.values())
        assert set(q.values()) <= set(sizes)
        # Ten values: the median boundary sits between the 5th and 6th smallest.
        assert sizes[4] <= q["p50"] <= sizes[5]
        # Exact nearest-rank percentiles (NumPy's inverted_cdf), not a sketch's estimate.
        for p in analyze.QUANTILES:
            assert q[f"p{p}"] == int(np.percentile(sizes, p, method="inverted_cdf")), (key, p)


def test_export_layout_is_tft_standard_and_scratch_is_removed(analyzed):
    out, _, _, _ = analyzed
    assert sorted(os.listdir(out)) == ["transform_fn", "transformed_metadata"]  # nothing else
    scratch = os.path.join(os.path.dirname(out), "tmp")
    assert not os.path.exists(scratch) or os.listdir(scratch) == []


# Runs in a fresh interpreter: only the exported files connect it to the pipeline above.
_FRESH_PROCESS_CHECK = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_transform as tft
    from transforms.analyze import normalize_layer

    out, images_npz, serving_dir = sys.argv[1:4]
    images = list(np.load(images_npz).values())
    result = {}

    # 1. TFT's own layer on a dense uint8 batch and label text.
    layer = tft.TFTransformOutput(out).transform_features_layer()
    batch = tf.constant(np.stack([im[:3, :3] for im in images]))
    labels = tf.constant(["dog", "bird", "cat", "zebra", ""] + ["cat"] * (len(images) - 5))
    outputs = layer({"image": batch, "label": labels})
    result["layer_keys"] = sorted(outputs)
    result["label_ids"] = outputs["label"].numpy().tolist()

    # 2. normalize_layer inside tf.data, as the reader applies it, over the whole split.
    norm = normalize_layer(out)
    pixels = []
    for im in images:
        ds = tf.data.Dataset.from_tensors(im[None]).map(norm)
        (x,) = list(ds)
        assert x.dtype == tf.float32 and x.shape == (1,) + im.shape, (x.dtype, x.shape)
        pixels.append(x.numpy().reshape(-1, 3))
    pixels = np.concatenate(pixels).astype(np.float64)
    result["mean"] = pixels.mean(axis=0).tolist()
    result["std"] = pixels.std(axis=0).tolist()

    # 3. The README's serving pattern: the layer in front of a model, saved and reloaded.
    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            self.tft_layer = norm.tft_layer  # tracked, so the transform's assets are saved

        @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8)])
        def serve(self, images):
            return {"channel_mean": tf.reduce_mean(norm(images), axis=[1, 2])}

    module = Serving()
    tf.saved_model.save(module, serving_dir, signatures={"serving_default": module.serve})
    served = tf.saved_model.load(serving_dir).signatures["serving_default"]
    got = served(images=batch)["channel_mean"].numpy()
    want = tf.reduce_mean(norm(batch), axis=[1, 2]).numpy()
    result["serving_max_abs_diff"] = float(np.abs(got - want).max())
    # Float images on the 0..255 scale (a resize's output) normalise like their uint8 values.
    as_float = norm(tf.cast(batch, tf.float32) + 0.2).numpy()
    result["float_input_max_abs_diff"] = float(np.abs(as_float - norm(batch).numpy()).max())
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.e2e  # a fresh TensorFlow process (MirroredStrategy or TF's own filesystem)
def test_export_loads_in_fresh_process_and_normalises_the_split(analyzed, tmp_path):
    out, _, sampled, _ = analyzed
    images_npz = str(tmp_path / "images.npz")
    np.savez(images_npz, *sampled)
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        tf_script(_FRESH_PROCESS_CHECK, out, images_npz, str(tmp_path / "serving")),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT ") :])
    assert result["layer_keys"] == ["image", "label"]  # statistics outputs are never served
    assert result["label_ids"][:5] == [2, 0, 1, -1, -1]
    np.testing.assert_allclose(result["mean"], [0, 0, 0], atol=1e-5)
    np.testing.assert_allclose(result["std"], [1, 1, 1], rtol=1e-5)
    assert result["serving_max_abs_diff"] < 1e-6
    assert result["float_input_max_abs_diff"] == 0.0


def test_deferred_label_names_on_multithreaded_runner(tmp_path):
    """Label names computed in the same job (a PCollection) fix the ids; DirectRunner threads."""
    items, _, _ = make_corpus(seed=1)
    out = str(tmp_path / "ds")
    options = {"direct_running_mode": "multi_threading", "direct_num_workers": 2}
    from apache_beam.options.pipeline_options import PipelineOptions

    stats = run_analyze(
        out,
        lambda p: p | "Names" >> beam.Create([["dog", "cat", "", "bird"]]),
        items,
        options=PipelineOptions.from_dictionary(options),
    )
    assert stats["transform"]["label_names"] == ["dog", "cat", "", "bird"]
    assert stats["unknown_labels"] == []
    layer = _load_layer(out)
    import tensorflow as tf

    ids = layer({"label": tf.constant(["bird", "dog", "", "cat", "zebra"])})["label"]
    assert ids.numpy().tolist() == [3, 0, 2, 1, -1]


def test_without_label_names_ids_are_sorted_train_labels(tmp_path):
    items, _, _ = make_corpus(seed=2)
    out = str(tmp_path / "ds")
    stats = run_analyze(out, None, items)
    assert stats["transform"]["label_names"] == ["", "bird", "cat", "dog"]
    import tensorflow as tf

    ids = _load_layer(out)({"label": tf.constant(["dog", "", "zebra"])})["label"]
    assert ids.numpy().tolist() == [3, 0, -1]


def test_empty_train_split_has_no_statistics(tmp_path):
    # describe fails the job naming the fix when other splits have records (test_analysis_process).
    items = [item for item in make_corpus()[0] if item.split != "train"]
    assert run_analyze(str(tmp_path / "ds"), LABEL_NAMES, items, expect_statistics=False) is None


def _load_layer(out: str):
    import tensorflow_transform as tft

    return tft.TFTransformOutput(out).transform_features_layer()


def _sizes(stats: dict) -> dict:
    return {key: stats[key] for key in ("height_quantiles", "width_quantiles")}


def test_exact_statistics_equal_what_the_export_says(analyzed):
    """The analysis process answers without reloading the export: the same dict, to the bit."""
    out, stats, _, train = analyzed
    exact = statistics.exact_statistics(_totals(train), "train", LABEL_NAMES, _sizes(stats))
    assert exact == statistics.read_statistics(out, "train", LABEL_NAMES, _sizes(stats)) == stats


def test_exact_statistics_equal_the_export_on_large_sums_and_odd_labels(tmp_path):
    """Sums up to ~2**50 whose quotients do not terminate, a constant channel (E[x^2] - E[x]^2
    exactly 0, std 0), and labels TFT's vocabulary must keep as they are (empty, spaces, a newline, non-ASCII, and `caf%E9`, the label a Latin-1 folder gets)."""
    rng = np.random.default_rng(7)
    labels = ["", "a b", "x\ny", "été", "caf%E9", "cat"]
    items = []
    for i in range(60):
        pixels = int(rng.integers(1, 2**31))
        sums = [int(rng.integers(0, 255 * pixels)) for _ in range(2)] + [17 * pixels]
        sumsq = [int(s * s // pixels + rng.integers(0, 2**18)) for s in sums[:2]] + [289 * pixels]
        stats = None if i % 7 == 0 else [*map(float, sums), *map(float, sumsq), pixels]
        items.append(
            image(
                f"mem://train/{i}.png",
                label=labels[i % len(labels)],
                height=3 + i % 5,
                width=4 + i % 3,
                stats=stats,
            )
        )
    stats = run_analyze(str(tmp_path / "ds"), None, items)
    totals = _totals(items)
    assert max(totals["sumsq"]) > 2**45  # large enough that a division rounds
    assert stats["pixel_std"][2] == 0.0
    exact = statistics.exact_statistics(totals, "train", None, _sizes(stats))
    assert exact == statistics.read_statistics(str(tmp_path / "ds"), "train", None, _sizes(stats))
    assert exact == stats
