"""Retention of a versioned root's old versions: `--keep_versions` picks what may go, then live
reader leases (core/leases.py) and `--keep_for` (how long after it was superseded)
keep what must stay, and the prune deletes the rest; durations, and when a version was published.

A version is *superseded* when LATEST moves past it; that moment is recorded in the newer
version's `.imgrec/published.json` just before the pointer moves. Imports neither TensorFlow
nor Apache Beam at module level (the no-change rerun prunes local roots without them).
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import time

from core import leases, schema
from core.versions import (
    _VERSION_FORMAT,
    PUBLISHED,
    VERSION_MARKER,
    _join,
    is_finished,
    list_versions,
    read_latest,
)

__all__ = [
    "DEFAULT_KEEP_FOR",
    "format_duration",
    "parse_duration",
    "plan_prune",
    "prune",
    "retention_holds",
    "retention_line",
]

# `--keep_for` default: a superseded version stays a day, for readers that hold no lease (other
# tools, read-only credentials); a nightly schedule then keeps one or two extra versions.
DEFAULT_KEEP_FOR = "1d"
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")

_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str | float | int, option: str = "--keep_for") -> float:
    """Seconds in a duration like `0`, `90s`, `30m`, `12h`, `7d` or `2w` (a bare number: seconds).

    Raises:
        ValueError: not such a duration (the message names `option` and the forms).
    """
    if isinstance(text, int | float) and not isinstance(text, bool) and text >= 0:
        return float(text)
    match = _DURATION_RE.match(str(text).lower())
    if not match:
        raise ValueError(
            f"{option} must be a duration such as 0, 90s, 30m, 12h, 7d or 2w, got {text!r}"
        )
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    """A duration for people: `0s`, `45s`, `12m`, `1.5h`, `3d` (largest unit, one decimal)."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}".rstrip("0").rstrip(".") + unit
    return f"{seconds:.0f}s"


def plan_prune(older: list[str], finished: list[str], latest: str, keep: int) -> list[str]:
    """The versions `--keep_versions keep` lets go: every one of `older` (the versions older
    than `latest`) but the `keep - 1` newest finished ones; unfinished versions older than the
    oldest kept one are abandoned runs and go too. Leases and `--keep_for` are checked after."""
    if keep < 1:
        return []
    kept = sorted(finished, reverse=True)[: keep - 1]
    oldest_kept = min([latest, *kept])
    return [n for n in older if n not in kept and (n in finished or n < oldest_kept)]


def _read_optional(path: str) -> bytes | None:
    """A small file's bytes, or None when it does not exist (local: os; buckets: Beam)."""
    if "://" not in path:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
    from core import storage

    return storage.read_bytes(path) if storage.exists(path) else None


def _published_at(root: str, name: str) -> float:
    """When LATEST moved to `name`: its published.json, else (versions published before it was
    recorded) the end of its conversion, else its name's time (when its run started)."""
    data = _read_optional(_join(_join(root, name), PUBLISHED))
    if data is not None:
        try:
            return float(json.loads(data)["published_unix"])
        except (ValueError, KeyError, TypeError):
            pass
    info = _read_optional(_join(_join(root, name), schema.DATASET_INFO))
    if info is not None:
        try:
            finished = json.loads(info)["provenance"]["finished"]
            return datetime.datetime.fromisoformat(finished).timestamp()
        except (ValueError, KeyError, TypeError):
            pass
    when = datetime.datetime.strptime(name, _VERSION_FORMAT).replace(tzinfo=datetime.UTC)
    return when.timestamp()


def retention_holds(
    root: str,
    candidates: list[str],
    names: list[str],
    latest: str,
    keep_for_s: float,
    now: float | None = None,
    finished: list[str] | None = None,
) -> dict[str, str]:
    """Which of `candidates` (versions `plan_prune` let go) must stay for now, and why.

    A version stays while a reader holds a live lease on it (core/leases.py), and, when
    it was ever published, until `keep_for_s` seconds after it was superseded: after the first
    publication of a newer version up to `latest` (unfinished versions were never read).

    Args:
        root: the versioned root.
        candidates: version names to check.
        names: every version name under `root`.
        latest: the version LATEST names.
        keep_for_s: `--keep_for` in seconds.
        now: Unix time (default: now).
        finished: the complete versions among `names` (default: all of `candidates`).

    Returns:
        {name: the reason it stays}, for the candidates that stay.
    """
    now = time.time() if now is None else now
    done = set(candidates if finished is None else finished)
    newer_cache: dict[str, float] = {}
    held: dict[str, str] = {}
    for name in candidates:
        reason = _lease_hold(root, name, now)
        if reason is None and name in done:
            successors = [n for n in names if name < n <= latest]
            reason = _keep_for_hold(root, successors, newer_cache, now, keep_for_s)
        if reason is not None:
            held[name] = reason
    return held


