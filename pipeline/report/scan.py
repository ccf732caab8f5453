"""The TF-free reading behind report.html and `imgrec inspect`: TFRecords, Examples, the scan.

A small TFRecord/Example parser (no TensorFlow: a report or an `inspect` must start in well
under a second), the bounded scan of a dataset's records, and class counts (exact from
dataset_info.json when the writer recorded them, else from the scan).
"""

from __future__ import annotations

import collections
import struct

from apache_beam.io.filesystems import FileSystems

from core import schema, storage
from core.names import printable

__all__ = [
    "OBJECTS",
    "SCAN_BYTES",
    "SCAN_KEYS",
    "class_histogram_lines",
    "exact_label_counts",
    "label_counts",
    "parse_example",
    "parse_example_lists",
    "read_records",
    "scan_dataset",
]

# Bytes of TFRecords a report reads at most (the whole of a smaller dataset): the scan feeds only
# the size plots, for which about a thousand photos are plenty; class counts come exact from
# dataset_info.json.
SCAN_BYTES = 32 * 2**20

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
    return {name: values[0] if values else None for name, values in _features(record, keys)}


def parse_example_lists(record: bytes, keys: set[str] | None = None) -> dict:
    """A serialized tf.train.Example -> {key: [every value]}, for `keys` only (an object
    feature holds one value per object)."""
    return dict(_features(record, keys))


def _features(record: bytes, keys: set[str] | None):
    """(key, its values) of each feature of a serialized tf.train.Example, for `keys` only."""
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
            yield name, _feature_values(record, *value)


# --- Reading the dataset ----------------------------------------------------------------------

SCAN_KEYS = {
    schema.LABEL,
    schema.LABEL_TEXT,
    schema.HEIGHT,
    schema.WIDTH,
    schema.FORMAT,
    schema.FILENAME,
    schema.TRANSCODE_REASON,
    schema.TRANSCODED_FROM,
}
# A scan row's count of objects (annotated datasets only: the length of its class labels).
OBJECTS = "objects"


def _scan_row(record: bytes, count_objects: bool) -> dict:
    """A record's SCAN_KEYS fields (their first values), and its OBJECTS when `count_objects`."""
    if not count_objects:
        return parse_example(record, SCAN_KEYS)
    fields = parse_example_lists(record, SCAN_KEYS | {schema.OBJECT_LABEL})
    labels = fields.pop(schema.OBJECT_LABEL, [])
    return {key: values[0] if values else None for key, values in fields.items()} | {
        OBJECTS: len(labels)
    }


def scan_dataset(data_dir: str, info: dict, max_bytes: int = SCAN_BYTES) -> dict:
    """Per-record header fields of the dataset (all records when it fits in `max_bytes`); an
    annotated dataset's rows also count their OBJECTS.

    Returns:
        {"exact": bool, "records": {split: [fields dict]}, "read_bytes": N}
    """
    total = sum(s.get("num_bytes", 0) for s in info["splits"].values()) or 1
    exact = total <= max_bytes
    records, read_bytes = {}, 0
    count_objects = "annotations" in info
    for split, s in info["splits"].items():
        rows = []
        # Each split gets its share of the budget, spread over its shards.
        shards = [sh for sh in s.get("shards", []) if sh.get("num_examples")]
        budget = None if exact else max(1, int(max_bytes * s.get("num_bytes", 0) / total))
        per_shard = None if budget is None else max(1, budget // max(1, len(shards)))
        for sh in shards:
            for record in read_records(storage.join(data_dir, sh["file"]), per_shard):
                read_bytes += len(record)
                rows.append(_scan_row(record, count_objects))
        records[split] = rows
    return {"exact": exact, "records": records, "read_bytes": read_bytes}


def exact_label_counts(info: dict) -> dict[str, collections.Counter] | None:
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


def label_counts(info: dict, scan: dict) -> dict[str, collections.Counter]:
    exact = exact_label_counts(info)
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
    counts = exact_label_counts(info)
    sampled = False
    if counts is None:  # a dataset written before the writer counted classes
        scan = scan_dataset(data_dir, info)
        counts, sampled = label_counts(info, scan), not scan["exact"]
    names = list(info.get("label_names", []))
    names += sorted({k for c in counts.values() for k in c} - set(names))
    totals = {n: sum(c[n] for c in counts.values()) for n in names}
    title = "  classes" + ("    (from a sample of the records)" if sampled else "")
    return [title, *bar_lines(names, totals, counts, width)]


def bar_lines(names: list[str], totals: dict, counts: dict, width: int) -> list[str]:
    """One terminal bar per name (its total), with its count per split: `imgrec inspect`'s
    classes and object classes."""
    top = max(totals.values(), default=0) or 1
    shown = {n: printable(n) for n in names}  # a label is a folder name: newlines, ESC, ...
    name_w = min(24, max([len(n) for n in shown.values()] or [1]))
    lines = []
    for n in names:
        bar = "█" * max(1 if totals[n] else 0, round(width * totals[n] / top))
        per_split = ", ".join(f"{printable(s)} {c[n]}" for s, c in counts.items())
        lines.append(
            f"    {shown[n][:name_w]:<{name_w}} {totals[n]:>7} {bar:<{width}}  {per_split}"
        )
    return lines
