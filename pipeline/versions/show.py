"""`imgrec versions ROOT`: a versioned root's versions, which one is LATEST, their sizes and
states, and the readers holding each (their leases)."""

from __future__ import annotations

import json
import sys
import time

from core import leases, retention, schema, storage, versions

__all__ = ["main", "version_rows"]


def version_rows(root: str, now: float | None = None) -> list[dict]:
    """One dict per version under `root`, oldest first: name, state, examples, bytes, readers.

    state: "LATEST", "superseded" (older, complete), "unfinished" (no dataset_info.json: being
    written, interrupted, or being pruned), or "newer than LATEST" (complete, not published).
    """
    now = time.time() if now is None else now
    latest = versions.read_latest(root)
    names = versions.list_versions(root)
    rows = []
    for name in names:
        folder = storage.join(root, name)
        info_path = storage.join(folder, schema.DATASET_INFO)
        info = json.loads(storage.read_bytes(info_path)) if storage.exists(info_path) else None
        if name == latest:
            state = "LATEST"
        elif info is None:
            state = "unfinished"
        elif latest is None or name > latest:
            state = "newer than LATEST"
        else:
            state = "superseded"
        splits = (info or {}).get("splits") or {}
        rows.append(
            {
                "version": name,
                "state": state,
                "examples": sum(int(s.get("num_examples", 0)) for s in splits.values()),
                "bytes": sum(int(s.get("num_bytes", 0)) for s in splits.values()),
                "readers": leases.live_leases(folder, now),
            }
        )
    return rows


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def main(argv: list[str]) -> int:
    """`imgrec versions ROOT`; returns the exit status."""
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: imgrec versions ROOT   (a --versioned output root)", file=sys.stderr)
        return 2
    root = argv[0].rstrip("/")
    try:
        rows = version_rows(root)
    except (versions.VersionError, OSError) as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(
            f"imgrec: {root} holds no versions (convert with --versioned --output {root})",
            file=sys.stderr,
        )
        return 1
    now = time.time()
    print(f"{root}: {len(rows)} version(s)")
    print(f"  {'version':<19} {'state':<19} {'examples':>9} {'size':>10}  readers")
    for row in rows:
        readers = row["readers"]
        held = "-"
        if readers:
            until = max(float(r["expires_unix"]) for r in readers)
            who = ", ".join(f"{r.get('host', '?')}-{r.get('pid', '?')}" for r in readers[:3])
            more = ", ..." if len(readers) > 3 else ""
            left = retention.format_duration(max(0.0, until - now))
            held = f"{len(readers)} ({who}{more}; lease expires in {left} unless renewed)"
        size = _size(row["bytes"]) if row["state"] != "unfinished" else "-"
        print(f"  {row['version']:<19} {row['state']:<19} {row['examples']:>9} {size:>10}  {held}")
    return 0
