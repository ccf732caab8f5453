"""The stores a no-change rerun (pipeline/versions/fast_rerun.py) works on: the local disk without Beam,
buckets through Beam FileSystems; and the listing it compares, made as the pipeline's listing
makes it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import posixpath
import secrets
import shutil

from core import retention, schema, versions
from core.names import local_path
from core.rerun_record import listing_line, reject_line
from transforms.match_local import match_bucket, match_local

__all__ = ["LocalStore", "BucketStore", "latest_version", "list_lines"]

# Beam's and storage.py's temporary-name prefix (core.storage.TEMP_PREFIX; listing and
# shard globs skip it).
_TEMP_PREFIX = ".tmp-"
# Read size while hashing a shard: large sequential reads, bounded memory.
_HASH_CHUNK_BYTES = 8 << 20
# os.link errors that mean "no hard link here": the file is copied instead.
_NO_HARD_LINK = (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EACCES)

# -- Stores: the local disk without Beam, buckets through Beam FileSystems ---------------------


class LocalStore:
    """Files on this machine, through os (no Beam)."""

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(base, *parts)

    def read(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, path: str, data: bytes) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = self._temp(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            if os.path.lexists(tmp):
                os.remove(tmp)
            raise

    @staticmethod
    def _temp(path: str) -> str:
        head, tail = os.path.split(path)
        return os.path.join(head, f"{_TEMP_PREFIX}{tail}-{secrets.token_hex(6)}")

    def versions(self, root: str) -> list[str]:
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return []
        return sorted(
            n
            for n in names
            if versions.is_version_name(n)
            and os.path.exists(os.path.join(root, n, versions.VERSION_MARKER))
        )

    def files(self, folder: str) -> list[str]:
        """Every file below `folder`, relative, sorted (temporary names left out)."""
        found = []
        for d, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(files):
                if not name.startswith(_TEMP_PREFIX):
                    found.append(os.path.relpath(os.path.join(d, name), folder))
        return found

    def folders(self, folder: str) -> list[str]:
        return sorted(os.path.relpath(d, folder) for d, _, _ in os.walk(folder) if d != folder)

    def claim(self, root: str, name: str, body: dict) -> str:
        os.makedirs(root, exist_ok=True)
        for _ in range(1000):
            try:
                os.mkdir(os.path.join(root, name))
            except FileExistsError:
                name = versions._bump(name)
                continue
            data = json.dumps({"version": name, **body}, indent=2, sort_keys=True).encode()
            self.write(os.path.join(root, name, versions.VERSION_MARKER), data)
            return name
        raise versions.VersionError(f"--output {root}: could not claim a version near {name}")

    def copy(self, src: str, dst: str, verify: tuple[int, str] | None = None) -> bool:
        """Link (or copy) `src` to `dst`; with `verify`, only if it has that size and sha256."""
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = self._temp(dst)
        try:
            os.link(src, tmp)
        except OSError as e:
            if e.errno not in _NO_HARD_LINK:
                raise
            shutil.copyfile(src, tmp)
        if verify is not None and _digest_file(tmp, open) != verify:
            os.remove(tmp)
            return False
        os.replace(tmp, dst)
        return True

    def remove_tree(self, folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def publish(self, root: str, name: str) -> tuple[bool, str | None]:
        previous = latest_version(self, root)
        if previous is not None and previous >= name:
            return False, previous
        # When LATEST moved here (--keep_for counts the previous version's time from it).
        self.write(
            os.path.join(root, name, *versions.PUBLISHED.split("/")), versions.published_record()
        )
        self.write(os.path.join(root, versions.LATEST), (name + "\n").encode("ascii"))
        return True, previous

    def finished(self, root: str, names: list[str]) -> list[str]:
        """The complete versions among `names` (their dataset_info.json exists)."""
        return [n for n in names if os.path.exists(os.path.join(root, n, schema.DATASET_INFO))]

    def prune(self, root: str, keep: int, latest: str, keep_for_s: float) -> list[str]:
        """retention.prune without Beam: the same choice, leases and --keep_for included."""
        if keep < 1:
            return []
        names = self.versions(root)
        older = [n for n in names if n < latest]
        done = self.finished(root, older)
        doomed = retention.plan_prune(older, done, latest, keep)
        held = retention.retention_holds(root, doomed, names, latest, keep_for_s, None, done)
        doomed = [n for n in doomed if n not in held]
        for name in doomed:  # dataset_info.json first: the folder stops counting as complete
            info = os.path.join(root, name, schema.DATASET_INFO)
            if os.path.exists(info):
                os.remove(info)
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        return doomed


class BucketStore:
    """gs://, s3:// and other stores Beam reaches, through core.storage."""

    def __init__(self):
        from apache_beam.io.filesystems import FileSystems

        from core import storage

        self._fs, self._storage = FileSystems, storage

    def join(self, base: str, *parts: str) -> str:
        return self._storage.join(base, *parts)

    def read(self, path: str) -> bytes | None:
        if not self._storage.exists(path):
            return None
        return self._storage.read_bytes(path)

    def write(self, path: str, data: bytes) -> None:
        self._storage.write_bytes_atomic(path, data)

    def versions(self, root: str) -> list[str]:
        return versions.list_versions(root)

    def files(self, folder: str) -> list[str]:
        prefix = folder.rstrip("/") + "/"
        found = self._storage.match_under(folder.rstrip("/"), "**")
        rel = [m.path[len(prefix) :] for m in found if not m.path.endswith("/")]
        return sorted(r for r in rel if not posixpath.basename(r).startswith(_TEMP_PREFIX))

    def folders(self, folder: str) -> list[str]:
        return []  # object stores have no empty folders

    def claim(self, root: str, name: str, body: dict) -> str:
        return versions.claim_version(root, name, body)

    def copy(self, src: str, dst: str, verify: tuple[int, str] | None = None) -> bool:
        tmp = self._storage.temp_sibling(dst)
        self._storage.with_retries(lambda: self._fs.copy([src], [tmp]), tmp)
        if verify is not None:
            found = _digest_file(
                tmp, lambda p, _mode: self._fs.open(p, compression_type="uncompressed")
            )
            if found != verify:
                self._storage.delete_quietly([tmp])
                return False
        self._storage.rename(tmp, dst)
        return True

    def remove_tree(self, folder: str) -> None:
        found = self._storage.match_under(folder.rstrip("/"), "**")
        self._storage.delete_quietly(sorted(m.path for m in found))

    def publish(self, root: str, name: str) -> tuple[bool, str | None]:
        return versions.publish(root, name)

    def finished(self, root: str, names: list[str]) -> list[str]:
        return [n for n in names if versions.is_finished(root, n)]

    def prune(self, root: str, keep: int, latest: str, keep_for_s: float) -> list[str]:
        return retention.prune(root, keep, latest, keep_for_s)


