"""report.html: a self-contained visual report of a converted dataset (no JavaScript, offline).

What it shows, read from the output directory alone (local or bucket, through Beam FileSystems):
a contact sheet per class decoded from the TFRecords (each original beside the reader's
evaluation crop), class histograms per split, rejects by reason with example paths and
thumbnails where the file still opens, transcodes by reason, duplicates, image size and aspect
distributions, shard sizes and the pixel statistics. Plots are inline SVG
(pipeline/report/charts.py), thumbnails JPEGs embedded as data URIs.

The records are read with a small TF-free TFRecord/Example parser; reading stops after a bounded
number of bytes, so a report takes seconds whatever the dataset's size (counts then say they
come from a sample).
"""

from __future__ import annotations

import base64
import collections
import datetime
import html
import io
import json
import os
import stat
import sys

from apache_beam.io.filesystems import FileSystems
from PIL import Image, ImageFile

from core import names as file_names
from core import schema, storage
from pipeline.report import charts, thumbs
from pipeline.report.object_section import object_section
from pipeline.report.overlay import ObjectDrawer
from pipeline.report.scan import (
    SCAN_KEYS,
    exact_label_counts,
    label_counts,
    parse_example,
    read_records,
    scan_dataset,
)
from pipeline.report.summary import non_jpeg_warning, stored_forms
from pipeline.report.tile_section import tile_section

__all__ = [
    "REPORT_FILE",
    "build_report",
    "write_report",
]

REPORT_FILE = "report.html"
# Contact sheet: images per class, and the thumbnail's longer side in pixels.
PER_CLASS = 8  # two rows of four at 1280 px
THUMB_PX = 160
# Rejected/duplicate examples listed per reason; files larger than this get no thumbnail.
EXAMPLES_PER_REASON = 4
THUMB_MAX_FILE_BYTES = 32 * 2**20
# Clusters of near-duplicates shown, and images of each: each thumbnail decodes a source file.
NEAR_CLUSTERS_SHOWN = 8
NEAR_IMAGES_SHOWN = 4
# The reader's evaluation output size shown beside each original.
EVAL_SIZE = (224, 224)
# Records the contact sheet may read while looking for images of every class.
EVAL_SEARCH_RECORDS = 4096


# --- Images -----------------------------------------------------------------------------------


def _data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _thumb(image, drawn: bool = False) -> str:
    """A PIL image -> JPEG data URI, longer side THUMB_PX.

    `drawn`: objects are drawn on it; its colour is kept at full resolution (4:4:4), since the
    default 4:2:0 averages a 2-px coloured line with the image beside it.
    """
    image = image.convert("RGB")
    image.thumbnail((THUMB_PX, THUMB_PX))
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=80, **({"subsampling": 0} if drawn else {}))
    return _data_uri(buf.getvalue(), "image/jpeg")


def _open_any(path: str):
    """Thumbnail of a rejected file when it still opens (truncated files included), else None."""
    try:
        # Only regular files of a bounded size: a rejected path may be a FIFO (reading it would
        # block forever), a folder or a huge file.
        if storage.is_local(path):
            st = os.stat(file_names.local_path(path))
            if not stat.S_ISREG(st.st_mode) or st.st_size > THUMB_MAX_FILE_BYTES:
                return None
        else:
            (match,) = FileSystems.match([storage.glob_escape(path)], limits=[1])
            sizes = [m.size_in_bytes for m in match.metadata_list]
            if not sizes or sizes[0] > THUMB_MAX_FILE_BYTES:
                return None
        data = storage.read_bytes(path)
    except Exception:  # noqa: BLE001 - a missing or unreadable file has no thumbnail
        return None
    if not data or len(data) > THUMB_MAX_FILE_BYTES:
        return None
    old = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = True  # Show what survives of a truncated file.
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (THUMB_PX, THUMB_PX))
            return _thumb(image)
    except Exception:  # noqa: BLE001 - not an image any decoder opens: no thumbnail, path kept
        return None
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = old


