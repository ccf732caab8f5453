"""Versioned datasets: version names, the LATEST pointer, resolving a root, claiming, publishing.

Layout of a versioned `--output ROOT`:

    ROOT/LATEST                    one line: the name of the newest complete version
    ROOT/v20261201T030000Z/        one conversion (the usual output layout, plus the files below)
        version.json               written when the run starts: marks the folder as a version
        files.jsonl.gz             per-file index (path, sha256, split, label, shard[, phash])
        changes.json               what changed against the version LATEST named before it
        .imgrec/published.json     when LATEST moved to this version (so: when the one before
                                   it was superseded; `--keep_for` counts from there)
        .imgrec/leases/*.json      running readers' leases (core/leases.py)

A reader resolves ROOT through LATEST once, at start, and keeps reading that version's folder;
a new version is written beside it and LATEST changes only after the new one is complete.
Pruning old versions is core/retention.py's, on top of this module.

This module must stay importable without Apache Beam (the reader resolves roots with it): the
Beam-side helpers import `core.storage` inside the functions.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import posixpath
import re
import time
from collections.abc import Callable, Iterable

from core import schema

__all__ = [
    "LATEST",
    "VERSION_MARKER",
    "FILE_INDEX",
    "CHANGES",
    "VERSION_RE",
    "VersionError",
    "version_name",
    "next_version_name",
    "is_version_name",
    "split_version_dir",
    "parse_pointer",
    "resolve_dataset_dir",
    "read_latest",
    "list_versions",
    "is_finished",
    "choose_version",
    "claim_version",
    "write_pointer",
    "publish",
    "published_record",
    "PUBLISHED",
    "reuse_source",
]

LATEST = "LATEST"
VERSION_MARKER = "version.json"
FILE_INDEX = "files.jsonl.gz"
CHANGES = "changes.json"
# UTC, second resolution, fixed width: names sort as their times do (plain string order), on
# every store's listing, with no parsing.
_VERSION_FORMAT = "v%Y%m%dT%H%M%SZ"
VERSION_RE = re.compile(r"^v\d{8}T\d{6}Z$")
PUBLISHED = ".imgrec/published.json"


class VersionError(ValueError):
    """A versioned root or its LATEST pointer is not usable; the message names it and the fix."""


def version_name(when: datetime.datetime) -> str:
    """The version name of a UTC time, e.g. `v20261201T030000Z`."""
    return when.astimezone(datetime.UTC).strftime(_VERSION_FORMAT)


def is_version_name(name: str) -> bool:
    """Whether `name` has the version form `vYYYYMMDDTHHMMSSZ`."""
    return bool(VERSION_RE.match(name))


def next_version_name(existing: Iterable[str | None], now: datetime.datetime) -> str:
    """A name for a new version: `now`, or one second past the newest existing version.

    The new name sorts after every existing one even when two runs start in the same second or
    this machine's clock is behind the one that wrote the newest version.
    """
    names = sorted(n for n in existing if n and is_version_name(n))
    when = now.astimezone(datetime.UTC).replace(microsecond=0)
    if names:
        newest = datetime.datetime.strptime(names[-1], _VERSION_FORMAT).replace(tzinfo=datetime.UTC)
        when = max(when, newest + datetime.timedelta(seconds=1))
    return version_name(when)


def _join(base: str, name: str) -> str:
    return posixpath.join(base.rstrip("/"), name) if "://" in base else _local_join(base, name)


def _local_join(base: str, name: str) -> str:
    return os.path.join(base, name)


def split_version_dir(path: str) -> tuple[str, str]:
    """`ROOT/vNAME` -> (ROOT, vNAME).

    Raises:
        VersionError: the last path component is not a version name.
    """
    path = path.rstrip("/")
    head, _, name = path.rpartition("/")
    if not is_version_name(name) or not head:
        raise VersionError(f"{path}: not a version directory (ROOT/vYYYYMMDDTHHMMSSZ)")
    return head, name


def parse_pointer(text: str, where: str) -> str:
    """The version name a LATEST pointer holds.

    Raises:
        VersionError: the content is not one version name (a torn or foreign file).
    """
    name = text.strip()
    if not is_version_name(name):
        raise VersionError(
            f"{where}: expected one version name like v20261201T030000Z, found {text[:80]!r}; "
            "point it at a complete version folder under the root, or pass that folder instead"
        )
    return name


def _read_text(path: str, fs: str) -> str | None:
    """The file's text, or None when it does not exist. fs: "gfile" (TensorFlow) or "beam"."""
    if fs == "gfile":
        import tensorflow as tf

        try:
            if not tf.io.gfile.exists(path):
                return None
        except tf.errors.UnimplementedError:
            # A scheme TensorFlow has no filesystem for (s3:// in TF 2.21): only Beam reads it.
            return _read_text(path, "beam")
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    if fs == "beam":
        from core import storage

        if not storage.exists(path):
            return None
        return storage.read_bytes(path).decode("utf-8", "replace")
    raise ValueError(f"fs must be 'gfile' or 'beam', got {fs!r}")


