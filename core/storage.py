"""File I/O through Beam FileSystems (local, gs://, s3://): reads with retry, atomic writes.

What the object-store clients under Beam do on their own (Beam 2.77, measured against the GCS
emulator and moto's S3 server; see tests/integration/test_storage_servers.py):
  * GCS: google-cloud-storage retries 429/5xx and dropped connections for up to 120 s per call,
    then raises `google.api_core.exceptions.RetryError`. We do not retry that again.
  * S3: botocore retries 5xx/throttling (3 attempts in "standard" mode); Beam retries object
    metadata lookups for minutes on 5xx and connection errors, ranged reads twice. Whole-file
    reads (`read_bytes`) skip Beam's reader: one GET each (core/beam_clients.py's
    `read_object`), with the client's own retries and ours.
  * S3 writes are multipart uploads. Beam cannot write an empty object (CompleteMultipartUpload
    with no parts: MalformedXML), and an exception inside `with FileSystems.create(...)`
    still completes the upload, so the partial bytes become visible under that name. Hence
    writes go to a temporary sibling and are renamed (server-side copy + delete on object
    stores) only after the upload closed cleanly; empty S3 objects are put in one request.
"""

from __future__ import annotations

import collections
import concurrent.futures
import errno
import http.client
import os
import posixpath
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from apache_beam.io.aws import s3io
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from core import beam_clients, names
from core.errors import ERROR_PREFIX

__all__ = [
    "ReadError",
    "StoreOutageError",
    "read_bytes",
    "read_many",
    "write_bytes_atomic",
    "temp_sibling",
    "rename",
    "exists",
    "join",
    "delete",
    "delete_quietly",
    "glob_escape",
    "match_under",
    "with_retries",
    "is_transient",
    "TEMP_PREFIX",
]

T = TypeVar("T")

# Three retries with exponential backoff span ~7 s: enough to ride out a 429/503 burst or a
# reset connection on GCS/S3 without stalling a bundle for minutes on a file that is truly gone.
# (The clients underneath already retry too; see the module docstring.)
MAX_ATTEMPTS = 4
BACKOFF_BASE_S = 0.5
# Eight reads in flight per worker hide a bucket's per-object latency at the rate a core decodes
# image headers, while bounding memory to eight files per worker.
DEFAULT_READ_CONCURRENCY = 8
# Temporary objects start with this so that listings and shard globs (`train-*`) skip them.
TEMP_PREFIX = ".tmp-"
# After this many reads in a row from one store (bucket) failed with transient errors, retries
# included, and none succeeded in between, the store is taken to be down and the job stops
# (StoreOutageError) instead of rejecting file after file: with the GCS client's own 120 s
# deadline per read and 8 reads in flight, a dead bucket of 100,000 files would otherwise take
# ~17 days of worker time to reject. Two rounds of DEFAULT_READ_CONCURRENCY reads.
OUTAGE_THRESHOLD = 2 * DEFAULT_READ_CONCURRENCY

# HTTP statuses a well-behaved client retries: timeout, throttling, server-side failures.
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# Errno values of a dropped or refused link, as raised by sockets and wrapped by clients.
_TRANSIENT_ERRNO = frozenset(
    {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EAGAIN,
    }
)
# Exception class names (from requests, urllib3, botocore, google-resumable-media, ...) that
# mean the link failed rather than the request; matched by name to avoid importing each client.
_TRANSIENT_TYPES = frozenset(
    {
        "ConnectionError",
        "ConnectTimeout",
        "ReadTimeout",
        "Timeout",
        "ProtocolError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "NewConnectionError",
        "MaxRetryError",
        "ServiceUnavailable",
        "TooManyRequests",
        "InternalServerError",
        "BadGateway",
        "GatewayTimeout",
        "RetryError",
        "DataCorruption",
    }
)
# Message fragments of link failures for errors that carry no status (checked last, and never
# for digits: a path such as "cat_503.jpg" must not make a 404 look transient).
_TRANSIENT_TEXT = (
    "could not connect",
    "connection reset",
    "connection refused",
    "connection aborted",
    "timed out",
    "broken pipe",
    "temporarily unavailable",
    "too many requests",
    "service unavailable",
    "slow down",
    "slowdown",
    "remote end closed",
    "max retries exceeded",
)


class ReadError(IOError):
    """A file could not be read.

    Attributes:
        path: the file.
        detail: what went wrong, with the number of attempts when it was transient.
        transient: True when the last error was retryable (throttling, 5xx, dropped link) and
            the retries ran out; False for a permanent one (missing, denied, not a file).
        attempts: how many times the read was tried.
    """

    def __init__(self, path: str, detail: str, transient: bool, attempts: int):
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail
        self.transient = transient
        self.attempts = attempts


