"""TFRecord framing on a file imgrec already holds open: each record is its length, the masked
crc32c of the length, the data and the masked crc32c of the data (TensorFlow's format)."""

from __future__ import annotations

import codecs
import struct

import google_crc32c

__all__ = ["encoded_size", "read_record", "write_record"]

# TensorFlow's mask: the crc rotated right by 15 bits plus a constant (tensorflow/core/lib/hash).
_MASK_DELTA = 0xA282EAD8


def _masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def encoded_size(data: bytes) -> int:
    """Bytes one record of `data` takes in a file (8 length + 4 + data + 4)."""
    return len(data) + 16


def write_record(file, data: bytes) -> None:
    """Append one record holding `data` to `file`."""
    length = struct.pack("<Q", len(data))
    file.write(
        b"".join(
            (
                length,
                struct.pack("<I", _masked_crc32c(length)),
                data,
                struct.pack("<I", _masked_crc32c(data)),
            )
        )
    )


def read_record(file) -> bytes | None:
    """The next record's data in `file`, None at its end.

    Raises:
        ValueError: a cut record, or a length or data checksum that does not match.
    """
    head = file.read(12)
    if not head:
        return None
    if len(head) != 12:
        raise ValueError(f"Not a valid TFRecord. Fewer than 12 bytes: {_hex(head)}")
    length, length_mask = struct.unpack("<QI", head)
    if _masked_crc32c(head[:8]) != length_mask:
        raise ValueError(f"Not a valid TFRecord. Mismatch of length mask: {_hex(head)}")
    body = file.read(length + 4)
    if len(body) != length + 4:
        raise ValueError(f"Not a valid TFRecord. Fewer than {length + 4} bytes: {_hex(body)}")
    data, data_mask = body[:length], struct.unpack("<I", body[length:])[0]
    if _masked_crc32c(data) != data_mask:
        raise ValueError(f"Not a valid TFRecord. Mismatch of data mask: {_hex(body)}")
    return data


def _hex(data: bytes) -> bytes:
    return codecs.encode(data, "hex")
