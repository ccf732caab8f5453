"""The byte sinks a shard is written through: sha256 and size as it goes, gzip, and the clean-up
of a failed write."""

from __future__ import annotations

import hashlib
import logging
import zlib

from apache_beam.io.filesystems import FileSystems

from core import storage

__all__ = ["GzipSink", "HashingWriter", "discard"]

_log = logging.getLogger(__name__)

# zlib level of --compression gzip: 6 is gzip's own default (9 costs far more CPU for barely
# smaller raw-pixel shards).
_GZIP_LEVEL = 6
# wbits 16 + 15: a gzip container (what TFRecordDataset(compression_type="GZIP") reads) with a
# 32 KB window; zlib writes a fixed header (mtime 0), so shards stay byte-identical run to run.
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class GzipSink:
    """A write-only file that gzips what it is given into `sink` (any object with write/close)."""

    def __init__(self, sink):
        self._sink = sink
        self._z = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)

    def write(self, data: bytes) -> None:
        chunk = self._z.compress(data)
        if chunk:
            self._sink.write(chunk)

    def close(self) -> None:
        self._sink.write(self._z.flush())
        self._sink.close()


class HashingWriter:
    """A write-only file that opens its target on the first write, and counts and sha256-hashes
    what passes through. A shard with no record therefore never starts an upload (Beam's S3
    writer cannot create an empty object through a multipart upload)."""

    def __init__(self, path: str):
        self._path = path
        self._f = None
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data: bytes) -> None:
        if self._f is None:
            self._f = FileSystems.create(self._path, compression_type="uncompressed")
        self._f.write(data)
        self.sha256.update(data)
        self.num_bytes += len(data)

    @property
    def opened(self) -> bool:
        return self._f is not None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def discard(sink, out: HashingWriter, tmp: str) -> None:
    """After a shard write failed (a full disk, a store outage): close what is open and delete
    the partial temp file, so a full disk keeps no partial shard filling it, without masking the
    error that got here (closing may fail the same way)."""
    try:
        sink.close()
    except Exception:  # noqa: BLE001 - the write's own error is the one to report
        pass
    if out.opened:
        try:
            storage.delete_quietly([tmp])
        except Exception:  # noqa: BLE001 - as above; --resume deletes what is left (describe)
            _log.warning("imgrec: could not delete the partial shard %s", tmp)
