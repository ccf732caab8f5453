"""What changed between two versions of a dataset: per-file facts in, changes.json out.

A version's per-file facts come from three files it holds: files.jsonl.gz (every file planned
for a shard: path, sha256 of the source bytes, split, label, shard), rejected.jsonl and
duplicates.jsonl. Together they name every listed file once (a file rejected while its shard
was written appears in the index and in rejected.jsonl; rejected wins).
"""

from __future__ import annotations

import collections
import gzip
import json

from core import schema, versions

__all__ = [
    "CHANGES_SCHEMA_VERSION",
    "MAX_LISTED",
    "index_bytes",
    "load_file_facts",
    "facts_from_files",
    "compute_changes",
    "headline",
]

CHANGES_SCHEMA_VERSION = 1
# Paths listed per category in changes.json. The counts are always exact; past this many the
# list is cut (a first version of ImageNet would otherwise repeat 1.28 M paths that the version's
# files.jsonl.gz already holds). 10,000 paths keep changes.json near 1 MB.
MAX_LISTED = 10_000

_STATUS_WRITTEN, _STATUS_REJECTED, _STATUS_DUPLICATE = "written", "rejected", "duplicate"


def index_bytes(rows: list[dict]) -> bytes:
    """files.jsonl.gz content: rows sorted by path, gzip with no timestamp (same rows, same
    bytes)."""
    text = "".join(
        json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n"
        for r in sorted(rows, key=lambda r: r["path"])
    )
    # Level 6: about half the CPU of gzip's default 9, for barely more bytes.
    return gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)


def _jsonl(data: bytes) -> list[dict]:
    text = data.decode("utf-8").strip()
    try:
        # As one JSON array (a JSON line holds no raw newline): cheaper than a json.loads per
        # line, and every versioned run reads the index twice.
        return json.loads("[" + text.replace("\n", ",") + "]")
    except json.JSONDecodeError:  # blank lines between rows (or a damaged file: raised below)
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_file_facts(version_dir: str) -> dict[str, dict] | None:
    """{path: {"status", "sha256", "split", "label", "reason"}} of one version, or None when the
    version has no file index (it was not written with --versioned)."""
    from core import storage

    index_path = storage.join(version_dir, versions.FILE_INDEX)
    if not storage.exists(index_path):
        return None

    def optional(name: str) -> bytes | None:
        path = storage.join(version_dir, name)
        return storage.read_bytes(path) if storage.exists(path) else None

    return facts_from_files(
        gzip.decompress(storage.read_bytes(index_path)),
        optional(schema.REJECTED),
        optional(schema.DUPLICATES),
    )


def facts_from_files(
    index: bytes, rejected: bytes | None, duplicates: bytes | None
) -> dict[str, dict]:
    """`load_file_facts` from the three files' bytes (the index already decompressed; None for
    a file that does not exist)."""
    facts: dict[str, dict] = {}
    for row in _jsonl(index):
        facts[row["path"]] = {
            "status": _STATUS_WRITTEN,
            "sha256": row["sha256"],
            "split": row["split"],
            "label": row["label"],
        }
    # Rejected last: a file rejected while its shard was written is in the index too.
    for data, status in ((duplicates, _STATUS_DUPLICATE), (rejected, _STATUS_REJECTED)):
        if data is None:
            continue
        for row in _jsonl(data):
            fact = facts.setdefault(row["path"], {})
            fact["status"] = status
            if status == _STATUS_REJECTED:
                fact["reason"] = row.get("reason", "")
            elif row.get("sha256"):
                fact["sha256"] = row["sha256"]
    return facts


def _counts(facts: dict[str, dict]) -> tuple[collections.Counter, collections.Counter]:
    splits, classes = collections.Counter(), collections.Counter()
    for fact in facts.values():
        if fact["status"] == _STATUS_WRITTEN:
            splits[fact["split"]] += 1
            classes[fact["label"]] += 1
    return splits, classes


def _deltas(before: collections.Counter, after: collections.Counter) -> dict:
    return {
        k: {"previous": before[k], "current": after[k], "delta": after[k] - before[k]}
        for k in sorted(set(before) | set(after))
    }


def _listed(items: list) -> dict:
    return {"count": len(items), "items": items[:MAX_LISTED], "truncated": len(items) > MAX_LISTED}


def compute_changes(
    previous: dict[str, dict] | None,
    current: dict[str, dict],
    *,
    version: str,
    previous_version: str | None,
) -> dict:
    """changes.json of `current` against `previous` (None: a first version, all "added").

    Categories (a file is keyed by its path):
      added / removed: listed now and not before, or the reverse;
      changed: written in both, source sha256 differs;
      newly_rejected / no_longer_rejected: listed in both, rejected in one only;
      relabeled: written in both with different labels.
    Count deltas cover written files per split and per class.
    """
    before = previous or {}
    added = sorted(set(current) - set(before))
    removed = sorted(set(before) - set(current))
    changed, newly_rejected, no_longer_rejected, relabeled = [], [], [], []
    for path in sorted(set(current) & set(before)):
        now, then = current[path], before[path]
        was_rejected = then["status"] == _STATUS_REJECTED
        is_rejected = now["status"] == _STATUS_REJECTED
        if is_rejected and not was_rejected:
            newly_rejected.append({"path": path, "reason": now.get("reason", "")})
        elif was_rejected and not is_rejected:
            no_longer_rejected.append({"path": path, "status": now["status"]})
        if now["status"] == then["status"] == _STATUS_WRITTEN:
            if now["sha256"] != then["sha256"]:
                changed.append(path)
            if now["label"] != then["label"]:
                relabeled.append({"path": path, "from": then["label"], "to": now["label"]})
    splits_before, classes_before = _counts(before)
    splits_now, classes_now = _counts(current)
    changes = {
        "schema_version": CHANGES_SCHEMA_VERSION,
        "version": version,
        "previous_version": previous_version,
        "previous_index": previous is not None,
        "added": _listed(added),
        "removed": _listed(removed),
        "changed": _listed(changed),
        "newly_rejected": _listed(newly_rejected),
        "no_longer_rejected": _listed(no_longer_rejected),
        "relabeled": _listed(relabeled),
        "splits": _deltas(splits_before, splits_now),
        "classes": _deltas(classes_before, classes_now),
    }
    changes["headline"] = headline(changes)
    return changes


def headline(changes: dict) -> str:
    """One line: "+12 added, -3 removed, 2 changed" (zero categories left out), or "no change"."""
    parts = []
    for key, text in (
        ("added", "+{} added"),
        ("removed", "-{} removed"),
        ("changed", "{} changed"),
        ("relabeled", "{} relabeled"),
        ("newly_rejected", "{} newly rejected"),
        ("no_longer_rejected", "{} no longer rejected"),
    ):
        n = changes[key]["count"]
        if n:
            parts.append(text.format(n))
    return ", ".join(parts) if parts else "no change"