def resolve_dataset_dir(
    path: str, fs: str = "gfile", read_text: Callable[[str], str | None] | None = None
) -> str:
    """The dataset folder `path` names: a versioned root resolves through its LATEST pointer.

    A version folder (`ROOT/v...`) and an unversioned dataset are returned as they are. The
    pointer is read once: callers keep the folder they get, so a version published later does
    not change what an open reader reads.

    Args:
        path: a dataset folder, a versioned root, or a version folder (local, gs://, and with
            fs="beam" any store Beam FileSystems reads, such as s3://).
        fs: "gfile" reads through TensorFlow (the Beam-free reader; a scheme TensorFlow
            cannot read, such as s3://, falls back to Beam), "beam" through Beam FileSystems
            (`verify`, `inspect`, the converter).
        read_text: reads the pointer instead of `fs`: a file's text, or None when it does not
            exist (the reader passes its own store, e.g. its boto3 client for s3://).

    Returns:
        The folder holding dataset_info.json.

    Raises:
        VersionError: LATEST exists but does not hold a version name.
    """
    path = path.rstrip("/") or path
    if is_version_name(path.rpartition("/")[2]):
        return path  # an explicit version: nothing to read
    pointer = _join(path, LATEST)
    text = read_text(pointer) if read_text is not None else _read_text(pointer, fs)
    if text is None:
        return path
    return _join(path, parse_pointer(text, pointer))


# -- Beam side: the converter's helpers (storage imported lazily) ------------------------------


def read_latest(root: str) -> str | None:
    """The version LATEST names under `root`, or None when there is none yet."""
    pointer = _join(root, LATEST)
    text = _read_text(pointer, "beam")
    return None if text is None else parse_pointer(text, pointer)


def list_versions(root: str) -> list[str]:
    """Names of the versions under `root` (those holding a version.json), oldest first."""
    from core import storage

    try:
        found = storage.match_under(root, "v*", VERSION_MARKER)
    except (OSError, ValueError) as e:
        # Some filesystems raise for an empty match; anything else (an outage) must surface:
        # an empty answer would make a prune keep everything and a resume start afresh.
        detail = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        if "No files found" in detail or "matched no files" in detail:
            return []
        raise VersionError(
            f"--output {root}: cannot list its versions ({detail}); check the path, the "
            "bucket and the credentials"
        ) from e
    names = {m.path.rstrip("/").split("/")[-2] for m in found}
    return sorted(n for n in names if is_version_name(n))


def is_finished(root: str, name: str) -> bool:
    """Whether the version's dataset_info.json exists (its conversion completed)."""
    from core import storage

    return storage.exists(_join(_join(root, name), schema.DATASET_INFO))


def choose_version(
    root: str, resume: bool, now: datetime.datetime | None = None
) -> tuple[str, bool]:
    """The version a run writes: (name, continuing an unfinished one).

    With `resume`, the newest version newer than LATEST (an interrupted run that never
    published) is continued; otherwise, or when there is none, a new name is chosen.

    Raises:
        VersionError: `root` holds an unversioned dataset.
    """
    from core import storage

    if storage.exists(_join(root, schema.DATASET_INFO)):
        raise VersionError(
            f"--output {root} holds an unversioned dataset ({schema.DATASET_INFO}); --versioned "
            "writes versions under a root of their own: choose another --output"
        )
    latest = read_latest(root)
    names = list_versions(root)
    unpublished = [n for n in names if latest is None or n > latest]
    if resume and unpublished:
        return unpublished[-1], True
    now = now or datetime.datetime.now(datetime.UTC)
    return next_version_name([*names, latest], now), False


def claim_version(root: str, name: str, record: dict) -> str:
    """Create the version's folder and version.json; returns the name claimed.

    Locally the folder is made with an exclusive mkdir, so two runs starting in the same second
    get different names. On a bucket an existing version.json moves the name on; two runs that
    claim the same name at the same instant are not detected there (schedule runs so they do
    not overlap: see docs/scheduling.md).
    """
    from core import storage

    for _ in range(1000):
        folder = _join(root, name)
        if "://" not in root:
            os.makedirs(root, exist_ok=True)
            try:
                os.mkdir(folder)
            except FileExistsError:
                name = _bump(name)
                continue
        elif storage.exists(_join(folder, VERSION_MARKER)):
            name = _bump(name)
            continue
        body = {"version": name, **record}
        storage.write_bytes_atomic(
            _join(folder, VERSION_MARKER),
            json.dumps(body, indent=2, sort_keys=True).encode("utf-8"),
            mime_type="application/json",
        )
        return name
    raise VersionError(f"--output {root}: could not claim a new version name near {name}")


def _bump(name: str) -> str:
    when = datetime.datetime.strptime(name, _VERSION_FORMAT).replace(tzinfo=datetime.UTC)
    return version_name(when + datetime.timedelta(seconds=1))


