"""NVIDIA DALI's TFRecord index files (`--dali_index`): `<shard file>.idx`, one line per record."""

from __future__ import annotations

import struct

__all__ = ["INDEX_SUFFIX", "RECORD_OVERHEAD", "index_line", "index_name", "index_of_shard"]

# DALI's fn.readers.tfrecord(index_path=...) takes one index per shard, in the format of its
# `tfrecord2idx` script: "<byte offset> <record size>\n" per record, the size counting the
# TFRecord framing too. CONTRACT.md names the file `<shard file>.idx`.
INDEX_SUFFIX = ".idx"

# TFRecord framing around a record's data: an 8-byte length, its 4-byte masked crc32c, the
# data, the data's 4-byte masked crc32c.
RECORD_OVERHEAD = 16


def index_name(shard_file: str) -> str:
    """The index file of `shard_file` (a path or a dataset_info.json relative name)."""
    return shard_file + INDEX_SUFFIX


def index_line(offset: int, data_size: int) -> bytes:
    """The index line of a record whose data (`data_size` bytes) starts a frame at `offset`."""
    return f"{offset} {data_size + RECORD_OVERHEAD}\n".encode()


def index_of_shard(data: bytes) -> bytes:
    """The index tfrecord2idx would write for the uncompressed shard `data` (verify, tests).

    Raises:
        ValueError: a frame runs past the end of `data` (not an uncompressed TFRecord file).
    """
    lines, offset = [], 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise ValueError(f"a TFRecord frame header is cut at byte {offset}")
        (size,) = struct.unpack_from("<Q", data, offset)
        if offset + size + RECORD_OVERHEAD > len(data):
            raise ValueError(f"the record at byte {offset} says {size} bytes, past the end")
        lines.append(index_line(offset, size))
        offset += size + RECORD_OVERHEAD
    return b"".join(lines)
