"""report.html: a self-contained visual report of a converted dataset (no JavaScript, offline).

What it shows, read from the output directory alone (local or bucket, through Beam FileSystems):
a contact sheet per class decoded from the TFRecords (each original beside the reader's
evaluation crop), class histograms per split, rejects by reason with example paths and
thumbnails where the file still opens, transcodes by reason, duplicates, image size and aspect
distributions, shard sizes and the pixel statistics. Plots are matplotlib PNGs and thumbnails
JPEGs, embedded as data URIs.

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
import struct
import sys

from apache_beam.io.filesystems import FileSystems

from pipeline import schema, storage

__all__ = [
    "REPORT_FILE",
    "read_records",
    "parse_example",
    "scan_dataset",
    "class_histogram_lines",
    "build_report",
    "write_report",
]

REPORT_FILE = "report.html"
# Bytes of TFRecords a report reads at most: the whole of a dataset up to this size, a sample
# beyond it. Class counts come exact from dataset_info.json (the writer counts them), so the
# scan only feeds the size plots (and class counts of datasets written before those counts):
# 32 MB is ~1,000 photos, plenty for a distribution, and parses in ~0.2 s where scanning a
# 12,000-photo dataset whole cost ~2 s of a 16 s conversion.
SCAN_BYTES = 32 * 2**20
# Contact sheet: images per class, and the thumbnail's longer side in pixels.
PER_CLASS = 8  # two rows of four at 1280 px
THUMB_PX = 160
# Rejected/duplicate examples listed per reason; files larger than this get no thumbnail.
EXAMPLES_PER_REASON = 4
THUMB_MAX_FILE_BYTES = 32 * 2**20
# The reader's evaluation output size shown beside each original.
EVAL_SIZE = (224, 224)
# Records the contact sheet may read while looking for images of every class.
EVAL_SEARCH_RECORDS = 4096


# --- TFRecord and tf.train.Example, without TensorFlow -------------------------------------


def read_records(path: str, max_bytes: int | None = None):
    """Serialized records of one TFRecord file (GZIP by its .gz name); CRCs are not checked.

    Stops after `max_bytes` of record data when given.
    """
    read = 0
    with FileSystems.open(path) as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = f.read(length)
            f.read(4)
            if len(data) < length:
                return
            yield data
            read += length + 16
            if max_bytes is not None and read >= max_bytes:
                return


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes, start: int = 0, end: int | None = None):
    """(field number, wire type, value) of a protobuf message; LEN values as (start, end)."""
    pos, end = start, len(buf) if end is None else end
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value = (pos, pos + n)
            pos += n
        elif wire == 5:
            value = buf[pos : pos + 4]
            pos += 4
        elif wire == 1:
            value = buf[pos : pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def _feature_values(buf: bytes, start: int, end: int) -> list:
    """Values of one tf.train.Feature (bytes_list=1, float_list=2, int64_list=3)."""
    values = []
    for kind, _, (s, e) in _fields(buf, start, end):
        for number, wire, v in _fields(buf, s, e):
            if number != 1:
                continue
            if kind == 1:
                values.append(bytes(buf[v[0] : v[1]]))
            elif kind == 3 and wire == 2:  # packed int64
                p = v[0]
                while p < v[1]:
                    x, p = _varint(buf, p)
                    values.append(x - (1 << 64) if x >= 1 << 63 else x)
            elif kind == 3:
                values.append(v - (1 << 64) if v >= 1 << 63 else v)
            elif kind == 2 and wire == 2:
                values += list(struct.unpack(f"<{(v[1] - v[0]) // 4}f", buf[v[0] : v[1]]))
            elif kind == 2:
                values.append(struct.unpack("<f", v)[0])
    return values


def parse_example(record: bytes, keys: set[str] | None = None) -> dict:
    """A serialized tf.train.Example -> {key: first value} (bytes or int), for `keys` only."""
    out = {}
    for number, _, (s, e) in _fields(record):
        if number != 1:
            continue
        for entry_no, _, (es, ee) in _fields(record, s, e):
            if entry_no != 1:
                continue
            name, value = None, None
            for n, _, (vs, ve) in _fields(record, es, ee):
                if n == 1:
                    name = record[vs:ve].decode("utf-8")
                elif n == 2:
                    value = (vs, ve)
            if name is None or value is None or (keys is not None and name not in keys):
                continue
            values = _feature_values(record, *value)
            out[name] = values[0] if values else None
    return out


# --- Reading the dataset ----------------------------------------------------------------------

_SCAN_KEYS = {
    schema.LABEL,
    schema.LABEL_TEXT,
    schema.HEIGHT,
    schema.WIDTH,
    schema.FORMAT,
    schema.FILENAME,
    schema.TRANSCODE_REASON,
    schema.TRANSCODED_FROM,
}


def scan_dataset(data_dir: str, info: dict, max_bytes: int = SCAN_BYTES) -> dict:
    """Per-record header fields of the dataset (all records when it fits in `max_bytes`).

    Returns:
        {"exact": bool, "records": {split: [fields dict]}, "read_bytes": N}
    """
    total = sum(s.get("num_bytes", 0) for s in info["splits"].values()) or 1
    exact = total <= max_bytes
    records, read_bytes = {}, 0
    for split, s in info["splits"].items():
        rows = []
        # Each split gets its share of the budget, spread over its shards.
        shards = [sh for sh in s.get("shards", []) if sh.get("num_examples")]
        budget = None if exact else max(1, int(max_bytes * s.get("num_bytes", 0) / total))
        per_shard = None if budget is None else max(1, budget // max(1, len(shards)))
        for sh in shards:
            for record in read_records(storage.join(data_dir, sh["file"]), per_shard):
                read_bytes += len(record)
                rows.append(parse_example(record, _SCAN_KEYS))
        records[split] = rows
    return {"exact": exact, "records": records, "read_bytes": read_bytes}


def _exact_label_counts(info: dict) -> dict[str, collections.Counter] | None:
    """Examples per class and split as the writer counted them, or None (older datasets)."""
    splits = info.get("splits", {})
    if not splits or any("label_counts" not in s for s in splits.values()):
        return None
    names = set(info.get("label_names", []))
    counts = {}
    for split, s in splits.items():
        c = collections.Counter()
        for label, n in s["label_counts"].items():
            c[label if label in names else "(no label)"] += n
        counts[split] = c
    return counts


def _label_counts(info: dict, scan: dict) -> dict[str, collections.Counter]:
    exact = _exact_label_counts(info)
    if exact is not None:
        return exact
    names = info.get("label_names", [])
    counts = {}
    for split, rows in scan["records"].items():
        c = collections.Counter()
        for r in rows:
            label = r.get(schema.LABEL, -1)
            c[names[label] if 0 <= label < len(names) else "(no label)"] += 1
        counts[split] = c
    return counts


def class_histogram_lines(info: dict, data_dir: str, width: int = 30) -> list[str]:
    """A terminal bar chart of examples per class, with the count per split (`imgrec inspect`)."""
    counts = _exact_label_counts(info)
    sampled = False
    if counts is None:  # a dataset written before the writer counted classes
        scan = scan_dataset(data_dir, info)
        counts, sampled = _label_counts(info, scan), not scan["exact"]
    names = list(info.get("label_names", []))
    names += sorted({k for c in counts.values() for k in c} - set(names))
    totals = {n: sum(c[n] for c in counts.values()) for n in names}
    top = max(totals.values(), default=0) or 1
    title = "  classes" + ("    (from a sample of the records)" if sampled else "")
    lines = [title]
    name_w = min(24, max([len(n) for n in names] or [1]))
    for n in names:
        bar = "█" * max(1 if totals[n] else 0, round(width * totals[n] / top))
        per_split = ", ".join(f"{s} {c[n]}" for s, c in counts.items())
        lines.append(f"    {n[:name_w]:<{name_w}} {totals[n]:>7} {bar:<{width}}  {per_split}")
    return lines


# --- Images -----------------------------------------------------------------------------------


def _data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _thumb(image) -> str:
    """A PIL image -> JPEG data URI, longer side THUMB_PX."""
    image = image.convert("RGB")
    image.thumbnail((THUMB_PX, THUMB_PX))
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=80)
    return _data_uri(buf.getvalue(), "image/jpeg")


def _open_stored(encoded: bytes, fields: dict):
    """Decode one record's stored image (encoded file bytes, or raw pixels) with Pillow."""
    from PIL import Image

    if fields.get(schema.FORMAT) == b"raw":
        h, w = fields[schema.HEIGHT], fields[schema.WIDTH]
        c = fields.get(schema.CHANNELS) or len(encoded) // max(1, h * w)
        mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(c, "RGB")
        return Image.frombytes(mode, (w, h), encoded)
    image = Image.open(io.BytesIO(encoded))
    image.seek(0)
    return image