def _digest_file(path: str, opener) -> tuple[int, str]:
    """(size, sha256) of a file, read in large chunks."""
    digest, size = hashlib.sha256(), 0
    with opener(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def latest_version(store, root: str) -> str | None:
    pointer = store.join(root, versions.LATEST)
    text = store.read(pointer)
    return (
        None if text is None else versions.parse_pointer(text.decode("utf-8", "replace"), pointer)
    )


def list_lines(patterns: list[str]) -> list[str | None]:
    """The digest lines of the listing `transforms.list_images` would make of `patterns`."""
    lines: list[str | None] = []
    seen: set[str] = set()
    for pattern in patterns:
        if "://" in local_path(pattern):  # (an escaped file:// pattern is a local one)
            entries = []
            for m in match_bucket(pattern):
                if m.path.endswith("/"):
                    continue
                updated = float(m.last_updated_in_seconds or 0.0)
                stamp = repr(updated) if updated > 0 else None
                entries.append((m.path, int(m.size_in_bytes), stamp, None, ""))
        else:
            found = match_local(local_path(pattern))
            entries = ((e.path, e.size, e.stamp, e.reason, e.detail) for e in found)
        for path, size, stamp, reason, detail in entries:
            if path in seen:  # a file two patterns match is listed once
                continue
            seen.add(path)
            if reason is None:
                lines.append(listing_line(path, size, stamp))
            else:
                lines.append(reject_line({"path": path, "reason": reason, "detail": detail}))
    return lines
