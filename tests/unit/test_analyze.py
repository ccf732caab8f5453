"""AnalyzeDataset's parts without a pipeline: size quantiles, malformed stats, exact statistics.
Its TFT pipelines are in tests/integration/test_analyze_pipeline.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.unit.test_transforms import _record
from transforms import analyze, statistics
from transforms.elements import InspectedImage


def image(path: str = "mem://train/0.png", **fields) -> InspectedImage:
    """A training image as the analysis reads it (InspectedImage), with overrides."""
    return _record(path, path.removeprefix("mem://"), **fields)


@pytest.mark.parametrize("seed", range(5))
def test_size_quantiles_are_exact_nearest_rank(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    heights = rng.integers(1, 60, n).tolist()
    widths = rng.integers(1000, 1010, n).tolist()
    fn = analyze.SizeQuantilesFn()
    # Two accumulators merged, as a runner combines bundles.
    accs = [fn.create_accumulator(), fn.create_accumulator()]
    for i, (h, w) in enumerate(zip(heights, widths, strict=True)):
        accs[i % 2] = fn.add_input(accs[i % 2], image(height=h, width=w))
    out = fn.extract_output(fn.merge_accumulators(accs))
    for key, sizes in (("height_quantiles", heights), ("width_quantiles", widths)):
        q = out[key]
        assert (q["min"], q["max"]) == (min(sizes), max(sizes))
        for p in analyze.QUANTILES:
            assert q[f"p{p}"] == int(np.percentile(sizes, p, method="inverted_cdf")), (key, p)


def test_malformed_stats_name_the_file():
    with pytest.raises(ValueError, match=r"mem://x\.png.*expected \[sum_r"):
        analyze._stats_columns(image("mem://x.png", stats=[1.0, 2.0]))


# ---------------------------------------------------------------- statistics without the reload
def _totals(items: list[InspectedImage], parts: int = 3) -> dict | None:
    """ExactSumsFn over the train items, in `parts` accumulators merged as a runner would."""
    fn = statistics.ExactSumsFn()
    accumulators = []
    for i in range(parts):
        acc = fn.create_accumulator()
        for item in items[i::parts]:
            acc = fn.add_input(acc, item)
        accumulators.append(acc)
    return fn.extract_output(fn.merge_accumulators(accumulators))


def test_exact_statistics_defer_to_the_export_when_float64_may_round():
    """Totals at 2**53 or more, a fractional or negative input, or IMGREC_EXACT_STATISTICS=0:
    no answer here (the export is read back); an empty split fails with read_statistics's words."""
    item = image(label="cat", stats=[1.0, 2.0, 3.0, 1.0, 4.0, 9.0, 1])
    assert statistics.exact_statistics(_totals([item]), "train", None) is not None
    big = dataclasses.replace(item, stats=[1.0, 2.0, 3.0, 1.0, 4.0, float(2**53), 1])
    assert statistics.exact_statistics(_totals([big]), "train", None) is None
    for bad in ([1.5, 2.0, 3.0, 1.0, 4.0, 9.0, 1], [-1.0, 2.0, 3.0, 1.0, 4.0, 9.0, 1]):
        assert _totals([item, dataclasses.replace(item, stats=bad)]) is None
    assert statistics.exact_statistics(None, "train", None) is None
    assert statistics.exact_statistics(_totals([item]), "train", None, exact=False) is None
    # An empty split has no statistics (describe fails the job if other splits have records).
    assert statistics.exact_statistics(_totals([]), "train", None) is None
    unsampled = dataclasses.replace(item, stats=None)
    with pytest.raises(ValueError, match=r"none of the 1 'train' images was sampled"):
        statistics.exact_statistics(_totals([unsampled]), "train", None)
