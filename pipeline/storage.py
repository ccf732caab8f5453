"""File I/O through Beam FileSystems (local, gs://, s3://): reads with retry, atomic writes."""

from __future__ import annotations

import posixpath
import random
import time
from typing import Callable, TypeVar

from apache_beam.io.filesystems import FileSystems

__all__ = [
    "ReadError",
    "read_bytes",
    "write_bytes_atomic",
    "exists",
    "join",
    "delete_quietly",
    "with_retries",
]

T = TypeVar("T")

# Three retries with exponential backoff span ~7 s: enough to ride out a 429/503 burst or a
# reset connection on GCS/S3 without stalling a bundle for minutes on a file that is truly gone.
MAX_ATTEMPTS = 4
BACKOFF_BASE_S = 0.5


class ReadError(IOError):
    """A file could not be read; `transient` tells whether retries were exhausted on a
    retryable error (throttling, 5xx, reset) rather than a permanent one (missing, denied)."""

    def __init__(self, path: str, detail: str, transient: bool, attempts: int):
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail
        self.transient = transient
        self.attempts = attempts


def _is_transient(exc: BaseException) -> bool:
    """Whether an I/O error is worth retrying (throttling, server errors, dropped connections)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    markers = ("429", "500", "502", "503", "504", "timed out", "timeout", "connection",
               "reset", "temporarily", "unavailable", "too many requests", "broken pipe")
    return any(m in text for m in markers)


def with_retries(fn: Callable[[], T], what: str, attempts: int = MAX_ATTEMPTS) -> T:
    """Run `fn`, retrying transient errors with jittered exponential backoff.

    Raises:
        ReadError: after the last attempt, or at once on a permanent error.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except (OSError, IOError, Exception) as e:  # noqa: BLE001 - classified just below
            if isinstance(e, ReadError):
                raise
            transient = _is_transient(e)
            if not transient or attempt == attempts:
                detail = f"{type(e).__name__}: {e}"
                if transient:
                    detail = f"gave up after {attempt} attempts on a transient error: {detail}"
                raise ReadError(what, detail, transient, attempt) from e
            time.sleep(BACKOFF_BASE_S * (2 ** (attempt - 1)) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def read_bytes(path: str) -> bytes:
    """Read a whole file through Beam FileSystems, retrying transient errors."""

    def _read() -> bytes:
        with FileSystems.open(path, compression_type="uncompressed") as f:
            return f.read()

    return with_retries(_read, path)


def write_bytes_atomic(path: str, data: bytes, mime_type: str = "application/octet-stream") -> None:
    """Write `data` to a temporary sibling, then rename it to `path` (never a partial file)."""
    tmp = temp_sibling(path)
    with FileSystems.create(tmp, mime_type=mime_type, compression_type="uncompressed") as f:
        f.write(data)
    rename(tmp, path)


def temp_sibling(path: str) -> str:
    """A hidden name next to `path` for writing before the final rename."""
    head, tail = posixpath.split(path) if "://" in path else _split_local(path)
    return join(head, f".tmp-{tail}-{random.getrandbits(48):012x}")


def _split_local(path: str) -> tuple[str, str]:
    import os

    return os.path.split(path)


def rename(src: str, dst: str) -> None:
    """Rename through FileSystems, replacing `dst` if present (copy+delete on object stores)."""
    if exists(dst):
        FileSystems.delete([dst])
    FileSystems.rename([src], [dst])


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts)


def delete_quietly(paths: list[str]) -> None:
    """Delete what exists of `paths` (cleanup of our own temp files)."""
    present = [p for p in paths if FileSystems.exists(p)]
    if present:
        FileSystems.delete(present)