def write_pointer(root: str, name: str) -> None:
    """Write ROOT/LATEST = name so that readers see the old or the new name, never a mix.

    Locally: a temporary sibling renamed over LATEST (atomic). On a bucket: one object write;
    an object becomes visible only once its upload completes, and a copy-then-delete rename
    would add a second request that can fail halfway.
    """
    from apache_beam.io.filesystems import FileSystems

    from core import storage

    path = _join(root, LATEST)
    data = (name + "\n").encode("ascii")
    if "://" not in root:
        storage.write_bytes_atomic(path, data, mime_type="text/plain")
        return

    def _put() -> None:
        with FileSystems.create(path, mime_type="text/plain", compression_type="uncompressed") as f:
            f.write(data)

    storage.with_retries(_put, path)


def published_record(now: float | None = None) -> bytes:
    """The bytes of `.imgrec/published.json`: when LATEST moved to the version holding it."""
    when = time.time() if now is None else now
    stamp = datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat()
    return json.dumps({"published_unix": when, "published": stamp}).encode("utf-8")


def publish(root: str, name: str) -> tuple[bool, str | None]:
    """Point LATEST at `name` unless it already names `name` or a newer version.

    Returns:
        (whether LATEST now names `name` because of this call, what it named before).
    """
    from core import storage

    previous = read_latest(root)
    if previous is not None and previous >= name:
        return False, previous
    # Written just before the pointer moves: `--keep_for` counts the superseded version's
    # time from here (off by the pointer write's duration at most).
    storage.write_bytes_atomic(
        _join(_join(root, name), PUBLISHED),
        published_record(),
        mime_type="application/json",
    )
    write_pointer(root, name)
    return True, previous


def plan_run(config):
    """A versioned run's config: `output` becomes the version folder to write (new, or the
    unfinished one --resume continues) and `resume` is set when continuing.

    Args:
        config: a ConvertConfig with `versioned` set; its `output` is the root.

    Returns:
        (the config to run, a line saying which version the run writes, with `{name}` left
        to fill in once `claim_run` settled the name).
    """
    root = config.output
    name, continuing = choose_version(root, config.resume)
    folder = _join(root, name)
    if continuing:
        note = f"imgrec: continuing unfinished version {{name}} of {root} (--resume)"
    else:
        note = f"imgrec: writing new version {{name}} of {root}"
        stale = [n for n in list_versions(root) if n > (read_latest(root) or "")]
        if stale:
            note += f" ({stale[-1]} is unfinished; pass --resume to continue it instead)"
    previous = "" if config.full else reuse_source(root, name)
    if previous:
        note += f"; reusing unchanged files and shards of {previous} (--full: reuse nothing)"
    return (
        dataclasses.replace(
            config,
            output=folder,
            resume=config.resume or continuing,
            previous_version=_join(root, previous) if previous else "",
        ),
        note,
    )


def reuse_source(root: str, name: str) -> str | None:
    """The version an incremental run writing `name` reuses: the one LATEST names, when it is
    complete and older than `name` (None otherwise: the run converts from scratch).

    A version LATEST does not name is never a source: it may be unfinished, or one a newer run
    superseded; LATEST names only versions that were checked against their own counts.
    """
    latest = read_latest(root)
    if latest is None or latest >= name or not is_finished(root, latest):
        return None
    return latest


def claim_run(config, record: dict):
    """Claim the version folder `plan_run` chose (moving to the next free name on a clash).

    Returns:
        The config to run (its `output` may name a later second than planned).
    """
    root, name = split_version_dir(config.output)
    if config.resume and _exists(_join(config.output, VERSION_MARKER)):
        return config  # continuing a version an interrupted run claimed
    claimed = claim_version(root, name, record)
    return dataclasses.replace(config, output=_join(root, claimed))


def _exists(path: str) -> bool:
    from core import storage

    return storage.exists(path)


def publication_line(folder: str) -> str:
    """After a versioned run: whether LATEST names `folder`'s version, and its changes headline."""
    from core import storage

    root, name = split_version_dir(folder)
    latest = read_latest(root)
    change_path = _join(folder, CHANGES)
    head = "?"
    if storage.exists(change_path):
        change = json.loads(storage.read_bytes(change_path))
        base = change.get("previous_version")
        head = f"{change['headline']} " + (f"(against {base})" if base else "(first version)")
    if latest == name:
        return f"  published   {name} is LATEST of {root}; changes: {head}"
    return f"  NOT published: LATEST of {root} names {latest}, not {name}; changes: {head}"


def reuse_line(config, result) -> str | None:
    """After a versioned run: what it took from the previous version (from the job's counters),
    or None for a run that had no previous version to reuse."""
    if config.full:
        return "  reused      nothing (--full: converted from scratch)"
    if not config.previous_version:
        return None
    from apache_beam.metrics.metric import MetricsFilter

    counts: dict[str, int] = {}
    try:
        found = result.metrics().query(MetricsFilter().with_namespace("imgrec"))["counters"]
    except (AttributeError, NotImplementedError, KeyError):  # a runner without metrics
        return None
    for c in found:
        value = c.committed if c.committed is not None else c.attempted
        counts[c.key.metric.name] = counts.get(c.key.metric.name, 0) + (value or 0)
    previous = config.previous_version.rstrip("/").rpartition("/")[2]
    return (
        f"  reused      {counts.get('inspections_reused', 0):>7}   unchanged files not read "
        f"again, {counts.get('shards_copied', 0)} shards copied (from {previous})"
    )