def _open_any(path: str):
    """Thumbnail of a rejected file when it still opens (truncated files included), else None."""
    from PIL import Image, ImageFile

    try:
        # Only regular files of a bounded size: a rejected path may be a FIFO (reading it would
        # block forever), a folder or a huge file.
        if storage.is_local(path):
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size > THUMB_MAX_FILE_BYTES:
                return None
        else:
            (match,) = FileSystems.match([path], limits=[1])
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

    `pipeline.reader.evaluation_images` decodes them as `make_dataset(training=False)` would, from
    the records already read here: datasets in any store work, and nothing else is read.
    """
    if not records:
        return []
    try:
        import tensorflow as tf

        from pipeline.reader import evaluation_images
    except ImportError:  # a converter-only install: originals only
        return [None] * len(records)
    from PIL import Image

    try:
        images = evaluation_images(records, info, EVAL_SIZE).numpy()
    except (tf.errors.OpError, ValueError) as e:  # a record the reader cannot decode
        print(f"imgrec: report: no eval crops ({str(e).splitlines()[0][:200]})", file=sys.stderr)
        return [None] * len(records)
    return [_thumb(Image.fromarray(image)) for image in images]


def _contact_sheet(data_dir: str, info: dict, split: str) -> dict[str, list[dict]]:
    """label -> up to PER_CLASS {"path", "size", "original", "eval"} from `split`'s records."""
    names = info.get("label_names", [])
    chosen = collections.defaultdict(list)
    keys = _SCAN_KEYS | {schema.ENCODED, schema.SHA256, schema.CHANNELS}
    shards = [s for s in info["splits"][split].get("shards", []) if s.get("num_examples")]
    read = 0
    for sh in shards:
        for record in read_records(storage.join(data_dir, sh["file"])):
            read += 1
            fields = parse_example(record, keys)
            label = fields.get(schema.LABEL, -1)
            name = names[label] if 0 <= label < len(names) else "(no label)"
            if len(chosen[name]) >= PER_CLASS:
                if read >= EVAL_SEARCH_RECORDS:
                    break
                continue
            try:
                original = _thumb(_open_stored(fields[schema.ENCODED], fields))
            except Exception:  # noqa: BLE001 - shown as missing; `imgrec verify` names the cause
                original = None
            chosen[name].append(
                {
                    "path": fields.get(schema.FILENAME, b"").decode("utf-8", "replace"),
                    "size": f"{fields.get(schema.WIDTH)}×{fields.get(schema.HEIGHT)}",
                    "record": record,
                    "original": original,
                }
            )
        if (
            read >= EVAL_SEARCH_RECORDS
            or all(len(chosen[n]) >= PER_CLASS for n in names)
            and len(chosen) >= len(names)
        ):
            break
    items = [c for v in chosen.values() for c in v]
    for c, crop in zip(items, _eval_crops(info, [c.pop("record") for c in items]), strict=True):
        c["eval"] = crop
    return {n: chosen[n] for n in names if n in chosen} | {
        n: v for n, v in chosen.items() if n not in names
    }


