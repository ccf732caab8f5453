"""Reading datasets from stores TensorFlow cannot open (s3://, ...): a verified local shard cache.

TensorFlow 2.21 reads local paths and gs:// itself, but has no S3 filesystem (tensorflow-io's
last release targets an older TensorFlow). For such stores the reader copies each shard to a
local cache directory before reading it:

  * a shard is streamed to a temporary name next to its final one, hashed on the way, checked
    against the `num_bytes` and `sha256` dataset_info.json lists, then renamed: a name without
    the temporary suffix only ever holds a verified shard. A `.verified` note beside it records
    the hash and the file's size and mtime, so the next run reuses the shard without re-reading;
  * downloads run in a thread pool and are started by the tf.data pipeline itself, a few shards
    ahead of the shard being read, in the pipeline's own file order: training starts once the
    first shards of this input pipeline's share are local, and each input pipeline downloads
    only the shards it reads;
  * s3:// is read with boto3 (one streaming GET per shard); any other scheme Apache Beam's
    FileSystems knows (azfs://, hdfs://, ...) through Beam, imported only then. Training code
    that reads local or gs:// data never imports Beam.

Must stay importable without Apache Beam (the reader imports it).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gzip
import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
import struct
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import IO

import tensorflow as tf

from core.stores import _DOWNLOAD_THREADS, Store, open_store, tensorflow_reads

# Store, open_store and tensorflow_reads live in core/stores.py; re-exported because the
# reader opens a store and its cache through this one module.
__all__ = [
    "DEFAULT_CACHE_DIR",
    "ShardCache",
    "ShardCacheError",
    "Store",
    "open_store",
    "tensorflow_reads",
]

_log = logging.getLogger(__name__)

# Default cache location for stores TensorFlow cannot read: the system temp dir (TMPDIR), so it
# follows what the machine's admin set up for scratch data. Pass cache_dir= for a bigger disk.
# One per user: another user's cache folder is not writable (and not to be trusted) here.
DEFAULT_CACHE_DIR = os.path.join(tempfile.gettempdir(), f"imgrec-shard-cache-{os.getuid()}")

# Shards whose download is started ahead of the one being read: the pool's width twice over, so
# a finished download is always followed by a queued one.
_DOWNLOAD_AHEAD = 2 * _DOWNLOAD_THREADS
# Bytes per read from the object stream; hashing and writing 1 MB at a time keeps the GIL free
# most of the time (hashlib releases it for large buffers).
_CHUNK_BYTES = 1 << 20
# Whole-shard attempts on transient errors (dropped connection mid-stream, 5xx after the
# client's own retries). botocore retries each request itself but not a body that breaks off.
_DOWNLOAD_ATTEMPTS = 3
_RETRY_BACKOFF_S = 1.0
# How often a shard's reader checks whether its download has finished: cheap checks, often
# enough next to the time a shard of typical size takes to download.
_POLL_US = 50_000
# Marks a partial download; a killed process can leave one behind, never a final name.
_TEMP_MARK = ".imgrec-partial-"
_VERIFIED_SUFFIX = ".verified"
# Bytes read from a shard's start to sample image sizes (when dataset_info.json has no size
# statistics): a few dozen ImageNet-sized records.
_SAMPLE_BYTES = 8 << 20


class ShardCacheError(IOError):
    """A shard could not be copied to the local cache (naming the shard and the fix)."""


@dataclasses.dataclass(frozen=True)
class _Entry:
    uri: str
    local: str
    num_bytes: int  # -1: dataset_info.json does not say
    sha256: str  # "": dataset_info.json does not say


def _cache_root(cache_dir: str, data_dir: str) -> str:
    """One folder per dataset: readable name plus a hash of the full URI (no collisions)."""
    uri = data_dir.rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", uri)[-80:].strip("_")
    return os.path.join(cache_dir, f"{readable}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}")


def _size(n: int) -> str:
    """Bytes for people: '1.20 GB', '96.5 MB', '12.0 kB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{n / 1e3:.1f} kB"


