"""Analysed incremental reruns: sampled training images' pixel sums come from the previous
version's per-image records (not decoded again), and the analysis (mean/std, vocabulary, the
exported transform) is what a from-scratch conversion computes."""

from __future__ import annotations

import glob
import hashlib
import os

import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from core import versions
from pipeline.builder import build_pipeline
from pipeline.demo import build_corpus
from pipeline.options import ConvertConfig
from tests.integration.test_incremental import _input, snapshot
from tests.integration.test_splice_records import _add_remove_change
from transforms.splice_records import STATS_FALLBACK, statistics_lines

# Analysis on (the default), a statistics cap below the corpus so that the sample is a hash
# sample whose fraction moves with the number of files listed.
ANALYSED = ["--target_shard_mb", "0.02", "--max_bad_fraction", "0.5", "--stats_max_images", "30"]


def _run(args: list[str], versioned: bool) -> tuple[str, dict[str, int]]:
    """One in-process conversion with analysis -> (dataset folder, imgrec counters)."""
    options = PipelineOptions(
        [*ANALYSED, *args, "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
        + (["--versioned"] if versioned else [])
    )
    config = ConvertConfig.from_options(options)
    if versioned:
        config, _ = versions.plan_run(config)
        config = versions.claim_run(config, {"argv": args})
    result = build_pipeline(config, options, {"test": True}).run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("imgrec"))["counters"]
    found: dict[str, int] = {}
    for c in counters:
        found[c.key.metric.name] = found.get(c.key.metric.name, 0) + c.committed
    return config.output, found


def _analysis(out: str) -> dict:
    """What the exported transform holds: its vocabulary and metadata files byte for byte, and
    what it computes on a fixed batch (TFT's saved_model.pb differs between any two runs)."""
    import tensorflow as tf
    import tensorflow_transform as tft

    found = {}
    for sub in ("transform_fn/assets", "transformed_metadata"):
        for path in sorted(glob.glob(os.path.join(out, sub, "**", "*"), recursive=True)):
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    found[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    layer = tft.TFTransformOutput(out).transform_features_layer()
    image = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(1, 4, 5, 3) * 4
    labels = ["cat", "dog", "bird", "zebra"]
    outputs = layer(
        {"image": tf.constant(np.repeat(image, len(labels), 0)), "label": tf.constant(labels)}
    )
    found["image"] = outputs["image"].to_tensor().numpy().tobytes().hex()
    found["label"] = outputs["label"].numpy().tolist()
    return found


@pytest.fixture
def corpus(tmp_path):
    d = str(tmp_path / "corpus")
    summary = build_corpus(d, num_images=80, seed=11, long_side=(48, 80))
    return d, summary


def test_rerun_statistics_reuse_per_image_sums_and_equal_from_scratch(corpus, tmp_path):
    src, _ = corpus
    root = str(tmp_path / "root")
    _run([*_input(src), "--output", root], versioned=True)

    # +6 files, -3, 2 rewritten: more files listed, so the sample fraction shrinks and every
    # unchanged sampled image already has its pixel sums in the previous version's records.
    added, changed = _add_remove_change(src, tmp_path)
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    fresh, _ = _run([*_input(src), "--output", str(tmp_path / "fresh")], versioned=False)
    assert snapshot(second) == snapshot(fresh)  # dataset_info.json's statistics included
    assert _analysis(second) == _analysis(fresh)
    # Read and decoded: the new and the rewritten files only.
    assert c2["inspected_ok"] == len(added) + len(changed)
    assert c2["stats_reused"] >= 10 and "stats_reinspected" not in c2
    assert statistics_lines(c2) == [
        f"  statistics  {c2['stats_reused']:>7}   unchanged images' pixel sums from the previous "
        "version (not decoded again)"
    ]

    # 30 fewer files: the sample fraction grows, and unchanged images sampled now but not
    # then have no pixel sums on record: read and decoded again, and the summary says why.
    for path in sorted(glob.glob(os.path.join(src, "*", "*.jpg")))[::2][:30]:
        os.remove(path)
    third, c3 = _run([*_input(src), "--output", root], versioned=True)
    fresh2, _ = _run([*_input(src), "--output", str(tmp_path / "fresh2")], versioned=False)
    assert snapshot(third) == snapshot(fresh2)
    assert _analysis(third) == _analysis(fresh2)
    assert c3["stats_reinspected"] >= 1
    assert c3["inspected_ok"] == c3["stats_reinspected"]
    assert statistics_lines(c3)[-1].endswith(f"decoded again for statistics: {STATS_FALLBACK}")