class StoreOutageError(RuntimeError):
    """Many reads in a row from one store failed with transient errors: it looks down.

    Not a ReadError on purpose: callers that turn a ReadError into a per-file reject let this
    one through, so the bundle fails and the job stops with this message.
    """

    def __init__(self, store: str, failures: int, last: ReadError):
        super().__init__(
            f"{ERROR_PREFIX}{store} looks down: {failures} reads in a row failed with transient "
            f"errors after retries (last: {last.path}: {last.detail}). Stopping rather than "
            "rejecting every file; rerun the same command with --resume once it answers "
            "(finished shards are kept)."
        )
        self.store = store
        self.failures = failures


def _store_of(path: str) -> str:
    """The store a path lives in: 'gs://bucket', 's3://bucket', or 'local'."""
    scheme = FileSystems.get_scheme(path)
    if scheme is None:
        return "local"
    rest = path[len(scheme) + 3 :]
    return f"{scheme}://{rest.split('/', 1)[0]}"


class _OutageBreaker:
    """Counts transient read failures in a row per store, in this process (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}

    def success(self, path: str) -> None:
        if not self._failures:  # the common case, without parsing the path
            return
        store = _store_of(path)
        with self._lock:
            self._failures.pop(store, None)

    def failure(self, error: ReadError) -> None:
        """Record a read that failed for good; raise StoreOutageError at OUTAGE_THRESHOLD."""
        if not error.transient:
            return  # a missing or forbidden object says nothing about the store's health
        store = _store_of(error.path)
        with self._lock:
            failures = self._failures.get(store, 0) + 1
            # Counting starts over once tripped: a retried bundle probes the store afresh.
            self._failures[store] = 0 if failures >= OUTAGE_THRESHOLD else failures
        if failures >= OUTAGE_THRESHOLD:
            raise StoreOutageError(store, failures, error) from error


_BREAKER = _OutageBreaker()


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, the errors it wraps (cause/context, Beam's per-path details), depth first."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        if isinstance(e, BeamIOError) and isinstance(e.exception_details, dict):
            stack.extend(v for v in e.exception_details.values() if isinstance(v, BaseException))
        stack.extend((e.__context__, e.__cause__))


def _status(exc: BaseException) -> int | None:
    """The HTTP status an error carries, if any (google-api-core, Beam S3, botocore)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and 100 <= code < 600:
        return code
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return status
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(exc: BaseException) -> bool:
    """Whether an I/O error is worth retrying (throttling, server errors, dropped connections).

    The first error in the chain that says something decides: a status code, an errno, a
    known exception type, then (for status-less errors only) the message.
    """
    for e in _causes(exc):
        if isinstance(
            e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
        ):
            return False
        status = _status(e)
        if status is not None:
            return status in _TRANSIENT_STATUS
        if isinstance(
            e,
            (
                ConnectionError,
                TimeoutError,
                http.client.IncompleteRead,
                http.client.RemoteDisconnected,
            ),
        ):
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNO:
            return True
        if any(c.__name__ in _TRANSIENT_TYPES for c in type(e).__mro__):
            return True
    for e in _causes(exc):
        text = str(e).lower()
        if any(marker in text for marker in _TRANSIENT_TEXT):
            return True
    return False


# Statuses that settle it for reads and writes alike: the object or bucket is not there, or we
# may not touch it. Retrying cannot help.
_PERMANENT_STATUS = frozenset({401, 403, 404, 410})


def _is_retryable_write(exc: BaseException) -> bool:
    """Writes put opaque bytes under a fresh temporary name, so any failure but a definitive
    one is worth another try. (The GCS emulator, for one, answers 400 to a resumable-upload
    chunk resent after a dropped connection; the upload restarted from scratch succeeds.)"""
    for e in _causes(exc):
        if isinstance(e, (PermissionError, IsADirectoryError, NotADirectoryError)):
            return False
        if _status(e) in _PERMANENT_STATUS:
            return False
    return not isinstance(exc, (TypeError, ValueError, AttributeError))


def _client_gave_up(exc: BaseException) -> bool:
    """Whether the client library already spent its own retry deadline (no point in more)."""
    return any(type(e).__name__ == "RetryError" for e in _causes(exc))