class ShardCache:
    """Local verified copies of one split's shards, downloaded on demand.

    Args:
        store: where the shards are (open_store).
        data_dir: the dataset's URI.
        split: the split name (for messages).
        listed: the split's `shards` entries from dataset_info.json.
        cache_dir: the cache directory; each dataset gets a subfolder.
    """

    def __init__(
        self, store: Store, data_dir: str, split: str, listed: Sequence[dict], cache_dir: str
    ):
        self.store = store
        self.data_dir = data_dir.rstrip("/")
        self.split = split
        self.root = _cache_root(cache_dir, data_dir)
        self._entries: dict[str, _Entry] = {}
        for item in listed:
            rel = item["file"]
            uri = posixpath.join(self.data_dir, rel)
            self._entries[uri] = _Entry(
                uri=uri,
                local=os.path.join(self.root, *rel.split("/")),
                num_bytes=int(item.get("num_bytes", -1)),
                sha256=str(item.get("sha256", "")),
            )
        self._lock = threading.Lock()
        self._futures: dict[str, concurrent.futures.Future] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(
            _DOWNLOAD_THREADS, thread_name_prefix="imgrec-shard-cache"
        )
        # Queued downloads are dropped when the dataset is gone or the interpreter exits.
        weakref.finalize(self, self._pool.shutdown, wait=False, cancel_futures=True)
        self.downloads = 0  # shards downloaded by this cache object (for tests and logs)

    # ---------------------------------------------------------------- before reading

    def check_space(self) -> None:
        """Fail in one line when the cache's disk cannot hold the split's missing shards."""
        missing = [e for e in self._entries.values() if not self._is_verified(e)]
        need = sum(max(0, e.num_bytes) for e in missing)
        if not need:
            return
        os.makedirs(self.root, exist_ok=True)
        free = shutil.disk_usage(self.root).free
        if need > free:
            total = sum(max(0, e.num_bytes) for e in self._entries.values())
            raise ShardCacheError(
                f"cache_dir {self.root} has {_size(free)} free, but split {self.split!r} of "
                f"{self.data_dir} needs {_size(need)} more ({need} bytes, {len(missing)} "
                f"shards; {_size(total)} in all): free space there or pass cache_dir= on a "
                "disk with room"
            )

    def mirror(self, rel_folder: str) -> str:
        """Copy `data_dir/rel_folder/**` (e.g. the transform_fn export) under the cache root,
        each file atomically; returns the local copy of `data_dir`."""
        base = f"{self.data_dir}/{rel_folder}"
        for rel in self.store.walk(base):
            local = os.path.join(self.root, rel_folder, *rel.split("/"))
            if not os.path.exists(local):
                self._copy(_Entry(f"{base}/{rel}", local, -1, ""))
        return self.root

    def head_sample(self, uri: str, compression: str, num_records: int) -> str:
        """A local TFRecord file of the first `num_records` records of shard `uri`.

        For the reader's image-size sampling: one partial read of the object's first records
        (a few MB) instead of downloading a whole shard this input pipeline may never read. A
        shard already in the cache is used as it is; ZLIB shards are downloaded whole.
        """
        entry = self._entries[uri]
        if self._is_verified(entry) or compression not in ("", "GZIP"):
            return self.local_path(uri)
        # Named by the shard's hash: a re-converted shard gets a new sample.
        sample = f"{entry.local}.head-{entry.sha256[:12]}"
        if os.path.exists(sample):
            return sample
        os.makedirs(os.path.dirname(sample), exist_ok=True)
        tmp = f"{sample}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            with (
                self.store.open(uri, first_bytes=_SAMPLE_BYTES) as raw,
                tf.io.TFRecordWriter(tmp) as out,
            ):
                src = gzip.GzipFile(fileobj=raw) if compression == "GZIP" else raw
                for record in _tfrecords(src, num_records):
                    out.write(record)
            os.replace(tmp, sample)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return sample

    # ---------------------------------------------------------------- while reading

    def start(self, uri: str, retry_failed: bool = True) -> concurrent.futures.Future:
        """Begin copying `uri` (no-op when under way or done; a failed copy is begun again
        only with `retry_failed`); its future gives the local path."""
        with self._lock:
            future = self._futures.get(uri)
            failed = future is not None and future.done() and future.exception() is not None
            if future is None or (failed and retry_failed):
                entry = self._entries.get(uri)
                if entry is None:
                    raise ShardCacheError(f"{uri} is not a shard of split {self.split!r}")
                future = self._pool.submit(self._fetch, entry)
                self._futures[uri] = future
            return future

    def local_path(self, uri: str) -> str:
        """The verified local copy of `uri`, downloading it first if needed."""
        return self.start(uri).result()

    def localize(self, files: tf.data.Dataset) -> tf.data.Dataset:
        """Start downloads `_DOWNLOAD_AHEAD` elements before the reader takes them.

        `files` holds (uri, ...) elements; they pass through unchanged (order kept): the shard
        is waited for inside the reader's own per-shard dataset, see `after_download`.
        """

        def begin(uri: str) -> str:
            self.start(uri)
            return uri

        started = files.map(lambda uri, *rest: (_py_string(begin, uri), *rest))
        return started.prefetch(_DOWNLOAD_AHEAD)

    def after_download(
        self, read: Callable[..., tf.data.Dataset]
    ) -> Callable[..., tf.data.Dataset]:
        """Wrap the reader's `read(path, ...) -> records` so it reads the verified local copy.

        The wait happens inside the shard's own dataset, so a parallel interleave keeps reading
        the shards that are already local. It polls (a C++ sleep between cheap checks) rather
        than blocking: tf.py_function calls run one at a time, so one blocked call would stall
        every other shard's, and a parallel interleave also stops producing while its input
        blocks.
        """

        def ready_path(uri: str) -> str:
            # A failed copy raises here (naming the shard); the next epoch's start() retries it.
            future = self.start(uri, retry_failed=False)
            return future.result() if future.done() else ""

        def wrapped(uri: tf.Tensor, *rest: tf.Tensor) -> tf.data.Dataset:
            polls = tf.data.Dataset.from_tensors(uri).concatenate(
                tf.data.Dataset.from_tensors(uri).repeat().apply(_sleep(_POLL_US))
            )
            local = (
                polls.map(lambda u: _py_string(ready_path, u))
                .filter(lambda path: tf.strings.length(path) > 0)
                .take(1)
            )
            return local.flat_map(lambda path: read(path, *rest))

        return wrapped

    # ---------------------------------------------------------------- internals

    def _is_verified(self, entry: _Entry) -> bool:
        """The final name holds this shard, as recorded when it was verified (no re-read)."""
        try:
            stat = os.stat(entry.local)
            with open(entry.local + _VERIFIED_SUFFIX) as f:
                note = json.load(f)
        except (OSError, ValueError):
            return False
        return (
            note.get("sha256") == entry.sha256
            and note.get("size") == stat.st_size
            and note.get("mtime_ns") == stat.st_mtime_ns
            and (entry.num_bytes < 0 or stat.st_size == entry.num_bytes)
        )

    def _fetch(self, entry: _Entry) -> str:
        if self._is_verified(entry):
            return entry.local
        if os.path.exists(entry.local) and entry.sha256:
            # A copy without a matching note (crash before the note, or copied in by hand):
            # hash it once rather than download it again.
            size, digest = _hash_file(entry.local)
            if digest == entry.sha256 and entry.num_bytes in (-1, size):
                self._write_note(entry)
                return entry.local
        self._copy(entry)
        self._write_note(entry)
        return entry.local

    def _copy(self, entry: _Entry) -> None:
        """Stream the object to a temporary sibling, check it, rename it into place."""
        os.makedirs(os.path.dirname(entry.local), exist_ok=True)
        for attempt in range(1, _DOWNLOAD_ATTEMPTS + 1):
            tmp = f"{entry.local}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                size, digest = self._download(entry.uri, tmp)
                self._check(entry, size, digest)
                os.replace(tmp, entry.local)
                with self._lock:
                    self.downloads += 1
                return
            except ShardCacheError:
                raise
            except FileNotFoundError as e:
                raise ShardCacheError(
                    f"shard {entry.uri} is missing from the store ({e}); re-run the conversion, "
                    f"then `imgrec verify {self.data_dir}`"
                ) from e
            except Exception as e:  # noqa: BLE001 - any client error: retried, then named
                if attempt == _DOWNLOAD_ATTEMPTS:
                    raise ShardCacheError(
                        f"could not copy shard {entry.uri} to the cache {self.root} after "
                        f"{attempt} attempts: {type(e).__name__}: {e}; check the store and its "
                        "credentials (docs/reader.md), then rerun"
                    ) from e
                _log.warning("copying %s failed (%s); retrying", entry.uri, e)
                time.sleep(_RETRY_BACKOFF_S * attempt)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)

    def _download(self, uri: str, tmp: str) -> tuple[int, str]:
        hasher = hashlib.sha256()
        size = 0
        with self.store.open(uri) as src, open(tmp, "wb") as dst:
            while chunk := src.read(_CHUNK_BYTES):
                hasher.update(chunk)
                dst.write(chunk)
                size += len(chunk)
        return size, hasher.hexdigest()

    def _check(self, entry: _Entry, size: int, digest: str) -> None:
        problems = []
        if entry.num_bytes >= 0 and size != entry.num_bytes:
            problems.append(f"{size} bytes, dataset_info.json lists {entry.num_bytes}")
        if entry.sha256 and digest != entry.sha256:
            problems.append(
                f"sha256 {digest[:16]}..., dataset_info.json lists {entry.sha256[:16]}..."
            )
        if problems:
            raise ShardCacheError(
                f"shard {entry.uri} is corrupt or was changed after conversion ("
                + "; ".join(problems)
                + f"): re-convert it (`imgrec convert ... --resume`) or run `imgrec verify "
                f"{self.data_dir}`"
            )

    def _write_note(self, entry: _Entry) -> None:
        if entry.num_bytes < 0 and not entry.sha256:
            return
        stat = os.stat(entry.local)
        note = {"sha256": entry.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        tmp = f"{entry.local}{_VERIFIED_SUFFIX}{_TEMP_MARK}{uuid.uuid4().hex[:8]}"
        with open(tmp, "w") as f:
            json.dump(note, f)
        os.replace(tmp, entry.local + _VERIFIED_SUFFIX)


def _py_string(fn: Callable[[str], str], value: tf.Tensor) -> tf.Tensor:
    """tf.py_function over one string scalar."""
    out = tf.py_function(lambda v: fn(v.numpy().decode()), [value], tf.string)
    return tf.ensure_shape(out, [])


def _sleep(microseconds: int) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """A dataset transformation that sleeps (in C++, no GIL) before each element."""
    from tensorflow.python.data.experimental.ops import testing  # No public API for it.

    return testing.sleep(microseconds)


def _tfrecords(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """Up to `limit` records from a TFRecord byte stream (8-byte length, 4-byte CRC, data,
    4-byte CRC); stops quietly at a short read (the CRCs are checked when the shard is read)."""
    for _ in range(limit):
        try:
            header = stream.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = stream.read(length)
            if len(data) < length or len(stream.read(4)) < 4:
                return
        except EOFError:  # a GZIP range that ends inside the compressed stream
            return
        yield data


def _hash_file(path: str) -> tuple[int, str]:
    hasher = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            hasher.update(chunk)
            size += len(chunk)
    return size, hasher.hexdigest()
