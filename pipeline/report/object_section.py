"""report.html's section on an annotated dataset's objects: where they came from, the counts
per split, and charts of objects per class, objects per image and box sizes."""

from __future__ import annotations

import collections
import html
import math

from core import schema
from core.names import printable
from pipeline.report import charts
from pipeline.report.objects import SIZES, class_counts
from pipeline.report.overlay import class_colours
from pipeline.report.scan import OBJECTS

__all__ = ["object_section"]

# Classes the per-class chart shows, the most objects first: a bar group per class of COCO's
# 80 would be a page tall.
CHART_CLASSES = 30
# Bars of the objects-per-image chart at most; more distinct counts share a bar.
PER_IMAGE_BARS = 30


def _e(text: object) -> str:
    return html.escape(printable(str(text)))


def object_section(info: dict, scan: dict) -> list[str]:
    """The section's HTML parts; [] for a dataset without annotations.

    Args:
        info: dataset_info.json.
        scan: scan.scan_dataset's result (its rows count each record's objects).
    """
    annotations = info.get("annotations")
    if annotations is None:
        return []
    rows = [r for split_rows in scan["records"].values() for r in split_rows]
    sampled = "" if scan["exact"] else f" (from a sample of {len(rows)} records)"
    return [
        "<h2>Objects</h2>",
        _source_text(annotations),
        _legend(annotations),
        _split_table(annotations),
        "<div class=plots>",
        f"<div><h3>Objects per class</h3>{_class_chart(annotations)}</div>",
        f"<div><h3>Objects per image{_e(sampled)}</h3>{_per_image_chart(rows)}</div>",
        f"<div><h3>Box sizes (COCO: area &lt; 32², &lt; 96², larger)</h3>"
        f"{_sizes_chart(annotations)}</div>",
        "</div>",
    ]


def _source_text(annotations: dict) -> str:
    """The annotation files, the label map's size, masks and the unmatched annotations."""
    sources = ", ".join(_e(s) for s in annotations.get("sources", []))
    classes = annotations.get("segmentation_classes")
    maps = f"; label maps of {len(classes)} classes" if classes is not None else ""
    unmatched = annotations.get("num_unmatched_annotations", 0)
    return (
        f"<p id=annotations>{_e(', '.join(annotations.get('formats', [])))} annotations from "
        f"<span class=path>{sources}</span>; label map of "
        f"<span id=label-map-size>{len(annotations.get('label_map', []))}</span> classes"
        f"{'; instance masks' if annotations.get('instance_masks') else ''}{maps}. "
        f"<span id=unmatched>{unmatched}</span> annotations named no image found"
        f"{f' ({schema.UNMATCHED_ANNOTATIONS})' if unmatched else ''}.</p>"
    )


def _legend(annotations: dict) -> str:
    """Each class's colour on the contact sheet."""
    colours = class_colours(annotations)
    items = "".join(
        f'<span style="display:inline-block;margin-right:10px"><span style="display:inline-block;'
        f'width:10px;height:10px;background:{colours[int(c["id"])]}"></span> {_e(c["name"])}</span>'
        for c in annotations.get("label_map", [])
    )
    return f"<p id=class-colours>{items}</p>"


def _split_table(annotations: dict) -> str:
    """Images, negatives, objects, masks, the most per image, clipped and dropped per split."""
    heads = ("images", "negatives", "objects", "masks", "max_per_image", "boxes_clipped")
    out = ["<table id=object-counts><tr><th>split</th>"]
    out += [f"<th>{h.replace('_', ' ')}</th>" for h in heads] + ["<th>dropped</th></tr>"]
    for split, s in annotations.get("splits", {}).items():
        out.append(f"<tr><td>{_e(split)}</td>")
        out += [f'<td class=n data-count="{h}">{_e(s.get(h, "?"))}</td>' for h in heads]
        dropped = ", ".join(f"{_e(k)} {v}" for k, v in sorted(s.get("dropped", {}).items()))
        out.append(f"<td>{dropped or 0}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _class_chart(annotations: dict) -> str:
    counts = class_counts(annotations)
    totals = collections.Counter()
    for c in counts.values():
        totals.update(c)
    names = [c["name"] for c in annotations.get("label_map", [])]
    top = sorted(set(names) | set(totals), key=lambda n: (-totals[n], n))[:CHART_CLASSES]
    series = {split: [c[n] for n in top] for split, c in counts.items()}
    shown = [printable(n) for n in top]
    return charts.grouped_bars(shown, series, "objects", "objects per class")


def _per_image_chart(rows: list[dict]) -> str:
    """Images per count of objects: a bar per count, or per range of counts past PER_IMAGE_BARS."""
    per_image = [r.get(OBJECTS, 0) for r in rows]
    most = max(per_image, default=0)
    step = max(1, math.ceil((most + 1) / PER_IMAGE_BARS))
    bins = collections.Counter(n // step for n in per_image)
    labels = [
        str(b * step) if step == 1 else f"{b * step}–{b * step + step - 1}"
        for b in range(most // step + 1)
    ]
    values = [bins[b] for b in range(most // step + 1)]
    return charts.vertical_bars(labels, values, "images", "objects per image")


def _sizes_chart(annotations: dict) -> str:
    series = {
        split: [s.get("sizes", {}).get(k, 0) for k in SIZES]
        for split, s in annotations.get("splits", {}).items()
    }
    return charts.grouped_bars(list(SIZES), series, "objects", "box sizes")