def with_retries(
    fn: Callable[[], T],
    what: str,
    attempts: int = MAX_ATTEMPTS,
    retryable: Callable[[BaseException], bool] = is_transient,
) -> T:
    """Run `fn`, retrying transient errors with jittered exponential backoff.

    Args:
        fn: the operation; it must be safe to repeat.
        what: the path (or a description) named in the error.
        attempts: tries in all, at least 1.
        retryable: decides which errors are transient (default `is_transient`).

    Returns:
        What `fn` returns.

    Raises:
        ReadError: at once on a permanent error, else after the last attempt.
    """
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except ReadError:
            raise
        except Exception as e:  # noqa: BLE001 - every error is classified and re-raised
            transient = retryable(e)
            detail = f"{type(e).__name__}: {e}"
            if transient and _client_gave_up(e):
                raise ReadError(
                    what,
                    f"transient error, the storage client gave up after its own retries: {detail}",
                    True,
                    attempt,
                ) from e
            if not transient or attempt == attempts:
                if transient:
                    detail = f"transient error, gave up after {attempt} attempts: {detail}"
                raise ReadError(what, detail, transient, attempt) from e
            time.sleep(BACKOFF_BASE_S * (2 ** (attempt - 1)) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def read_bytes(path: str, attempts: int = MAX_ATTEMPTS) -> bytes:
    """Read a whole file, retrying transient errors: a local one through Beam FileSystems, a
    gs:// or s3:// object in one request through the client Beam's filesystem uses
    (core/beam_clients.py's `read_object`; FileSystems.open asks for the metadata first).

    Raises:
        ReadError: the file is missing or unreadable (`.transient` says which kind).
        StoreOutageError: this read made OUTAGE_THRESHOLD transient failures in a row on its
            store (see _OutageBreaker).
    """

    one_request = FileSystems.get_scheme(path) in beam_clients.ONE_REQUEST_SCHEMES

    def _read() -> bytes:
        if one_request:  # one GET, not Beam's metadata request and then the bytes
            data = beam_clients.read_object(path)
            if data is not None:
                return data
        # A local name that is not UTF-8 travels escaped (core/names.py: a file:// URI).
        with FileSystems.open(names.local_path(path), compression_type="uncompressed") as f:
            return f.read()

    try:
        data = with_retries(_read, path, attempts)
    except ReadError as e:
        _BREAKER.failure(e)
        raise
    _BREAKER.success(path)
    return data


def is_local(path: str) -> bool:
    """True for a path on this machine's filesystem (no `scheme://`, or an escaped local name)."""
    return path.startswith(names.ESCAPED_PREFIX) or FileSystems.get_scheme(path) is None


def read_many(
    paths: Iterable[str],
    concurrency: int = DEFAULT_READ_CONCURRENCY,
    attempts: int = MAX_ATTEMPTS,
) -> Iterator[tuple[str, bytes | ReadError]]:
    """Read files with up to `concurrency` bucket reads in flight, in input order.

    Per-object latency on a bucket then overlaps instead of adding up; at most `concurrency`
    files are held in memory. Local files are read inline when their turn comes: a thread-pool
    hand-off costs more CPU than reading a photo. Errors
    are yielded, not raised, so one bad file rejects only itself.

    Once one read has tripped the outage breaker (StoreOutageError), reads queued behind it do
    not start: the error reaches the caller when its turn comes (the queued reads are after it
    in input order, as the pool starts them in order), and the store has seen at most the
    reads already in flight more. Without that, the caller could take up to `concurrency`
    earlier results first, each letting another read reach the dead store.

    Yields:
        (path, bytes) or (path, ReadError), in the order of `paths`.

    Raises:
        StoreOutageError: as read_bytes.
    """
    window: collections.deque = collections.deque()
    pool = None
    tripped = threading.Event()

    def read_unless_tripped(path: str) -> bytes:
        if tripped.is_set():
            raise _NotRead(path)
        try:
            return read_bytes(path, attempts)
        except StoreOutageError:
            tripped.set()
            raise

    try:
        for path in paths:
            if concurrency > 1 and not is_local(path):
                if pool is None:
                    pool = concurrent.futures.ThreadPoolExecutor(concurrency, "imgrec-read")
                window.append((path, pool.submit(read_unless_tripped, path)))
            else:
                window.append((path, None))
            while window and (len(window) >= concurrency or window[0][1] is None):
                yield _result(*window.popleft(), attempts)
        while window:
            yield _result(*window.popleft(), attempts)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class _NotRead(Exception):
    """A read_many read that did not start because an earlier one tripped the breaker (never
    seen by callers: the StoreOutageError before it in the window is raised first)."""


def _result(
    path: str, future: concurrent.futures.Future | None, attempts: int
) -> tuple[str, bytes | ReadError]:
    try:
        return path, (future.result() if future is not None else read_bytes(path, attempts))
    except ReadError as e:
        return path, e


def write_bytes_atomic(
    path: str,
    data: bytes,
    mime_type: str = "application/octet-stream",
    attempts: int = MAX_ATTEMPTS,
) -> None:
    """Write `data` so that `path` never shows partial content (replacing any old file).

    Writes a temporary sibling, then renames it; an empty S3 object is put in one request
    (Beam's multipart writer cannot make one). Transient errors are retried.

    Raises:
        ReadError: the write failed (the name is kept for symmetry with reads; `.transient`
            says whether retries ran out on a retryable error).
    """
    if not data and path.startswith("s3://"):
        with_retries(lambda: _put_empty_s3(path, mime_type), path, attempts, _is_retryable_write)
        return

    def _write() -> None:
        tmp = temp_sibling(path)
        # A failed upload leaves no object on GCS or S3 (only a completed one is visible), so
        # only a local partial file or a finished upload whose rename failed needs deleting;
        # asking a dead object store whether the temp exists would stall for minutes.
        created = "://" not in path
        try:
            with FileSystems.create(tmp, mime_type=mime_type, compression_type="uncompressed") as f:
                f.write(data)
            created = True
            rename(tmp, path)
        except BaseException:
            if created:
                delete_quietly([tmp])
            raise

    with_retries(_write, path, attempts, _is_retryable_write)


def _put_empty_s3(path: str, mime_type: str) -> None:
    """Create an empty S3 object with the boto3 client Beam's own S3 filesystem is configured with
    (same --s3_* options, same credential chain)."""
    options = getattr(FileSystems.get_filesystem(path), "_options", None) or PipelineOptions()
    bucket, key = s3io.parse_s3_path(path)
    s3io.S3IO(options=options).client.client.put_object(
        Bucket=bucket, Key=key, Body=b"", ContentType=mime_type
    )


def temp_sibling(path: str) -> str:
    """A hidden name next to `path` for writing before the final rename."""
    head, tail = posixpath.split(path) if "://" in path else os.path.split(path)
    return join(head, f"{TEMP_PREFIX}{tail}-{random.getrandbits(48):012x}")


def rename(src: str, dst: str) -> None:
    """Rename through FileSystems, replacing `dst` if present.

    Local: os.rename (atomic). GCS and S3: server-side copy, then delete of `src`; the copy
    makes `dst` appear whole or not at all, and replaces an existing `dst` the same way.
    """
    FileSystems.rename([src], [dst])


def exists(path: str) -> bool:
    """Whether `path` exists (an object, or a local file or directory)."""
    return FileSystems.exists(path)


def join(base: str, *parts: str) -> str:
    """Join path components the way the scheme of `base` does (`/` on buckets)."""
    return FileSystems.join(base, *parts)


def glob_escape(path: str) -> str:
    """`path` as a FileSystems.match pattern that matches only `path` itself.

    Beam's patterns have no escape character, but a one-character class does it: `*`, `?` and
    `[` become `[*]`, `[?]`, `[[]` (a folder named "photos [2024]" is otherwise read as
    "photos " and one character of 2, 0, 4). The scheme ("gs://") has none of them.
    """
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def match_under(folder: str, *pattern: str) -> list:
    """FileMetadata of what `pattern` (its last parts may hold wildcards) matches in `folder`,
    whatever characters the folder's own name holds. Raises as FileSystems.match does."""
    return FileSystems.match([join(glob_escape(folder), *pattern)])[0].metadata_list


def match_pattern(pattern: str) -> list:
    """FileMetadata of what a glob `pattern` matches (empty when nothing does)."""
    return FileSystems.match([pattern])[0].metadata_list


def is_folder(path: str) -> bool:
    """Whether `path` is a local directory, or a bucket prefix holding objects under it."""
    if is_local(path):
        return os.path.isdir(names.local_path(path) if "://" in path else path)
    return bool(match_under(path.rstrip("/"), "*")) and not FileSystems.exists(path)


def delete(path: str) -> None:
    """Delete the file (or, locally, the folder tree) at `path`, whatever characters it holds.

    Beam's local and GCS deletes read the path as a pattern (a file named "a[1]" is "not
    found"), S3's takes it literally; local files are removed directly, as Beam does once it
    matched them.

    Raises:
        OSError: locally, the file is missing or cannot be removed.
        BeamIOError: on a bucket, the delete failed.
    """
    if "://" not in path:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
        return
    FileSystems.delete([glob_escape(path) if path.startswith("gs://") else path])


def delete_quietly(paths: list[str]) -> None:
    """Delete `paths`, one at a time, ignoring those already gone (cleanup of our own files).

    Raises:
        OSError: a local delete failed for another reason than the file being absent.
        BeamIOError: a delete failed for another reason than the file being absent.
    """
    for path in paths:
        try:
            delete(path)
        except FileNotFoundError:  # local: already gone
            continue
        except BeamIOError as e:
            details = [
                v for v in (e.exception_details or {}).values() if isinstance(v, BaseException)
            ]
            if not details or not all(_is_absent(d) for d in details):
                raise


def _is_absent(exc: BaseException) -> bool:
    return any(isinstance(e, FileNotFoundError) or _status(e) == 404 for e in _causes(exc))
