"""BMP variants built byte by byte from the header layouts (BITMAPINFOHEADER, V5, OS/2 v2),
the kinds TensorFlow's decode_image decodes and Pillow refuses (tests/unit/test_bmp_variants.py).

Each builder returns (bytes, expected RGB(A) pixels as a uint8 array, top row first).
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["VARIANTS", "build"]

_W, _H = 7, 5  # odd width: rows need padding to 4 bytes


def _pixels(channels: int = 3, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (_H, _W, channels), dtype=np.uint8)


def _file(info: bytes, extra: bytes, rows: list[bytes]) -> bytes:
    """File header + info header + masks/palette + bottom-up rows padded to 4 bytes."""
    data = b"".join(r + bytes(-len(r) % 4) for r in reversed(rows))
    offset = 14 + len(info) + len(extra)
    return b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset) + info + extra + data


def _info40(bpp: int, compression: int, size: int = 0, colors: int = 0) -> bytes:
    return struct.pack("<IiiHHIIiiII", 40, _W, _H, 1, bpp, compression, size, 2835, 2835, colors, 0)


def _pack32(px: np.ndarray, masks: tuple[int, ...]) -> list[bytes]:
    """Pixels into 32-bit words: each channel's 8 bits scaled to its mask's width and placed."""
    out = np.zeros(px.shape[:2], np.uint64)
    for c, mask in enumerate(masks):
        shift = (mask & -mask).bit_length() - 1
        bits = bin(mask).count("1")
        value = (px[..., c].astype(np.uint64) * ((1 << bits) - 1) + 127) // 255
        out |= value << np.uint64(shift)
    return [row.astype("<u4").tobytes() for row in out]


def _expand(px: np.ndarray, masks: tuple[int, ...]) -> np.ndarray:
    """What a decoder that honours the masks gives back: each field scaled to 8 bits."""
    out = np.zeros_like(px)
    for c, mask in enumerate(masks):
        bits = bin(mask).count("1")
        top = (1 << bits) - 1
        value = (px[..., c].astype(np.uint32) * top + 127) // 255
        out[..., c] = (value * 255 + top // 2) // top
    return out


def rgb32bf() -> tuple[bytes, np.ndarray]:
    """32-bit BI_BITFIELDS, masks in an order Pillow has no mode for (R high, B low byte 1)."""
    masks = (0xFF000000, 0x00FF0000, 0x0000FF00)
    px = _pixels()
    data = _file(_info40(32, 3), struct.pack("<III", *masks), _pack32(px, masks))
    return data, px


def rgba32abf() -> tuple[bytes, np.ndarray]:
    """V5 header, 32-bit BI_BITFIELDS with an alpha mask, alpha in the low byte."""
    masks = (0xFF000000, 0x00FF0000, 0x0000FF00, 0x000000FF)
    px = _pixels(4)
    info = struct.pack("<IiiHHIIiiII", 124, _W, _H, 1, 32, 3, 0, 2835, 2835, 0, 0)
    info += struct.pack("<IIII", *masks) + b"BGRs" + bytes(48) + struct.pack("<IIII", 4, 0, 0, 0)
    return _file(info, b"", _pack32(px, masks)), px


def rgb32_111110() -> tuple[bytes, np.ndarray]:
    """32-bit BI_BITFIELDS, red 11 bits, green 11 bits, blue 10 bits."""
    masks = (0xFFE00000, 0x001FFC00, 0x000003FF)
    px = _pixels()
    data = _file(_info40(32, 3), struct.pack("<III", *masks), _pack32(px, masks))
    return data, _expand(px, masks)


def _palette_image(colors: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    palette = rng.integers(0, 256, (colors, 3), dtype=np.uint8)
    index = rng.integers(0, min(colors, 256), (_H, _W), dtype=np.uint8)
    return palette, index


def pal8_oversize() -> tuple[bytes, np.ndarray]:
    """8 bits per pixel with a palette of 300 colours (biClrUsed 300): 44 more than 8 bits
    can index; the extra ones are never used."""
    palette, index = _palette_image(300)
    table = b"".join(bytes((b, g, r, 0)) for r, g, b in palette)
    data = _file(_info40(8, 0, colors=300), table, [row.tobytes() for row in index])
    return data, palette[index]


def pal4_os2v2() -> tuple[bytes, np.ndarray]:
    """OS/2 v2 (64-byte header), 4 bits per pixel, a 16-colour palette of 4-byte entries."""
    palette, index = _palette_image(16)
    info = struct.pack("<IiiHHIIiiII", 64, _W, _H, 1, 4, 0, 0, 2835, 2835, 16, 0) + bytes(24)
    table = b"".join(bytes((b, g, r, 0)) for r, g, b in palette)
    rows = []
    for row in index:
        padded = np.append(row, 0) if len(row) % 2 else row
        rows.append(((padded[0::2] << 4) | padded[1::2]).astype(np.uint8).tobytes())
    return _file(info, table, rows), palette[index]


def os2v2_short(bpp: int) -> tuple[bytes, np.ndarray]:
    """OS/2 v2 with the shortest header it allows (16 bytes: size, width, height, planes, bits;
    every later field 0) and a palette of 2**bpp 4-byte entries."""
    palette, index = _palette_image(1 << bpp)
    info = struct.pack("<IiiHH", 16, _W, _H, 1, bpp)
    table = b"".join(bytes((b, g, r, 0)) for r, g, b in palette)
    if bpp == 8:
        rows = [row.tobytes() for row in index]
    else:
        rows = []
        for row in index:
            padded = np.append(row, 0) if len(row) % 2 else row
            rows.append(((padded[0::2] << 4) | padded[1::2]).astype(np.uint8).tobytes())
    return _file(info, table, rows), palette[index]


def rle8_overrun() -> tuple[bytes, np.ndarray]:
    """BI_RLE8 whose runs overrun: every row's last run is 5 pixels too long (clipped at the
    row's end by Windows and browsers), and rows go on past the declared height."""
    palette, index = _palette_image(256)
    table = b"".join(bytes((b, g, r, 0)) for r, g, b in palette)
    data = bytearray()
    for row in list(index[::-1]) + [index[0]]:  # one row more than the height
        for v in row[:-1]:
            data += bytes((1, int(v)))
        data += bytes((6, int(row[-1])))  # the last pixel, 5 past the row's end
        data += b"\x00\x00"
    data += b"\x00\x01"
    info = _info40(8, 1, size=len(data), colors=256)
    offset = 14 + 40 + len(table)
    head = b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset)
    return head + info + table + bytes(data), palette[index]