def prune(
    root: str,
    keep: int,
    latest: str,
    keep_for_s: float = 0.0,
    now: float | None = None,
) -> list[str]:
    """Delete old versions, keeping `latest` and the `keep - 1` newest complete ones before it,
    and every version a reader holds a lease on or `keep_for_s` has not yet let go.

    Never deleted: the version LATEST names, and any version newer than it (a run still
    writing). Unfinished versions older than the oldest kept one are abandoned runs and go too.
    A version kept for a lease or `--keep_for` goes on a later run.

    Returns:
        The names deleted, oldest first.
    """
    if keep < 1:
        return []
    names = list_versions(root)
    older = [n for n in names if n < latest]
    finished = [n for n in older if is_finished(root, n)]
    doomed = plan_prune(older, finished, latest, keep)
    held = retention_holds(root, doomed, names, latest, keep_for_s, now, finished)
    for name in doomed:
        if name not in held:
            _delete_version(_join(root, name))
    return [n for n in doomed if n not in held]


def _delete_version(folder: str) -> None:
    """Remove a version folder: dataset_info.json first (it stops counting as complete), its
    version.json last (until then a later prune still finds and finishes the job)."""
    from core import storage

    if "://" not in folder:
        info = _join(folder, schema.DATASET_INFO)
        storage.delete_quietly([info])
        shutil.rmtree(folder, ignore_errors=True)
        return
    found = storage.match_under(folder, "**")
    paths = sorted(m.path for m in found)
    first = [p for p in paths if p.endswith("/" + schema.DATASET_INFO)]
    last = [p for p in paths if p.endswith("/" + VERSION_MARKER)]
    middle = [p for p in paths if p not in first and p not in last]
    storage.delete_quietly(first + middle + last)


def _lease_hold(root: str, name: str, now: float) -> str | None:
    """Why version `name` stays for its readers' leases, or None when no live lease holds it."""
    try:
        live = leases.live_leases(_join(root, name), now)
    except OSError as e:  # unknown is not "none": keep it, say why
        return f"its leases cannot be read ({str(e)[:200]})"
    if not live:
        return None
    until = max(float(x["expires_unix"]) for x in live)
    who = ", ".join(f"{x.get('host', '?')}-{x.get('pid', '?')}" for x in live[:3])
    return (
        f"held by {len(live)} reader(s) ({who}{', ...' if len(live) > 3 else ''}; "
        f"lease renewed until {_utc(until)} unless the reader exits)"
    )


def _keep_for_hold(
    root: str, successors: list[str], newer_cache: dict[str, float], now: float, keep_for_s: float
) -> str | None:
    """Why a version superseded by the first of `successors` stays for --keep_for, or None.

    `newer_cache` memoizes each successor's publication time across candidates.
    """
    if keep_for_s <= 0 or not successors:
        return None
    for n in successors:
        if n not in newer_cache:
            newer_cache[n] = _published_at(root, n)
    superseded = min(newer_cache[n] for n in successors)
    if now < superseded + keep_for_s:
        return (
            f"superseded {format_duration(max(0.0, now - superseded))} ago; --keep_for "
            f"{format_duration(keep_for_s)} keeps it until {_utc(superseded + keep_for_s)}"
        )
    return None


def _utc(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def retention_line(
    root: str,
    keep: int,
    keep_for_s: float,
    listing: tuple[list[str], str, list[str]] | None = None,
) -> str | None:
    """After a versioned run with --keep_versions: the old versions still kept beyond `keep`,
    and why (None when none is).

    Args:
        root: the versioned root.
        keep: --keep_versions.
        keep_for_s: --keep_for in seconds.
        listing: (every version name, the one LATEST names, the complete ones) when the caller
            has them (the no-change rerun lists locally without Beam); default: listed here.
    """
    if keep < 1:
        return None
    if listing is None:
        latest = read_latest(root)
        if latest is None:
            return None
        names = list_versions(root)
        finished = [n for n in names if n < latest and is_finished(root, n)]
    else:
        names, latest, finished = listing
    older = [n for n in names if n < latest]
    finished = [n for n in finished if n < latest]
    doomed = plan_prune(older, finished, latest, keep)
    held = retention_holds(root, doomed, names, latest, keep_for_s, None, finished)
    if not held:
        return None
    return "\n".join(f"  kept        {n}: {why}; a later run prunes it" for n, why in held.items())
