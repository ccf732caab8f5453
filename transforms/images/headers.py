"""Container header parsers (JPEG markers, PNG chunks, GIF blocks, WebP, EXIF, ICC), no decoding."""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Any

# Package-private: transforms.images.check is the entry point; its sibling modules use these.
__all__ = [
    "exif_orientation",
    "Header",
    "ORIENTATION_TRANSPOSE",
    "probe_gif",
    "probe_jpeg",
    "probe_png",
    "skip_gif_blocks",
    "SOF_NAMES",
    "SOF_PROGRESSIVE",
    "webp_alpha",
    "webp_as_is",
    "webp_size",
]


# JPEG start-of-frame markers (all coding processes); C4 (DHT), C8 (JPG), CC (DAC) are not frames.
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
SOF_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
SOF_NAMES = {
    0xC0: "baseline",
    0xC1: "extended sequential",
    0xC2: "progressive",
    0xC3: "lossless",
    0xC5: "hierarchical",
    0xC6: "hierarchical progressive",
    0xC7: "hierarchical lossless",
    0xC9: "arithmetic sequential",
    0xCA: "arithmetic progressive",
    0xCB: "arithmetic lossless",
    0xCD: "hierarchical arithmetic",
    0xCE: "hierarchical arithmetic progressive",
    0xCF: "hierarchical arithmetic lossless",
}


# EXIF Orientation values 2..8 -> the Pillow transpose that makes the pixels upright (the same
# table as PIL.ImageOps.exif_transpose). 1 is upright; other values are invalid and ignored.
ORIENTATION_TRANSPOSE = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}


# ICC profiles are tens of KB (v4 with LUTs a few hundred); larger is junk or a zlib bomb.
_MAX_ICC_BYTES = 4 << 20


@dataclasses.dataclass
class Header:
    """What the container header says, read without decoding pixels (all fields best effort)."""

    width: int = 0
    height: int = 0
    channels: int = 3
    frames: int = 1
    orientation: int = 1
    complete: bool = False  # the parser reached the pixel data (JPEG SOS, PNG IDAT, GIF frame)
    ran_out: bool = False  # the header parser hit the end of the data
    icc: bytes | None = None  # the embedded ICC profile, kept on transcodes
    upright_on_load: bool = False  # Pillow applies the orientation itself (TIFF) when loading
    jpeg_sof: int = 0
    jpeg_precision: int = 8
    bit_depth: int = 8  # bits per sample of a PNG (IHDR: 1, 2, 4, 8 or 16)
    jpeg_sos_at: int = -1
    pil: Any = None  # the lazily opened Pillow image of a non-stored format
    isolated: bool = False  # Pillow runs in a decoder subprocess for this format (decode_worker)
    webp_as_is: bool = False  # a WebP TensorFlow decodes with channels=3 (see webp_as_is)


def _u16be(b, i: int) -> int:
    return (b[i] << 8) | b[i + 1]


def exif_orientation(tiff: bytes) -> int:
    """The Orientation tag (0x0112) of IFD0 of a TIFF-structured EXIF block; 1 if absent/bad."""
    if tiff.startswith(b"Exif\x00\x00"):
        tiff = tiff[6:]
    if len(tiff) < 8:
        return 1
    order = {b"II": "little", b"MM": "big"}.get(bytes(tiff[:2]))
    if order is None:
        return 1
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 1
    count = int.from_bytes(tiff[ifd : ifd + 2], order)
    for k in range(min(count, 1024)):
        entry = ifd + 2 + 12 * k
        if entry + 12 > len(tiff):
            break
        if int.from_bytes(tiff[entry : entry + 2], order) == 0x0112:
            kind = int.from_bytes(tiff[entry + 2 : entry + 4], order)
            size = 2 if kind in (3, 8) else 4 if kind in (4, 9) else 0
            value = int.from_bytes(tiff[entry + 8 : entry + 8 + size], order) if size else 1
            return value if value in ORIENTATION_TRANSPOSE else 1
    return 1


def probe_jpeg(data: bytes) -> Header:
    """Walk the markers up to the first SOS, tolerating garbage between them as libjpeg does."""
    h = Header()
    n = len(data)
    i = 2
    h.ran_out = True  # unless a SOS, an EOI or a broken segment length ends the walk
    icc_parts: list[tuple[int, bytes]] = []
    while i + 4 <= n:
        if data[i] != 0xFF:
            i = data.find(b"\xff", i)
            if i < 0:
                break
            continue
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        i += 2
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
            continue
        if marker == 0xD9:
            h.ran_out = False
            break
        seg_end = i + _u16be(data, i)
        if seg_end < i + 2:
            h.ran_out = False  # a length below 2 is corruption, not truncation
            break
        body = i + 2
        if marker in _SOF and not h.jpeg_sof and seg_end <= n and seg_end - body >= 6:
            h.jpeg_sof = marker
            h.jpeg_precision = data[body]
            h.height = _u16be(data, body + 1)
            h.width = _u16be(data, body + 3)
            h.channels = 1 if data[body + 5] == 1 else 3  # CMYK/YCCK decode to RGB in TF
        elif marker == 0xE1 and h.orientation == 1 and data.startswith(b"Exif\x00\x00", body):
            h.orientation = exif_orientation(data[body + 6 : min(seg_end, n)])
        elif marker == 0xE2 and data.startswith(b"ICC_PROFILE\x00", body) and seg_end <= n:
            icc_parts.append((data[body + 12], data[body + 14 : seg_end]))
        elif marker == 0xDA:
            h.jpeg_sos_at = i - 2
            h.complete = bool(h.jpeg_sof)
            h.ran_out = False
            break
        i = seg_end
    if icc_parts:  # APP2 chunks, numbered from 1, hold one profile in pieces
        h.icc = b"".join(part for _, part in sorted(icc_parts))
    return h


