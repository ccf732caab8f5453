"""The report's SVG charts: well-formed, escaped, and every mark's size is its value to scale."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import pytest

from pipeline.report import charts

_NS = "{http://www.w3.org/2000/svg}"


def _marks(svg: str) -> list[ET.Element]:
    root = ET.fromstring(svg)  # raises on anything that is not well-formed XML
    assert root.tag == f"{_NS}svg"
    return [el for el in root.iter() if el.get("class") == "mark"]


@pytest.mark.parametrize("high", [0, 0.004, 0.7, 1, 3, 7, 10, 48, 99, 100, 101, 233, 1e6, 3.3e7])
@pytest.mark.parametrize("integer", [False, True])
def test_nice_ticks_cover_the_data_in_round_steps(high, integer):
    ticks = charts.nice_ticks(high, integer=integer)
    assert ticks[0] == 0 and ticks[-1] >= high
    step = ticks[1] - ticks[0]
    assert all(math.isclose(b - a, step) for a, b in itertools.pairwise(ticks))
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(math.isclose(mantissa, m) for m in (1, 2, 2.5, 5)), step
    assert 2 <= len(ticks) <= 11, ticks
    # No more than one step of empty axis above the data.
    assert ticks[-1] - step < max(high, 1e-12) or high <= 0
    if integer:
        assert step >= 1 and step == int(step)


def test_nice_ticks_of_no_data_is_a_unit_axis():
    assert charts.nice_ticks(0) == charts.nice_ticks(float("nan")) == charts.nice_ticks(-5)
    assert charts.nice_ticks(0)[-1] >= 1


def test_grouped_bars_are_proportional_and_labelled():
    series = {"train": [44, 47, 0], "validation": [9, 4, 10]}
    svg = charts.grouped_bars(["astronaut", "cat", "rocket"], series, "examples", "t")
    marks = _marks(svg)
    assert len(marks) == 6
    got = {(m.get("data-category"), m.get("data-series")): m for m in marks}
    per_unit = float(got[("cat", "train")].get("width")) / 47
    for (category, split), m in got.items():
        value = series[split][["astronaut", "cat", "rocket"].index(category)]
        assert m.get("data-value") == str(value)
        assert math.isclose(float(m.get("width")), value * per_unit, abs_tol=0.01)
        assert m.find(f"{_NS}title").text == f"{category} · {split}: {value}"
    # Bars of one group are side by side, groups in the categories' order, top to bottom.
    ys = [float(got[(c, s)].get("y")) for c in ("astronaut", "cat", "rocket") for s in series]
    assert ys == sorted(ys) and len(set(ys)) == 6
    # The longest bar ends inside the frame: the axis reaches past the largest value.
    (frame,) = [r for r in ET.fromstring(svg).iter(f"{_NS}rect") if r.get("fill") == "none"]
    right = float(frame.get("x")) + float(frame.get("width"))
    assert float(got[("cat", "train")].get("x")) + 47 * per_unit <= right


def test_text_is_escaped_and_long_names_are_shortened():
    name = '<b>&"x' + "y" * 80
    svg = charts.grouped_bars([name], {"tr<ain": [3]}, "a & b", "<t>")
    root = ET.fromstring(svg)
    assert root.get("aria-label") == "<t>" and root.find(f"{_NS}title").text == "<t>"
    texts = [t.text for t in root.iter(f"{_NS}text")]
    assert "tr<ain" in texts and "a & b" in texts
    (label,) = [t for t in texts if t and t.startswith('<b>&"x')]
    assert label.endswith("…") and len(label) < len(name)
    assert _marks(svg)[0].get("data-category") == name  # the full name stays on the mark


def test_vertical_bars_heights_match_values():
    values = [6.6, 1.05, 0.0, 1.0]
    svg = charts.vertical_bars(["train 0", "train 1", "test 0", "validation 0"], values, "MB",
                               "shard sizes")  # fmt: skip
    marks = _marks(svg)
    assert [float(m.get("data-value")) for m in marks] == values
    per_unit = float(marks[0].get("height")) / 6.6
    bottoms = {round(float(m.get("y")) + float(m.get("height")), 2) for m in marks}
    assert len(bottoms) == 1  # every bar stands on the axis
    for m, v in zip(marks, values, strict=True):
        assert math.isclose(float(m.get("height")), v * per_unit, abs_tol=0.01)
    texts = [t.text for t in ET.fromstring(svg).iter(f"{_NS}text")]
    assert "validation 0" in texts
    hidden = charts.vertical_bars(["a", "b"], [1, 2], "MB", "t", show_labels=False)
    assert "a" not in [t.text for t in ET.fromstring(hidden).iter(f"{_NS}text")]


def test_scatter_keeps_every_point_once_per_pixel():
    xs = [100, 100, 101, 400, 0]
    ys = [200, 200, 200, 300, 0]
    marks = _marks(charts.scatter(xs, ys, "w", "h", "sizes"))
    assert sum(int(m.get("data-count")) for m in marks) == len(xs)
    by_value = {m.get("data-value"): m for m in marks}
    assert by_value["100,200"].get("data-count") == "2"
    assert "(and 1 more)" in by_value["100,200"].find(f"{_NS}title").text
    # Larger values sit further right and higher (smaller y).
    a, b = by_value["100,200"], by_value["400,300"]
    assert float(b.get("cx")) > float(a.get("cx")) and float(b.get("cy")) < float(a.get("cy"))


def test_histogram_counts_every_value_in_its_bin():
    values = [0.5, 0.75, 1.0, 1.0, 1.25, 1.5, 2.0]
    marks = _marks(charts.histogram(values, 6, "aspect", "images", "aspects"))
    counts = [int(m.get("data-value")) for m in marks]
    assert len(counts) == 6 and sum(counts) == len(values)
    # Bins of 0.25 from 0.5: [0.5,0.75) [0.75,1) [1,1.25) [1.25,1.5) [1.5,1.75) [1.75,2], the
    # maximum in the last.
    assert counts == [1, 1, 2, 1, 1, 1]
    same = _marks(charts.histogram([1.0, 1.0], 30, "a", "n", "t"))
    assert sum(int(m.get("data-value")) for m in same) == 2
    assert (
        sum(int(m.get("data-value")) for m in _marks(charts.histogram([], 5, "a", "n", "t"))) == 0
    )