def _eval_crops(info: dict, records: list[bytes]) -> list[str | None]:
    """The reader's evaluation output for each of `records`, as data URIs (None if unavailable).

    `pipeline.reader.dataset.evaluation_images` decodes them as `make_dataset(training=False)` would, from
    the records already read here: datasets in any store work, and nothing else is read. When
    the batch fails, each record is tried alone, so one record the reader refuses costs its
    own crop only.
    """
    if not records:
        return []
    try:
        import tensorflow as tf

        from pipeline.reader.dataset import evaluation_images
    except ImportError:  # a converter-only install: originals only
        return [None] * len(records)

    def crops(batch: list[bytes]) -> list[str]:
        images = evaluation_images(batch, info, EVAL_SIZE).numpy()
        return [_thumb(thumbs.as_8bit_image(image)) for image in images]

    try:
        return crops(records)
    except (tf.errors.OpError, ValueError) as e:  # a record the reader cannot decode
        reason = str(e).splitlines()[0][:200]
        print(
            f"imgrec: report: eval crops: the reader refused a record ({reason})", file=sys.stderr
        )
    if len(records) == 1:
        return [None]
    found = []
    for record in records:
        try:
            found += crops([record])
        except (tf.errors.OpError, ValueError):  # named once above
            found.append(None)
    return found


def _contact_sheet(data_dir: str, info: dict, split: str) -> dict[str, list[dict]]:
    """label -> up to PER_CLASS {"path", "size", "original", "eval", "objects"} from `split`'s
    records ("objects": the class names drawn on an annotated dataset's original).

    Reads records until every class has PER_CLASS of them (or EVAL_SEARCH_RECORDS were read):
    at a few classes that is a few dozen records, not the whole first shard.
    """
    names = info.get("label_names", [])
    wanted = set(names) or {"(no label)"}
    chosen = collections.defaultdict(list)
    keys = SCAN_KEYS | {schema.ENCODED, schema.SHA256, schema.CHANNELS, schema.DTYPE}
    shards = [s for s in info["splits"][split].get("shards", []) if s.get("num_examples")]
    drawer = ObjectDrawer.of(info, THUMB_PX)
    read = 0
    for record in (r for sh in shards for r in read_records(storage.join(data_dir, sh["file"]))):
        if read >= EVAL_SEARCH_RECORDS or not wanted:
            break
        read += 1
        fields = parse_example(record, keys)
        label = fields.get(schema.LABEL, -1)
        name = names[label] if 0 <= label < len(names) else "(no label)"
        if len(chosen[name]) >= PER_CLASS:
            continue
        drawn = []
        try:
            # JPEGs decoded at twice the thumbnail's side (Image.thumbnail's reducing_gap, which
            # _thumb's convert("RGB") would defeat).
            image = thumbs.open_stored(fields[schema.ENCODED], fields, 2 * THUMB_PX)
            if drawer is not None:
                image, drawn = drawer.draw(image, record)
            original = _thumb(image, drawn=drawer is not None)
        except Exception:  # noqa: BLE001 - shown as missing; `imgrec verify` names the cause
            original = None
        chosen[name].append(
            {
                "path": file_names.printable(fields.get(schema.FILENAME, b"")),
                "size": f"{fields.get(schema.WIDTH)}×{fields.get(schema.HEIGHT)}",
                "record": record,
                "original": original,
                "objects": drawn,
            }
        )
        if len(chosen[name]) >= PER_CLASS:
            wanted.discard(name)
    items = [c for v in chosen.values() for c in v]
    for c, crop in zip(items, _eval_crops(info, [c.pop("record") for c in items]), strict=True):
        c["eval"] = crop
    return {n: chosen[n] for n in names if n in chosen} | {
        n: v for n, v in chosen.items() if n not in names
    }


# --- Plots ------------------------------------------------------------------------------------


def _plot_classes(counts: dict[str, collections.Counter], names: list[str]) -> str:
    series = {split: [c[n] for n in names] for split, c in counts.items()}
    shown = [file_names.printable(n) for n in names]  # a label is a folder name: any bytes
    return charts.grouped_bars(shown, series, "examples", "classes per split")


