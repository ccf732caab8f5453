"""The report's plots as imgrec drew them before pipeline/report/charts.py: matplotlib PNGs.

Kept only as the baseline of `bench/ablations/startup.py --fix report`; needs matplotlib, which imgrec no
longer installs (`pip install matplotlib`). `install()` puts these in place of the SVG charts.
"""

from __future__ import annotations

import collections
import io

from core import schema
from pipeline.report import page as report


def _figure(width: float = 6.4, height: float = 3.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    return plt, fig, ax


def _png(plt, fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return report._img(report._data_uri(buf.getvalue(), "image/png"), alt)


def _plot_classes(counts: dict[str, collections.Counter], names: list[str]) -> str:
    import numpy as np

    plt, fig, ax = _figure(height=max(2.4, 0.35 * len(names) + 1))
    y = np.arange(len(names))
    height = 0.8 / max(1, len(counts))
    for i, (split, c) in enumerate(counts.items()):
        ax.barh(y + i * height, [c[n] for n in names], height, label=split)
    ax.set_yticks(y + height * (len(counts) - 1) / 2, names)
    ax.invert_yaxis()
    ax.set_xlabel("examples")
    ax.legend(loc="lower right", fontsize=8)
    return _png(plt, fig, "classes per split")


def _plot_sizes(rows: list[dict]) -> tuple[str, str]:
    widths = [r.get(schema.WIDTH) or 0 for r in rows]
    heights = [r.get(schema.HEIGHT) or 0 for r in rows]
    plt, fig, ax = _figure(4.6, 3.4)
    ax.scatter(widths, heights, s=6, alpha=0.5)
    ax.set_xlabel("width (px)")
    ax.set_ylabel("height (px)")
    ax.set_title("image sizes")
    sizes = _png(plt, fig, "image sizes")
    plt, fig, ax = _figure(4.6, 3.4)
    ax.hist([w / h for w, h in zip(widths, heights, strict=True) if h], bins=30)
    ax.set_xlabel("aspect ratio (width / height)")
    ax.set_ylabel("images")
    ax.set_title("aspect ratios")
    return sizes, _png(plt, fig, "aspects")


def _plot_shards(info: dict) -> str:
    labels, sizes = report._shard_sizes(info)
    plt, fig, ax = _figure(6.4, 2.8)
    ax.bar(range(len(sizes)), sizes)
    if len(labels) <= 24:
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MB")
    ax.set_title("shard sizes")
    return _png(plt, fig, "shard sizes")


def install() -> None:
    """Draw the report's plots with matplotlib (the pre-SVG report) in this process."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise SystemExit("bench --fix report needs matplotlib: pip install matplotlib") from exc
    report._plot_classes = _plot_classes
    report._plot_sizes = _plot_sizes
    report._plot_shards = _plot_shards