def rle8_wrapping_runs() -> tuple[bytes, np.ndarray]:
    """BI_RLE8 from an encoder that lets runs wrap into the next row and writes no end-of-line:
    runs of 255 pixels in a 7-pixel row, 40 bytes in all (the uncompressed size, so TensorFlow,
    which ignores the compression, decodes it). The first run fills the bottom row (cut at its
    end), the rest of the rows are never reached: index 0, as Windows leaves them."""
    palette, _ = _palette_image(256)
    table = b"".join(bytes((b, g, r, 0)) for r, g, b in palette)
    data = bytes((255, 9)) * 19 + b"\x00\x01"
    info = _info40(8, 1, size=len(data), colors=256)
    offset = 14 + 40 + len(table)
    head = b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset)
    index = np.zeros((_H, _W), np.uint8)
    index[-1] = 9  # the bottom row, first in the file
    return head + info + table + data, palette[index]


VARIANTS = {
    "rgb32bf": rgb32bf,
    "rgba32abf": rgba32abf,
    "rgb32-111110": rgb32_111110,
    "pal8oversize": pal8_oversize,
    "pal4os2v2": pal4_os2v2,
    "pal4os2v2-16": lambda: os2v2_short(4),
    "pal8os2v2-16": lambda: os2v2_short(8),
    "rle8overrun": rle8_overrun,
    "rle8wrapping": rle8_wrapping_runs,
}


def build(name: str) -> tuple[bytes, np.ndarray]:
    return VARIANTS[name]()