def _plot_sizes(rows: list[dict]) -> tuple[str, str]:
    widths = [r.get(schema.WIDTH) or 0 for r in rows]
    heights = [r.get(schema.HEIGHT) or 0 for r in rows]
    sizes = charts.scatter(widths, heights, "width (px)", "height (px)", "image sizes")
    aspects = [w / h for w, h in zip(widths, heights, strict=True) if h]
    return sizes, charts.histogram(
        aspects, 30, "aspect ratio (width / height)", "images", "aspect ratios"
    )


def _shard_sizes(info: dict) -> tuple[list[str], list[float]]:
    """("SPLIT I" per shard, its MB), in dataset_info.json's order."""
    labels, sizes = [], []
    for split, s in info["splits"].items():
        for i, sh in enumerate(s.get("shards", [])):
            labels.append(f"{split} {i}")
            sizes.append(sh.get("num_bytes", 0) / 1e6)
    return labels, sizes


def _plot_shards(info: dict) -> str:
    labels, sizes = _shard_sizes(info)
    return charts.vertical_bars(labels, sizes, "MB", "shard sizes", show_labels=len(labels) <= 24)


# --- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;padding:16px;color:#222;background:#fafafa}
main{max-width:1180px;margin:0 auto}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:24px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:12px 0 4px}
table{border-collapse:collapse;max-width:100%}td,th{padding:2px 10px 2px 0;text-align:left;
vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
.path{font-family:monospace;font-size:12px;overflow-wrap:anywhere;word-break:break-all}
.sheet{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0;background:#fff;border:1px solid #ddd;padding:4px;width:280px;box-sizing:border-box}
figure .pair{display:flex;gap:4px;align-items:flex-start}
figure .pair img{width:132px;height:auto}figcaption{font-size:11px;color:#555;overflow-wrap:anywhere}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots svg{max-width:100%;height:auto}
.thumb{width:96px;height:auto}.muted{color:#777}.warning{border-left:4px solid #c80;padding-left:8px}.none{display:inline-block;width:160px;
height:120px;background:#eee;color:#888;text-align:center;line-height:120px;font-size:12px}
"""


def _img(uri: str | None, alt: str, cls: str = "") -> str:
    if uri is None:
        text = alt if alt.startswith("no ") else f"no {alt}"
        return f'<span class="none">{html.escape(text)}</span>'
    cls_attr = f' class="{cls}"' if cls else ""
    return f'<img{cls_attr} alt="{html.escape(alt)}" src="{uri}">'


def _escape(text: object) -> str:
    """HTML for a name or any text: control characters and bytes that are not UTF-8 escaped
    first (core/names.py), so a file or label name cannot break a line or a tag."""
    return html.escape(file_names.printable(str(text)))


def _jsonl(data_dir: str, name: str) -> list[dict]:
    path = storage.join(data_dir, name)
    if not storage.exists(path):
        return []
    return [
        json.loads(line) for line in storage.read_bytes(path).decode("utf-8").splitlines() if line
    ]


def build_report(data_dir: str) -> str:
    """The report of the dataset in `data_dir` as one HTML string."""
    info_path = storage.join(data_dir, schema.DATASET_INFO)
    if not storage.exists(info_path):
        raise schema.DatasetInfoError(
            f"{info_path} not found: {data_dir!r} is not a converted dataset "
            "(run `imgrec convert --output DIR` first, or check the path)"
        )
    info = json.loads(storage.read_bytes(info_path))
    names = list(info.get("label_names", []))
    scan = scan_dataset(data_dir, info)
    counts = label_counts(info, scan)
    names += sorted({k for c in counts.values() for k in c} - set(names))
    all_rows = [r for rows in scan["records"].values() for r in rows]
    out = _summary_section(data_dir, info, scan, all_rows)
    out += _classes_section(info, counts, names)
    out += object_section(info, scan)  # annotated datasets only
    out += _contact_sheet_section(data_dir, info)
    out += tile_section(data_dir, info)  # --tile datasets only
    out += _rejects_section(data_dir, info)
    out += _transcodes_section(info, all_rows)
    out += _duplicates_section(data_dir, info)
    out += _near_duplicates_section(data_dir, info)
    out += _sizes_and_shards_section(info, all_rows)
    out += _pixel_statistics_section(info)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    out.append(f"<p class=muted>Written {stamp} by imgrec preview.</p></main></body></html>")
    return "\n".join(out)


def _summary_section(data_dir: str, info: dict, scan: dict, all_rows: list[dict]) -> list[str]:
    """The page's head, the counts table, the non-JPEG warning and whether counts are sampled."""
    e = _escape
    out = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width,initial-scale=1">',
        f"<title>imgrec report: {e(data_dir)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>imgrec report</h1><p class=path>{e(data_dir)}</p>",
    ]
    prov = info.get("provenance", {})
    out.append(
        "<table>"
        f"<tr><th>listed</th><td class=n id=num_listed>{info['num_listed']}</td></tr>"
        f"<tr><th>written</th><td class=n id=num_written>{info['num_written']}</td></tr>"
        f"<tr><th>rejected</th><td class=n id=num_rejected>{info['num_rejected']}</td></tr>"
        f"<tr><th>duplicates</th><td class=n id=num_duplicates>{info['num_duplicates']}</td></tr>"
        f"<tr><th>classes</th><td class=n>{len(info.get('label_names', []))}</td></tr>"
        f"{_groups_row(info)}"
        f"{_stored_forms_rows(info)}"
        f"<tr><th>converted</th><td>{e(str(prov.get('finished', '?')))} by imgrec "
        f"{e(str(prov.get('versions', {}).get('imgrec', '?')))}</td></tr></table>"
    )
    warning = non_jpeg_warning(info)
    if warning:
        out.append(f"<p class=warning id=non-jpeg><strong>Warning:</strong> {e(warning)}</p>")
    if not scan["exact"]:
        what = "Sizes" if exact_label_counts(info) is not None else "Counts per class, sizes"
        out.append(
            f"<p class=muted>{what} and examples come from a sample of "
            f"{len(all_rows)} records ({scan['read_bytes'] / 1e6:.0f} MB read).</p>"
        )
    return out


def _stored_forms_rows(info: dict) -> str:
    """Records per image/format and each split's per pixel layout (dtype x channels)."""
    formats, layouts = stored_forms(info)
    rows = f"<tr><th>formats</th><td id=formats>{_escape(formats)}</td></tr>" if formats else ""
    if layouts:
        rows += (
            "<tr><th>pixel layouts<br><span class=muted>dtype x channels</span></th>"
            f"<td id=pixel-layouts>{_escape(layouts)}</td></tr>"
        )
    return rows


def _groups_row(info: dict) -> str:
    """--group_by: the spec and the groups per split (each group is in one split only)."""
    if not info.get("group_by"):
        return ""
    per_split = ", ".join(
        f"{_escape(split)} {s.get('num_groups', 0)}" for split, s in info["splits"].items()
    )
    return f"<tr><th>groups ({_escape(info['group_by'])})</th><td id=groups>{per_split}</td></tr>"


def _classes_section(info: dict, counts: dict, names: list[str]) -> list[str]:
    """Examples per class and split: a table and a grouped bar chart."""
    e = _escape
    out = ["<h2>Classes per split</h2><table><tr><th>class</th>"]
    out += [f"<th>{e(s)}</th>" for s in counts] + ["</tr>"]
    for n in names:
        out.append(f"<tr><td>{e(n)}</td>")
        out += [f'<td class=n data-split="{e(s)}">{counts[s][n]}</td>' for s in counts]
        out.append("</tr>")
    out.append("<tr><th>total</th>")
    out += [
        f'<th class=n id="split-{e(s)}">{info["splits"][s]["num_examples"]}</th>' for s in counts
    ]
    out.append("</tr></table>")
    if names and counts:
        out.append(f"<div class=plots>{_plot_classes(counts, names)}</div>")
    return out


def _contact_sheet_section(data_dir: str, info: dict) -> list[str]:
    """Each class's stored images beside the reader's evaluation crops, from one split."""
    e = _escape
    split = (info.get("statistics") or {}).get("train_split") or "train"
    if split not in info["splits"] or not info["splits"][split].get("num_examples"):
        split = next((s for s, v in info["splits"].items() if v.get("num_examples")), None)
    if not split:
        return []
    out = [
        f"<h2>Contact sheet ({e(split)})</h2><p class=muted>Each stored image (left) beside "
        f"what <code>make_dataset(..., training=False, image_size={EVAL_SIZE})</code> "
        "returns (right: the reader's evaluation centre crop).</p>"
    ]
    if "annotations" in info:
        out.append(
            "<p class=muted id=objects-note>Stored images show their objects: boxes with class "
            "names, instance masks and label maps as translucent colour (Objects: colours).</p>"
        )
    if _wide_layouts(info):
        out.append(
            "<p class=muted id=wide-note>Images of more than 8 bits or more than 4 bands: the "
            "stored image shows its first three bands (one band as gray), samples that are not "
            "8-bit stretched from their minimum to their maximum.</p>"
        )
    for n, items in _contact_sheet(data_dir, info, split).items():
        out.append(f'<h3 id="class-{e(n)}">{e(n)}</h3><div class=sheet>')
        for c in items:
            drawn = "".join(f" · <span class=objects>{e(n)}</span>" for n in c["objects"])
            out.append(
                "<figure><div class=pair>"
                f"{_img(c['original'], 'original')}{_img(c['eval'], 'eval crop')}</div>"
                f"<figcaption>{e(c['size'])} · {e(c['path'])}{drawn}</figcaption></figure>"
            )
        out.append("</div>")
    return out


def _wide_layouts(info: dict) -> bool:
    """Whether a split records pixel layouts other than 8-bit samples in up to 4 channels."""
    for entry in info["splits"].values():
        for layout in entry.get("pixel_layouts") or {}:
            try:
                dtype, channels = schema.pixel_layout_parts(layout)
            except ValueError:  # not a layout this imgrec writes: say the data is unusual
                return True
            if dtype != "uint8" or channels > 4:
                return True
    return False


def _rejects_section(data_dir: str, info: dict) -> list[str]:
    """Rejected files by reason, a few of each with a thumbnail where the file still opens."""
    e = _escape
    rejected = _jsonl(data_dir, schema.REJECTED)
    by_reason = collections.defaultdict(list)
    for r in rejected:
        by_reason[r.get("reason", "?")].append(r)
    out = [f"<h2>Rejected files ({info['num_rejected']})</h2>"]
    if not rejected:
        out.append("<p>None.</p>")
    for reason, rows in sorted(by_reason.items()):
        out.append(f'<h3 id="reason-{e(reason)}">{e(reason)} ({len(rows)})</h3><table>')
        for r in rows[:EXAMPLES_PER_REASON]:
            out.append(
                f"<tr><td>{_img(_open_any(r['path']), 'no thumbnail', 'thumb')}</td>"
                f"<td><div class=path>{e(r['path'])}</div>"
                f"<div class=muted>{e(str(r.get('detail', ''))[:300])}</div></td></tr>"
            )
        out.append("</table>")
    return out


def _transcodes_section(info: dict, all_rows: list[dict]) -> list[str]:
    """Transcoded records by reason, with example files from the scanned records."""
    e = _escape
    transcoded = info.get("transcoded_by_reason", {})
    out = [f"<h2>Transcoded ({sum(transcoded.values())})</h2>"]
    if not transcoded:
        out.append("<p>None: every stored image is the original file's bytes.</p>")
        return out
    examples = collections.defaultdict(list)
    for r in all_rows:
        reason = (r.get(schema.TRANSCODE_REASON) or b"").decode()
        if reason and len(examples[reason]) < EXAMPLES_PER_REASON:
            examples[reason].append(r)
    out.append("<table>")
    for reason, n in sorted(transcoded.items()):
        paths = "".join(
            f"<div class=path>{e(file_names.printable(x.get(schema.FILENAME, b'')))} "
            f"({e((x.get(schema.TRANSCODED_FROM) or b'').decode())})</div>"
            for x in examples.get(reason, [])
        )
        out.append(
            f'<tr id="transcode-{e(reason)}"><td>{e(reason)}</td>'
            f"<td class=n>{n}</td><td>{paths}</td></tr>"
        )
    out.append("</table>")
    return out


def _duplicates_section(data_dir: str, info: dict) -> list[str]:
    """A few of the dropped duplicates and the file each duplicates."""
    e = _escape
    duplicates = _jsonl(data_dir, schema.DUPLICATES)
    out = [f"<h2>Duplicates ({info['num_duplicates']})</h2><table>"]
    for d in duplicates[:EXAMPLES_PER_REASON]:
        out.append(
            f"<tr><td class=path>{e(d.get('path', ''))}</td><td>same bytes as</td>"
            f"<td class=path>{e(str(d.get('duplicate_of', '')))}</td></tr>"
        )
    out.append("</table>")
    return out


def _near_duplicates_section(data_dir: str, info: dict) -> list[str]:
    """Clusters of near-copies side by side, those across splits first (the file's order)."""
    near = info.get("near_duplicates")
    if near is None:
        return []
    e = _escape
    out = [
        f"<h2>Near-duplicates ({near['num_clusters']} clusters, {near['num_images']} images, "
        f"{near['num_across_splits']} across splits)</h2><table>"
    ]
    for c in _jsonl(data_dir, schema.NEAR_DUPLICATES)[:NEAR_CLUSTERS_SHOWN]:
        cells = "".join(
            f"<td>{_img(_open_any(p), 'no thumbnail', 'thumb')}<div class=path>{e(p)}</div></td>"
            for p in c["paths"][:NEAR_IMAGES_SHOWN]
        )
        more = len(c["paths"]) - NEAR_IMAGES_SHOWN
        out.append(
            f"<tr><th>{e(', '.join(c['splits']))}<div class=muted>{c['distance']} bits"
            f"{f'; {more} more' if more > 0 else ''}</div></th>{cells}</tr>"
        )
    out.append("</table>")
    return out


def _sizes_and_shards_section(info: dict, all_rows: list[dict]) -> list[str]:
    """Image size and aspect distributions, then shard sizes per split."""
    e = _escape
    out = ["<h2>Image sizes</h2>"]
    if all_rows:
        sizes, aspects = _plot_sizes(all_rows)
        out.append(f"<div class=plots>{sizes}{aspects}</div>")
    out.append(f"<h2>Shards</h2><div class=plots>{_plot_shards(info)}</div>")
    out.append("<table><tr><th>split</th><th>shards</th><th>examples</th><th>MB</th></tr>")
    for s, v in info["splits"].items():
        out.append(
            f"<tr><td>{e(s)}</td><td class=n>{v.get('num_shards', len(v.get('shards', [])))}</td>"
            f"<td class=n>{v['num_examples']}</td><td class=n>{v['num_bytes'] / 1e6:.1f}</td></tr>"
        )
    out.append("</table>")
    return out


def _pixel_statistics_section(info: dict) -> list[str]:
    """The training split's per-channel mean and std, or why there are none."""
    stats = info.get("statistics") or {}
    out = ["<h2>Pixel statistics</h2>"]
    if not stats.get("pixel_mean"):
        out.append("<p>Not computed (converted with --no_analyze).</p>")
        return out
    out.append(
        f"<p>From {stats.get('num_stats_images', '?')} images of the "
        f"{_escape(str(stats.get('train_split', 'train')))} split (0-255 scale).</p><table>"
        f"<tr><th></th>{''.join(f'<th>{c}</th>' for c in _channel_names(stats))}</tr>"
    )
    for label, key in (("mean", "pixel_mean"), ("std", "pixel_std")):
        out.append(f"<tr><th>{label}</th>")
        out += [f"<td class=n>{v:.2f}</td>" for v in stats.get(key, [])]
        out.append("</tr>")
    out.append("</table>")
    return out


def _channel_names(stats: dict) -> list[str]:
    """R, G, B for three statistics per channel, else the band numbers."""
    count = len(stats.get("pixel_mean") or [])
    return ["R", "G", "B"] if count == 3 else [f"band {i}" for i in range(count)]


def write_report(data_dir: str, out: str | None = None) -> str:
    """Write the report (default `DATA_DIR/report.html`, buckets included); returns its path."""
    data_dir = data_dir.rstrip("/")
    path = out or storage.join(data_dir, REPORT_FILE)
    storage.write_bytes_atomic(
        path, build_report(data_dir).encode("utf-8"), mime_type="text/html; charset=utf-8"
    )
    return path
