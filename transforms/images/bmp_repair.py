"""BMP layouts TensorFlow decodes and Pillow refuses, rewritten (same pixels) into ones it reads.

Four kinds (docs/rejects.md). OS/2 v2 headers shorter than 64 bytes (16 is the least the
format allows; Pillow knows 12, 40, 52, 56, 64, 108 and 124) get the 40-byte header with the
same fields. A palette longer than the bit depth can index (`biClrUsed` 300 at 8 bits: Pillow
"invalid palette size") is cut to 2**bits entries (the others cannot be indexed). BI_BITFIELDS
masks Pillow has no raw mode for (11-11-10, or 8-bit fields in an order it lacks) are unpacked
field by field, each scaled to 8 bits, into 32-bit BGRA. An RLE stream whose runs overrun their
rows and leave pixels unset before its end-of-bitmap (Pillow: "not enough image data") becomes
an uncompressed 8-bit BMP of the indices Pillow decodes, the unset ones 0. A BMP Pillow reads
as it is is returned untouched, so its stored bytes do not change. Beam-free, numpy only.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["for_pillow"]

_FILE_HEADER = 14
_BI_RGB, _BI_RLE8, _BI_RLE4, _BI_BITFIELDS = 0, 1, 2, 3
# The info-header sizes Pillow's BMP plugin reads (PIL/BmpImagePlugin.py `_accept`).
_PILLOW_HEADERS = (12, 40, 52, 56, 64, 108, 124)
# The (bits, masks) Pillow 12's BMP plugin has a raw mode for (its SUPPORTED table): 32 bits
# as (R, G, B, A), 16 bits as (R, G, B). Any other layout is unpacked here.
_PILLOW_MASKS = {
    32: {
        (0xFF0000, 0xFF00, 0xFF, 0x0),
        (0xFF000000, 0xFF0000, 0xFF00, 0x0),
        (0xFF000000, 0xFF00, 0xFF, 0x0),
        (0xFF000000, 0xFF0000, 0xFF00, 0xFF),
        (0xFF, 0xFF00, 0xFF0000, 0xFF000000),
        (0xFF0000, 0xFF00, 0xFF, 0xFF000000),
        (0xFF000000, 0xFF00, 0xFF, 0xFF0000),
        (0x0, 0x0, 0x0, 0x0),
    },
    16: {(0xF800, 0x7E0, 0x1F), (0x7C00, 0x3E0, 0x1F)},
}
# The layout unpacked masks are written in: 32-bit BGRA, which Pillow reads from a 56-byte
# (BITMAPV3INFOHEADER) header.
_BGRA = (0xFF0000, 0xFF00, 0xFF, 0xFF000000)


def _u16(data: bytes, at: int) -> int:
    return struct.unpack_from("<H", data, at)[0]


def _u32(data: bytes, at: int) -> int:
    return struct.unpack_from("<I", data, at)[0]


def _with_header(data: bytes, info: bytes, rest: bytes) -> bytes:
    """A BMP file of `info` (the info header) and `rest` (palette or masks, then pixels), whose
    pixel offset keeps pointing at the same pixels."""
    old_info = _u32(data, _FILE_HEADER)
    shift = len(info) - old_info
    offset = _u32(data, 10) + shift
    body = info + rest
    return b"BM" + struct.pack("<IHHI", _FILE_HEADER + len(body), 0, 0, offset) + body


def _widen_os2(data: bytes, size: int) -> bytes:
    """An OS/2 v2 header of 16..60 bytes -> the 40-byte header with the same fields (the
    missing ones 0: no compression, a full palette)."""
    fields = data[_FILE_HEADER + 4 : _FILE_HEADER + size][:36]
    info = struct.pack("<I", 40) + fields + bytes(36 - len(fields))
    return _with_header(data, info, data[_FILE_HEADER + size :])


def _masks(data: bytes, size: int, bpp: int) -> tuple[int, ...] | None:
    if size == 40:  # three masks after the header
        if len(data) < _FILE_HEADER + 40 + 12:
            return None
        r, g, b = struct.unpack_from("<III", data, _FILE_HEADER + 40)
        return (r, g, b, 0) if bpp == 32 else (r, g, b)
    if size >= 52:  # in the header, alpha from 56 bytes on
        r, g, b = struct.unpack_from("<III", data, _FILE_HEADER + 40)
        a = _u32(data, _FILE_HEADER + 52) if size >= 56 else 0
        return (r, g, b, a) if bpp == 32 else (r, g, b)
    return None


def _contiguous(mask: int) -> bool:
    low = mask & -mask
    return mask == 0 or (mask + low) & mask == 0


def _unpack_bitfields(data: bytes, size: int, bpp: int, masks: tuple[int, ...]) -> bytes | None:
    """Pixels under any contiguous masks -> the same image as 32-bit BGRA, each field scaled to
    8 bits; None when the masks or the pixel data do not make an image."""
    if not all(_contiguous(m) for m in masks) or not any(masks[:3]):
        return None
    width, height = struct.unpack_from("<ii", data, _FILE_HEADER + 4)
    rows = abs(height)
    stride = (width * bpp + 31) // 32 * 4
    start = _u32(data, 10)
    if width <= 0 or rows == 0 or start + stride * rows > len(data):
        return None
    raw = np.frombuffer(data, np.uint8, stride * rows, start).reshape(rows, stride)
    words = raw[:, : width * bpp // 8].copy().view("<u4" if bpp == 32 else "<u2")
    words = words.astype(np.uint64)
    out = np.zeros((rows, width, 4), np.uint8)
    for channel, mask in zip((2, 1, 0, 3), masks, strict=False):  # B G R A in the file
        if mask == 0:
            out[..., channel] = 255 if channel == 3 else 0
            continue
        shift = (mask & -mask).bit_length() - 1
        top = mask >> shift
        value = (words >> np.uint64(shift)) & np.uint64(top)
        out[..., channel] = ((value * 255 + top // 2) // top).astype(np.uint8)
    has_alpha = len(masks) == 4 and masks[3] != 0
    info = struct.pack(
        "<IiiHHIIiiII", 56, width, height, 1, 32, _BI_BITFIELDS, out.nbytes, 2835, 2835, 0, 0
    )
    info += struct.pack("<IIII", *_BGRA[:3], _BGRA[3] if has_alpha else 0)
    pixels = out.tobytes()
    offset = _FILE_HEADER + len(info)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + info + pixels


def _rle_pixels(data: bytes, start: int, width: int, rows: int, rle4: bool):
    """Palette indices of an RLE8/RLE4 stream, decoded as Pillow's BmpRleDecoder does (an
    encoded run is cut at the row's end, the rest of that row's runs are dropped until an
    end-of-line), and whether the stream ended with an end-of-bitmap (else it was cut)."""
    out, x, pos, said_end = bytearray(), 0, start, False
    total = width * rows
    while len(out) < total and pos + 2 <= len(data):
        count, value = data[pos], data[pos + 1]
        pos += 2
        if count:  # encoded run
            keep = max(0, min(count, width - x))
            pair = bytes((value >> 4, value & 0x0F)) if rle4 else bytes((value, value))
            out += (pair * ((keep + 1) // 2))[:keep]
            x += keep
        elif value == 0:  # end of line
            out += bytes(-len(out) % width)
            x = 0
        elif value == 1:  # end of bitmap
            said_end = True
            break
        elif value == 2:  # delta
            if pos + 2 > len(data):
                break
            out += bytes(data[pos] + data[pos + 1] * width)
            pos += 2
            x = len(out) % width
        else:  # absolute run of `value` pixels, padded to a 16-bit boundary
            size = (value + 1) // 2 if rle4 else value
            chunk = data[pos : pos + size]
            pos += size + (pos + size) % 2
            if rle4:
                chunk = bytes(v for b in chunk for v in (b >> 4, b & 0x0F))[:value]
            out += chunk
            if len(chunk) < value:
                break
            x += value
    return out, said_end


def _rle_unpacked(data: bytes, size: int, bpp: int, max_pixels: int) -> bytes | None:
    """An RLE stream that overruns its rows (Pillow: "not enough image data") -> the same
    indices as an uncompressed 8-bit BMP, the pixels it never set index 0 (the background
    Windows leaves there). None when Pillow reads the stream itself, or when the stream stops
    without its end-of-bitmap (a cut file: Pillow names the damage)."""
    width, height = struct.unpack_from("<ii", data, _FILE_HEADER + 4)
    if width <= 0 or height <= 0 or width * height > max_pixels:
        return None  # (a bomb is refused by --max_pixels after the probe, unpadded)
    indices, said_end = _rle_pixels(data, _u32(data, 10), width, height, bpp == 4)
    if len(indices) >= width * height or not said_end:
        return None
    indices += bytes(width * height - len(indices))
    colors = _u32(data, _FILE_HEADER + 32) or 1 << bpp
    palette = data[_FILE_HEADER + size : _FILE_HEADER + size + 4 * colors]
    stride = (width + 3) // 4 * 4
    pixels = b"".join(
        indices[i : i + width] + bytes(stride - width) for i in range(0, width * height, width)
    )
    info = struct.pack(
        "<IiiHHIIiiII",
        40,
        width,
        height,
        1,
        8,
        _BI_RGB,
        len(pixels),
        2835,
        2835,
        len(palette) // 4,
        0,
    )
    offset = _FILE_HEADER + len(info) + len(palette)
    head = b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset)
    return head + info + palette + pixels


def for_pillow(data: bytes, max_pixels: int) -> bytes:
    """`data` itself, or a BMP with the same pixels in a layout Pillow's BMP plugin reads (see
    the module docstring for which). Never raises on damaged input: what it cannot make sense
    of is returned as is, for Pillow to name the damage. An RLE stream declaring more than
    `max_pixels` (--max_pixels) is left alone: padding it would allocate that much first."""
    if data[:2] != b"BM" or len(data) < _FILE_HEADER + 16:
        return data
    size = _u32(data, _FILE_HEADER)
    if 16 <= size < 64 and size not in _PILLOW_HEADERS and len(data) >= _FILE_HEADER + size:
        data, size = _widen_os2(data, size), 40
    if size not in _PILLOW_HEADERS or size == 12 or len(data) < _FILE_HEADER + size:
        return data
    bpp, compression = _u16(data, _FILE_HEADER + 14), _u32(data, _FILE_HEADER + 16)
    colors = _u32(data, _FILE_HEADER + 32)
    if bpp <= 8 and colors > 1 << bpp:
        at = _FILE_HEADER + 32
        data = data[:at] + struct.pack("<I", 1 << bpp) + data[at + 4 :]
    if (compression, bpp) in ((_BI_RLE8, 8), (_BI_RLE4, 4)) and size != 64:
        return _rle_unpacked(data, size, bpp, max_pixels) or data
    if compression == _BI_BITFIELDS and bpp in _PILLOW_MASKS and size != 64:  # OS/2: Huffman
        masks = _masks(data, size, bpp)
        if masks is not None and masks not in _PILLOW_MASKS[bpp]:
            return _unpack_bitfields(data, size, bpp, masks) or data
    return data
