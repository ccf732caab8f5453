"""The report's charts as inline SVG: grouped bars, vertical bars, a scatter and a histogram.

Written here instead of with matplotlib because a report draws four small charts, and importing
matplotlib and rendering them cost most of a second of every default conversion, while these
strings take milliseconds, stay sharp at any zoom and need no JavaScript. Each mark carries its
value (`data-value`, and a `<title>` a browser shows on hover), which is also what the tests read
back.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

__all__ = [
    "PALETTE",
    "grouped_bars",
    "histogram",
    "nice_ticks",
    "scatter",
    "vertical_bars",
]

# matplotlib's "tab10", the palette the report's PNG plots used: distinct in print and for the
# common colour-vision deficiencies.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
FONT_PX = 12
# Ticks an axis aims for; nice_ticks picks a 1-2-2.5-5 step near span / _TICKS.
_TICKS = 5
_AXIS = "#444"
_GRID = "#e4e4e4"


def nice_ticks(high: float, integer: bool = False) -> list[float]:
    """Tick values from 0 to at least `high`, a 1/2/2.5/5 x 10^k step apart, ~_TICKS of them.

    Args:
        high: the largest value the axis must show (values <= 0 give the ticks of 1).
        integer: the data are counts: steps below 1 are not used.

    Returns:
        Ascending tick values, the first 0 and the last >= high.
    """
    high = high if high > 0 and math.isfinite(high) else 1.0
    raw = high / _TICKS
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    if integer:
        step = max(1.0, round(step)) if step < 10 else step
    count = math.ceil(high / step - 1e-9)
    return [i * step for i in range(count + 1)]


def _fmt(value: float) -> str:
    """A tick label: integers without a decimal point, else up to three significant decimals."""
    if abs(value - round(value)) < 1e-9:
        return f"{round(value):d}"
    return f"{value:.3g}"


def _text_px(text: str) -> float:
    """The width of `text` in pixels, for margins: an average glyph of the sans-serif UI fonts is
    ~0.6 em wide."""
    return len(text) * 0.6 * FONT_PX


def _attrs(attrs: dict) -> str:
    """Keyword arguments as escaped SVG attributes (`font_weight` -> `font-weight`)."""
    return "".join(f' {k.replace("_", "-")}="{html.escape(str(v))}"' for k, v in attrs.items())


class _Svg:
    """An SVG document of a fixed size, built up from escaped elements."""

    def __init__(self, width: int, height: int, label: str):
        self.width, self.height = width, height
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{html.escape(label)}" font-family="system-ui,sans-serif" '
            f'font-size="{FONT_PX}"><title>{html.escape(label)}</title>'
            f'<rect width="{width}" height="{height}" fill="#fff"/>'
        ]

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(self, x: float, y: float, text: str, anchor: str = "middle", **attrs) -> None:
        extra = _attrs(attrs)
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>'
            f"{html.escape(text)}</text>"
        )

    def mark(self, kind: str, value: str, tip: str, **attrs) -> None:
        """A data mark (`rect` or `circle`) with its value and a hover title."""
        attr = _attrs(attrs)
        self.add(
            f'<{kind} class="mark" data-value="{html.escape(value)}"{attr}>'
            f"<title>{html.escape(tip)}</title></{kind}>"
        )

    def done(self) -> str:
        return "".join(self.parts) + "</svg>"


class _Frame:
    """A plot area inside an _Svg and the linear maps from data to pixels."""

    def __init__(self, svg: _Svg, left: float, top: float, right: float, bottom: float):
        self.svg = svg
        self.x0, self.y0 = left, top
        self.x1, self.y1 = svg.width - right, svg.height - bottom

    def x_axis(self, ticks: Sequence[float], label: str, low: float = 0.0,
               high: float | None = None, grid: bool = True) -> None:  # fmt: skip
        """Ticks, labels and an optional vertical grid along the bottom, which spans `low` (the
        left edge) to `high` (the right edge, default the last tick)."""
        svg = self.svg
        high = (ticks[-1] or 1) if high is None else high
        for t in ticks:
            x = self.x0 + (self.x1 - self.x0) * (t - low) / (high - low)
            if grid:
                svg.add(f'<line x1="{x:.1f}" y1="{self.y0}" x2="{x:.1f}" y2="{self.y1}" '
                        f'stroke="{_GRID}"/>')  # fmt: skip
            svg.add(f'<line x1="{x:.1f}" y1="{self.y1}" x2="{x:.1f}" y2="{self.y1 + 4}" '
                    f'stroke="{_AXIS}"/>')  # fmt: skip
            svg.text(x, self.y1 + 4 + FONT_PX, _fmt(t))
        svg.text((self.x0 + self.x1) / 2, svg.height - 6, label)

    def y_axis(self, ticks: Sequence[float], label: str) -> None:
        """Ticks, labels and a horizontal grid along the left, 0 at the bottom."""
        svg, top = self.svg, ticks[-1] or 1
        for t in ticks:
            y = self.y1 - (self.y1 - self.y0) * t / top
            svg.add(f'<line x1="{self.x0}" y1="{y:.1f}" x2="{self.x1}" y2="{y:.1f}" '
                    f'stroke="{_GRID}"/>')  # fmt: skip
            svg.add(f'<line x1="{self.x0 - 4}" y1="{y:.1f}" x2="{self.x0}" y2="{y:.1f}" '
                    f'stroke="{_AXIS}"/>')  # fmt: skip
            svg.text(self.x0 - 7, y + FONT_PX * 0.35, _fmt(t), anchor="end")
        middle = (self.y0 + self.y1) / 2
        svg.text(14, middle, label, transform=f"rotate(-90 14 {middle:.1f})")

    def box(self) -> None:
        self.svg.add(
            f'<rect x="{self.x0}" y="{self.y0}" width="{self.x1 - self.x0}" '
            f'height="{self.y1 - self.y0}" fill="none" stroke="{_AXIS}"/>'
        )

    def title(self, text: str) -> None:
        self.svg.text((self.x0 + self.x1) / 2, self.y0 - 8, text, font_weight="600")


def _legend(svg: _Svg, names: Sequence[str], x: float, y: float) -> None:
    """One row of colour swatches and names starting at (x, y)."""
    for i, name in enumerate(names):
        svg.add(f'<rect x="{x:.1f}" y="{y - 9:.1f}" width="10" height="10" '
                f'fill="{PALETTE[i % len(PALETTE)]}"/>')  # fmt: skip
        svg.text(x + 14, y, name, anchor="start")
        x += 14 + _text_px(name) + 16


def grouped_bars(categories: Sequence[str], series: dict[str, Sequence[int]], xlabel: str,
                 title: str) -> str:  # fmt: skip
    """Horizontal bars, one group per category and one colour per series (e.g. class x split).

    Args:
        categories: the group labels, drawn top to bottom.
        series: name -> one value per category, in the categories' order.
        xlabel: what the values count.
        title: the chart's accessible name (the page's heading says it already).

    Returns:
        An `<svg>` element.
    """
    names = list(series)
    row = max(14.0, 8.0 * len(names) + 8)  # a group's height: 8 px per bar plus a gap
    longest = max((_text_px(c) for c in categories), default=0)
    left = min(220.0, longest + 16)
    top = 30  # the legend's row
    svg = _Svg(640, int(top + row * len(categories) + 42), title)
    frame = _Frame(svg, left, top, 16, 42)
    high = max((v for vals in series.values() for v in vals), default=0)
    ticks = nice_ticks(high, integer=True)
    frame.x_axis(ticks, xlabel)
    scale = (frame.x1 - frame.x0) / (ticks[-1] or 1)
    bar = (row - 8) / max(1, len(names))
    for ci, category in enumerate(categories):
        y = frame.y0 + ci * row + 4
        label = (
            category
            if _text_px(category) <= left - 12
            else category[: int((left - 12) / _text_px("x")) - 1] + "…"
        )
        svg.text(frame.x0 - 7, y + (row - 8) / 2 + FONT_PX * 0.35, label, anchor="end")
        for si, name in enumerate(names):
            value = series[name][ci]
            svg.mark(
                "rect", str(value), f"{category} · {name}: {value}",
                x=f"{frame.x0:.1f}", y=f"{y + si * bar:.1f}", width=f"{value * scale:.2f}",
                height=f"{bar:.2f}", fill=PALETTE[si % len(PALETTE)], data_series=name,
                data_category=category,
            )  # fmt: skip
    frame.box()
    _legend(svg, names, frame.x0, 18)
    return svg.done()


def vertical_bars(labels: Sequence[str], values: Sequence[float], ylabel: str, title: str,
                  show_labels: bool = True) -> str:  # fmt: skip
    """One bar per label (e.g. shard sizes), labels slanted under the axis when `show_labels`.

    Returns:
        An `<svg>` element.
    """
    longest = max((_text_px(lbl) for lbl in labels), default=0) if show_labels else 0
    bottom = 34 + (longest * 0.71 if show_labels else 0)  # sin 45° of the slanted labels
    svg = _Svg(640, int(200 + bottom), title)
    ticks = nice_ticks(max(values, default=0))
    frame = _Frame(svg, 56, 28, 16, bottom)
    frame.y_axis(ticks, ylabel)
    frame.title(title)
    slot = (frame.x1 - frame.x0) / max(1, len(values))
    scale = (frame.y1 - frame.y0) / (ticks[-1] or 1)
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        x = frame.x0 + i * slot + slot * 0.1
        svg.mark(
            "rect", f"{value:g}", f"{label}: {value:.3g}", x=f"{x:.2f}",
            y=f"{frame.y1 - value * scale:.2f}", width=f"{slot * 0.8:.2f}",
            height=f"{value * scale:.2f}", fill=PALETTE[0],
        )  # fmt: skip
        if show_labels:
            cx, cy = x + slot * 0.4, frame.y1 + 12
            svg.text(cx, cy, label, anchor="end", transform=f"rotate(-45 {cx:.1f} {cy:.1f})")
    frame.box()
    return svg.done()


def scatter(xs: Sequence[float], ys: Sequence[float], xlabel: str, ylabel: str,
            title: str) -> str:  # fmt: skip
    """A dot per (x, y) pair, both axes from 0; pairs that land on the same pixel share a dot
    (a second dot there adds nothing visible, and a sample of thousands stays a small page).

    Returns:
        An `<svg>` element.
    """
    svg = _Svg(460, 340, title)
    frame = _Frame(svg, 60, 28, 16, 42)
    # 4 % headroom: the largest dots sit inside the frame, not on it.
    xt = nice_ticks(max(xs, default=0) * 1.04, integer=True)
    yt = nice_ticks(max(ys, default=0) * 1.04, integer=True)
    frame.x_axis(xt, xlabel)
    frame.y_axis(yt, ylabel)
    frame.title(title)
    sx, sy = (frame.x1 - frame.x0) / (xt[-1] or 1), (frame.y1 - frame.y0) / (yt[-1] or 1)
    dots: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for x, y in zip(xs, ys, strict=True):
        dots.setdefault((round(frame.x0 + x * sx), round(frame.y1 - y * sy)), []).append((x, y))
    for (px, py), pairs in sorted(dots.items()):
        x, y = pairs[0]
        more = f" (and {len(pairs) - 1} more)" if len(pairs) > 1 else ""
        svg.mark(
            "circle", f"{_fmt(x)},{_fmt(y)}", f"{_fmt(x)} × {_fmt(y)}{more}", cx=px, cy=py,
            r=2.5, fill=PALETTE[0], fill_opacity=0.55, data_count=len(pairs),
        )  # fmt: skip
    frame.box()
    return svg.done()


def histogram(values: Sequence[float], bins: int, xlabel: str, ylabel: str, title: str) -> str:
    """Counts of `values` in `bins` equal bins from their minimum to their maximum.

    Returns:
        An `<svg>` element.
    """
    svg = _Svg(460, 340, title)
    frame = _Frame(svg, 60, 28, 16, 42)
    frame.title(title)
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    width = (high - low) / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / width))] += 1
    yt = nice_ticks(max(counts), integer=True)
    frame.y_axis(yt, ylabel)
    sx, sy = (frame.x1 - frame.x0) / bins, (frame.y1 - frame.y0) / (yt[-1] or 1)
    for i, n in enumerate(counts):
        a, b = low + i * width, low + (i + 1) * width
        svg.mark(
            "rect", str(n), f"{a:.3g}–{b:.3g}: {n}", x=f"{frame.x0 + i * sx:.2f}",
            y=f"{frame.y1 - n * sy:.2f}", width=f"{sx:.2f}", height=f"{n * sy:.2f}",
            fill=PALETTE[0], stroke="#fff", stroke_width=0.5,
        )  # fmt: skip
    # The x axis shows the data's own range: ticks at nice values inside [low, high].
    step = nice_ticks(high - low)[1]
    first = math.ceil(low / step - 1e-9)
    ticks = [round(i * step, 10) for i in range(first, math.floor(high / step + 1e-9) + 1)]
    frame.x_axis(ticks, xlabel, low=low, high=high, grid=False)
    frame.box()
    return svg.done()