# --- Plots ------------------------------------------------------------------------------------


def _figure(width: float = 6.4, height: float = 3.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    return plt, fig, ax


def _png(plt, fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return _data_uri(buf.getvalue(), "image/png")


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
    return _png(plt, fig)


def _plot_sizes(rows: list[dict]) -> tuple[str, str]:
    widths = [r.get(schema.WIDTH) or 0 for r in rows]
    heights = [r.get(schema.HEIGHT) or 0 for r in rows]
    plt, fig, ax = _figure(4.6, 3.4)
    ax.scatter(widths, heights, s=6, alpha=0.5)
    ax.set_xlabel("width (px)")
    ax.set_ylabel("height (px)")
    ax.set_title("image sizes")
    sizes = _png(plt, fig)
    plt, fig, ax = _figure(4.6, 3.4)
    ax.hist([w / h for w, h in zip(widths, heights, strict=True) if h], bins=30)
    ax.set_xlabel("aspect ratio (width / height)")
    ax.set_ylabel("images")
    ax.set_title("aspect ratios")
    return sizes, _png(plt, fig)


def _plot_shards(info: dict) -> str:
    labels, sizes = [], []
    for split, s in info["splits"].items():
        for i, sh in enumerate(s.get("shards", [])):
            labels.append(f"{split} {i}")
            sizes.append(sh.get("num_bytes", 0) / 1e6)
    plt, fig, ax = _figure(6.4, 2.8)
    ax.bar(range(len(sizes)), sizes)
    if len(labels) <= 24:
        ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MB")
    ax.set_title("shard sizes")
    return _png(plt, fig)


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
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots img{max-width:100%;height:auto}
.thumb{width:96px;height:auto}.muted{color:#777}.none{display:inline-block;width:160px;
height:120px;background:#eee;color:#888;text-align:center;line-height:120px;font-size:12px}
"""


def _img(uri: str | None, alt: str, cls: str = "") -> str:
    if uri is None:
        text = alt if alt.startswith("no ") else f"no {alt}"
        return f'<span class="none">{html.escape(text)}</span>'
    cls_attr = f' class="{cls}"' if cls else ""
    return f'<img{cls_attr} alt="{html.escape(alt)}" src="{uri}">'


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
    counts = _label_counts(info, scan)
    names += sorted({k for c in counts.values() for k in c} - set(names))
    all_rows = [r for rows in scan["records"].values() for r in rows]
    e = html.escape
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
        f"<tr><th>converted</th><td>{e(str(prov.get('finished', '?')))} by imgrec "
        f"{e(str(prov.get('versions', {}).get('imgrec', '?')))}</td></tr></table>"
    )
    if not scan["exact"]:
        what = "Sizes" if _exact_label_counts(info) is not None else "Counts per class, sizes"
        out.append(
            f"<p class=muted>{what} and examples come from a sample of "
            f"{len(all_rows)} records ({scan['read_bytes'] / 1e6:.0f} MB read).</p>"
        )

    # Classes per split.
    out.append("<h2>Classes per split</h2><table><tr><th>class</th>")
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
        out.append(
            f"<div class=plots>{_img(_plot_classes(counts, names), 'classes per split')}</div>"
        )

    # Contact sheet.
    split = (info.get("statistics") or {}).get("train_split") or "train"
    if split not in info["splits"] or not info["splits"][split].get("num_examples"):
        split = next((s for s, v in info["splits"].items() if v.get("num_examples")), None)
    if split:
        out.append(
            f"<h2>Contact sheet ({e(split)})</h2><p class=muted>Each stored image (left) beside "
            f"what <code>make_dataset(..., training=False, image_size={EVAL_SIZE})</code> "
            "returns (right: the reader's evaluation centre crop).</p>"
        )
        for n, items in _contact_sheet(data_dir, info, split).items():
            out.append(f'<h3 id="class-{e(n)}">{e(n)}</h3><div class=sheet>')
            for c in items:
                out.append(
                    "<figure><div class=pair>"
                    f"{_img(c['original'], 'original')}{_img(c['eval'], 'eval crop')}</div>"
                    f"<figcaption>{e(c['size'])} · {e(c['path'])}</figcaption></figure>"
                )
            out.append("</div>")

    # Rejects, transcodes, duplicates.
    rejected = _jsonl(data_dir, schema.REJECTED)
    by_reason = collections.defaultdict(list)
    for r in rejected:
        by_reason[r.get("reason", "?")].append(r)
    out.append(f"<h2>Rejected files ({info['num_rejected']})</h2>")
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
    transcoded = info.get("transcoded_by_reason", {})
    out.append(f"<h2>Transcoded ({sum(transcoded.values())})</h2>")
    if transcoded:
        examples = collections.defaultdict(list)
        for r in all_rows:
            reason = (r.get(schema.TRANSCODE_REASON) or b"").decode()
            if reason and len(examples[reason]) < EXAMPLES_PER_REASON:
                examples[reason].append(r)
        out.append("<table>")
        for reason, n in sorted(transcoded.items()):
            paths = "".join(
                f"<div class=path>{e(x.get(schema.FILENAME, b'').decode('utf-8', 'replace'))} "
                f"({e((x.get(schema.TRANSCODED_FROM) or b'').decode())})</div>"
                for x in examples.get(reason, [])
            )
            out.append(
                f'<tr id="transcode-{e(reason)}"><td>{e(reason)}</td>'
                f"<td class=n>{n}</td><td>{paths}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None: every stored image is the original file's bytes.</p>")
    duplicates = _jsonl(data_dir, schema.DUPLICATES)
    out.append(f"<h2>Duplicates ({info['num_duplicates']})</h2><table>")
    for d in duplicates[:EXAMPLES_PER_REASON]:
        out.append(
            f"<tr><td class=path>{e(d.get('path', ''))}</td><td>same bytes as</td>"
            f"<td class=path>{e(str(d.get('duplicate_of', '')))}</td></tr>"
        )
    out.append("</table>")

    # Distributions, shards, pixels.
    out.append("<h2>Image sizes</h2>")
    if all_rows:
        sizes, aspects = _plot_sizes(all_rows)
        out.append(f"<div class=plots>{_img(sizes, 'image sizes')}{_img(aspects, 'aspects')}</div>")
    out.append(f"<h2>Shards</h2><div class=plots>{_img(_plot_shards(info), 'shard sizes')}</div>")
    out.append("<table><tr><th>split</th><th>shards</th><th>examples</th><th>MB</th></tr>")
    for s, v in info["splits"].items():
        out.append(
            f"<tr><td>{e(s)}</td><td class=n>{v.get('num_shards', len(v.get('shards', [])))}</td>"
            f"<td class=n>{v['num_examples']}</td><td class=n>{v['num_bytes'] / 1e6:.1f}</td></tr>"
        )
    out.append("</table>")
    stats = info.get("statistics") or {}
    out.append("<h2>Pixel statistics</h2>")
    if stats.get("pixel_mean"):
        out.append(
            f"<p>From {stats.get('num_stats_images', '?')} images of the "
            f"{e(str(stats.get('train_split', 'train')))} split (0-255 scale).</p><table>"
            "<tr><th></th><th>R</th><th>G</th><th>B</th></tr>"
        )
        for label, key in (("mean", "pixel_mean"), ("std", "pixel_std")):
            out.append(f"<tr><th>{label}</th>")
            out += [f"<td class=n>{v:.2f}</td>" for v in stats.get(key, [])]
            out.append("</tr>")
        out.append("</table>")
    else:
        out.append("<p>Not computed (converted with --no_analyze).</p>")
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    out.append(f"<p class=muted>Written {stamp} by imgrec preview.</p></main></body></html>")
    return "\n".join(out)


def write_report(data_dir: str, out: str | None = None) -> str:
    """Write the report (default `DATA_DIR/report.html`, buckets included); returns its path."""
    data_dir = data_dir.rstrip("/")
    path = out or storage.join(data_dir, REPORT_FILE)
    storage.write_bytes_atomic(
        path, build_report(data_dir).encode("utf-8"), mime_type="text/html; charset=utf-8"
    )
    return path
