"""Version leases: a running reader's record under the version it reads, so that retention
(`--keep_versions`) never deletes a version in use.

A reader that resolved a versioned root to `ROOT/vNAME` writes

    ROOT/vNAME/.imgrec/leases/<host>-<pid>-<random>.json   {"expires_unix": ..., ...}

renews it in a background thread every third of its time to live, and removes it when the
last dataset built on it is garbage-collected (a tf.data iterator keeps its dataset alive) or
the process exits. A process killed with SIGKILL cannot remove it: the lease then stops counting
once `expires_unix` is past. A prune skips every version holding a live lease and deletes it on
a later run. Clocks of readers and converters are compared through `expires_unix`, so keep them
within a fraction of the time to live of each other (NTP does).

Imports neither TensorFlow nor Apache Beam at module level: the reader writes leases through its
own store (core/stores.py), the converter reads them locally with os and on buckets
through core.storage, imported only then.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import os
import posixpath
import secrets
import socket
import threading
import time
import weakref
from typing import Protocol

__all__ = [
    "DEFAULT_TTL_S",
    "LEASE_FOLDER",
    "Lease",
    "attach",
    "hold",
    "is_live",
    "live_leases",
    "parse_lease",
    "release_all",
    "release_unused",
]

_log = logging.getLogger(__name__)

# Inside a version folder: bookkeeping lives under `.imgrec/` (the rerun record, too), which
# readers never list as shards and the no-change rerun does not copy for this subfolder.
LEASE_FOLDER = ".imgrec/leases"
# How long a lease counts after its last renewal (a killed reader's version stays held this
# long): far longer than a renewal write takes, short next to a nightly schedule.
DEFAULT_TTL_S = 600.0
# Renewals per time to live: two missed in a row (a stalled store, a paused VM) still hold it.
_RENEWALS_PER_TTL = 3
_FORMAT = 1


class LeaseStore(Protocol):
    """What writing a lease needs from a store (core.stores.Store has both)."""

    def write_bytes(self, uri: str, data: bytes) -> None: ...

    def delete(self, uri: str) -> None: ...


def _join(base: str, *parts: str) -> str:
    if "://" in base:
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


def lease_folder(version_dir: str) -> str:
    """`version_dir/.imgrec/leases`."""
    return _join(version_dir, *LEASE_FOLDER.split("/"))


@dataclasses.dataclass
class Lease:
    """One lease this process holds on one version."""

    version_dir: str
    path: str
    store: LeaseStore
    ttl_s: float
    acquired: float
    holders: int = 0  # live datasets of this process reading this version (see attach)
    failed: bool = False  # a write failed (said once on the log)

    def body(self, now: float) -> bytes:
        return json.dumps(
            {
                "format": _FORMAT,
                "version": self.version_dir.rstrip("/").rpartition("/")[2],
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "acquired_unix": self.acquired,
                "renewed_unix": now,
                "expires_unix": now + self.ttl_s,
                "ttl_s": self.ttl_s,
            },
            sort_keys=True,
        ).encode("utf-8")

    def write(self) -> bool:
        """(Re)write the lease with a fresh expiry; False (said once) when the store refuses."""
        try:
            self.store.write_bytes(self.path, self.body(time.time()))
        except Exception as e:  # noqa: BLE001 - any store's refusal: said once, reading goes on
            if not self.failed:
                self.failed = True
                _log.warning(
                    "imgrec reader: cannot write the lease %s (%s: %s); reading %s goes on, "
                    "but --keep_versions may prune this version under the job unless --keep_for "
                    "covers its run time: give the reader write access to %s (docs/scheduling.md)",
                    self.path,
                    type(e).__name__,
                    str(e).splitlines()[0][:200] if str(e) else "",
                    self.version_dir,
                    lease_folder(self.version_dir),
                )
            return False
        if self.failed:
            _log.info("imgrec reader: lease %s written again", self.path)
        self.failed = False
        return True

    def remove(self) -> None:
        try:
            self.store.delete(self.path)
        except Exception as e:  # noqa: BLE001 - at exit: the lease expires by itself anyway
            _log.debug("could not remove lease %s: %s", self.path, e)


class _Registry:
    """This process's leases, their renewal thread, and their removal at exit."""

    def __init__(self):
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        atexit.register(self.release_all)

    def hold(self, version_dir: str, store: LeaseStore, ttl_s: float) -> Lease:
        with self._lock:
            if os.getpid() != self._pid:  # a forked child: the parent's leases are not its own
                self._leases, self._thread, self._pid = {}, None, os.getpid()
            lease = self._leases.get(version_dir)
            if lease is not None:
                return lease
            name = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}.json"
            lease = Lease(
                version_dir=version_dir,
                path=_join(lease_folder(version_dir), name),
                store=store,
                ttl_s=float(ttl_s),
                acquired=time.time(),
            )
            self._leases[version_dir] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._renew_forever, name="imgrec-lease-renewal", daemon=True
                )
                self._thread.start()
        lease.write()
        self._wake.set()  # a shorter time to live than the others': renew on its schedule
        return lease

    def attach(self, lease: Lease, dataset: object) -> None:
        with self._lock:
            lease.holders += 1
        weakref.finalize(dataset, self._detach, lease)

    def _detach(self, lease: Lease) -> None:
        """A dataset holding `lease` is gone; the last one removes it (and stops renewing it)."""
        with self._lock:
            lease.holders -= 1
            if lease.holders > 0 or self._leases.get(lease.version_dir) is not lease:
                return
            del self._leases[lease.version_dir]
        if os.getpid() == self._pid:
            lease.remove()

    def release_unused(self, lease: Lease) -> None:
        """Drop a lease no dataset was attached to (the reader failed before building one)."""
        with self._lock:
            if lease.holders > 0 or self._leases.get(lease.version_dir) is not lease:
                return
            del self._leases[lease.version_dir]
        lease.remove()

    def _renew_forever(self) -> None:
        while True:
            with self._lock:
                leases = list(self._leases.values())
            period = min((x.ttl_s for x in leases), default=DEFAULT_TTL_S) / _RENEWALS_PER_TTL
            self._wake.wait(max(0.05, period))
            if self._wake.is_set():
                self._wake.clear()
                continue
            for lease in leases:
                with self._lock:
                    current = self._leases.get(lease.version_dir) is lease
                if current:
                    lease.write()

    def release_all(self) -> None:
        if os.getpid() != self._pid:
            return
        with self._lock:
            leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            lease.remove()