def probe_png(data: bytes) -> Header:
    """IHDR, then the chunks before the first IDAT (tRNS, acTL, eXIf)."""
    h = Header()
    n = len(data)
    if n < 33 or data[12:16] != b"IHDR":
        return h
    h.width, h.height = struct.unpack(">II", data[16:24])
    h.bit_depth = data[24]
    color_type = data[25]
    trns = False
    exif_seen = False
    i = 33
    while i + 8 <= n:
        length = int.from_bytes(data[i : i + 4], "big")
        kind = data[i + 4 : i + 8]
        if kind == b"IDAT":
            h.complete = True
            break
        if kind == b"tRNS":
            trns = True
        elif kind == b"acTL" and length >= 8 and i + 12 <= n:
            h.frames = max(1, int.from_bytes(data[i + 8 : i + 12], "big"))
        elif kind == b"eXIf":
            exif_seen = True
            h.orientation = exif_orientation(data[i + 8 : min(i + 8 + length, n)])
        elif kind == b"iCCP":
            h.icc = _inflate_icc(data[i + 8 : min(i + 8 + length, n)])
        i += 12 + length
    if not exif_seen and h.complete:
        # eXIf after IDAT is legal; PNG has no other place where these 4 bytes mean this.
        k = data.find(b"eXIf", i)
        if k >= 4:
            length = int.from_bytes(data[k - 4 : k], "big")
            if k + 4 + length <= n:
                h.orientation = exif_orientation(data[k + 4 : k + 4 + length])
    # tf.io.decode_image(channels=0): palette + tRNS expands to RGBA; gray/RGB tRNS is ignored.
    h.channels = {0: 1, 2: 3, 3: 4 if trns else 3, 4: 2, 6: 4}.get(color_type, 3)
    return h


def _inflate_icc(body: bytes) -> bytes | None:
    """The profile of a PNG iCCP chunk body (name, 0, method 0, zlib data), or None."""
    sep = body.find(b"\x00")
    if sep < 0 or sep + 2 > len(body):
        return None
    try:
        # A real profile is well under 1 MB; the cap keeps a zlib bomb in iCCP harmless.
        profile = zlib.decompressobj().decompress(body[sep + 2 :], _MAX_ICC_BYTES)
    except zlib.error:
        return None
    return profile if len(profile) < _MAX_ICC_BYTES else None


def skip_gif_blocks(data: bytes, i: int) -> int:
    n = len(data)
    while i < n:
        size = data[i]
        i += 1 + size
        if size == 0:
            return i
    return n + 1  # ran off the end


def probe_gif(data: bytes) -> Header:
    """Screen size and the first two image descriptors (enough to tell animated from still)."""
    h = Header()
    n = len(data)
    if n < 13:
        return h
    h.width, h.height = struct.unpack("<HH", data[6:10])
    flags = data[10]
    i = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
    frames = 0
    while i < n and frames < 2:
        block = data[i]
        if block == 0x3B:  # trailer
            break
        if block == 0x21:  # extension: label, then data sub-blocks
            i = skip_gif_blocks(data, i + 2)
        elif block == 0x2C:  # image descriptor
            if i + 10 > n:
                break
            fw, fh = struct.unpack("<HH", data[i + 5 : i + 9])
            if frames == 0:
                # TensorFlow's GIF decoder sizes its output by the larger of screen and frame.
                h.width, h.height = max(h.width, fw), max(h.height, fh)
                h.complete = True
            lflags = data[i + 9]
            i += 10 + (3 * (2 << (lflags & 7)) if lflags & 0x80 else 0)
            i = skip_gif_blocks(data, i + 1)  # + LZW minimum code size byte
            frames += 1
        else:
            break
    h.frames = max(frames, 1)
    return h


def webp_size(data: bytes) -> tuple[int, int]:
    """Canvas size from a WebP header, (0, 0) if unreadable. Read before Pillow: opening a WebP
    in Pillow creates libwebp's animation decoder, which allocates the canvas at once."""
    if len(data) < 30 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return 0, 0
    chunk = data[12:16]
    if chunk == b"VP8X":
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        return (
            int.from_bytes(data[26:28], "little") & 0x3FFF,
            int.from_bytes(data[28:30], "little") & 0x3FFF,
        )
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    return 0, 0


def webp_as_is(data: bytes) -> bool:
    """Whether TensorFlow decodes this WebP with channels=3: libwebp (TensorFlow's decoder too)
    reports neither alpha (VP8X flag, VP8L bit) nor animation (VP8X flag). TensorFlow refuses
    channels=3 on the others, and TF 2.21 corrupts the heap decoding an animated WebP with
    channels=0: they are decoded by Pillow and stored as PNG, never handed to TensorFlow."""
    animated = data[12:16] == b"VP8X" and len(data) > 20 and bool(data[20] & 0x02)
    return not animated and not webp_alpha(data)


def webp_alpha(data: bytes) -> bool:
    """Whether libwebp reports alpha: VP8X's flag or VP8L's bit."""
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) > 20:
        return bool(data[20] & 0x10)
    if chunk == b"VP8L" and len(data) >= 25:
        return bool((int.from_bytes(data[21:25], "little") >> 28) & 1)
    return False