_REGISTRY = _Registry()


def hold(version_dir: str, store: LeaseStore, ttl_s: float | None = None) -> Lease:
    """Write (or reuse) this process's lease on `version_dir` and renew it in the background.

    It lasts while a dataset `attach`ed to it lives, and at most until the process exits; call
    `release_unused` when no dataset came of it. A store that refuses the write is said once on
    the log; the caller goes on reading. `ttl_s` None: `DEFAULT_TTL_S` as it is at this call.
    """
    return _REGISTRY.hold(version_dir, store, DEFAULT_TTL_S if ttl_s is None else ttl_s)


def attach(lease: Lease, dataset: object) -> None:
    """Keep `lease` while `dataset` lives (a tf.data.Dataset lives as long as its iterators)."""
    _REGISTRY.attach(lease, dataset)


def release_unused(lease: Lease) -> None:
    """Remove `lease` now unless a dataset is attached to it."""
    _REGISTRY.release_unused(lease)


def release_all() -> None:
    """Remove this process's leases now (also done at exit)."""
    _REGISTRY.release_all()


def parse_lease(data: bytes) -> dict | None:
    """A lease's fields, or None when the bytes are not a lease."""
    try:
        lease = json.loads(data)
        float(lease["expires_unix"])
    except (ValueError, KeyError, TypeError):
        return None
    return lease if isinstance(lease, dict) else None


def is_live(lease: dict, now: float | None = None) -> bool:
    """Whether the lease still holds its version at `now` (Unix seconds; default: now)."""
    return float(lease["expires_unix"]) > (time.time() if now is None else now)


def live_leases(version_dir: str, now: float | None = None) -> list[dict]:
    """The live leases under `version_dir` (each with "file" added), oldest first.

    Locally through os; on a bucket through core.storage (Beam FileSystems). A file
    that is not a lease is skipped with a warning.

    Raises:
        OSError: the lease folder exists but cannot be listed or a lease read (a prune must not
            take an unreadable folder for an empty one).
    """
    folder = lease_folder(version_dir)
    found: list[tuple[str, bytes]] = []
    if "://" not in version_dir:
        try:
            names = sorted(os.listdir(folder))
        except FileNotFoundError:
            return []
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    found.append((name, f.read()))
            except FileNotFoundError:
                continue  # removed by its reader since the listing
    else:
        from core import storage

        try:
            matched = storage.match_under(folder, "*.json")
        except (OSError, ValueError) as e:
            if "No files found" in str(e) or "matched no files" in str(e):
                return []
            raise OSError(f"cannot list the leases in {folder}: {e}") from e
        for m in sorted(matched, key=lambda m: m.path):
            try:
                found.append((posixpath.basename(m.path), storage.read_bytes(m.path)))
            except OSError:
                if storage.exists(m.path):
                    raise
    out = []
    for name, data in found:
        lease = parse_lease(data)
        if lease is None:
            _log.warning("imgrec: %s is not a lease; ignored", _join(folder, name))
            continue
        if is_live(lease, now):
            out.append({**lease, "file": name})
    return sorted(out, key=lambda x: float(x.get("acquired_unix", 0)))
