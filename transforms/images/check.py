"""Decide, for one file's bytes, whether TensorFlow can train on it: limits, decode, transcode."""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import struct
import zlib
from typing import Any

import numpy as np

__all__ = [
    "MAX_PROGRESSIVE_SCANS",
    "REASONS",
    "STORED_FORMATS",
    "TRANSCODE_MODES",
    "TRANSCODE_REASONS",
    "JPEG_VERIFY_MODES",
    "RESIZE_FILTERS",
    "CheckOptions",
    "ImageInfo",
    "Rejected",
    "check_file_size",
    "check_image",
    "encode_for_storage",
    "sniff_container",
    "sniff_format",
]

# The stable reject-reason taxonomy written to rejected.jsonl (docs/README_rejects.md). Keys are a
# public interface: add new ones, never rename or reuse one.
REASONS = {
    "unreadable": "the file could not be read (missing, permission, storage error)",
    "empty_file": "the file has zero bytes",
    "file_too_large": "the file is larger than --max_file_mb",
    "not_an_image": "the bytes are no image format we know (text, HTML, PDF, zip, ...)",
    "unsupported_format": "an image format TensorFlow does not decode (TIFF, PSD, HEIC, ...); "
    "--transcode png|jpeg converts those Pillow can decode. With --transcode none, also BMP "
    "and WebP",
    "truncated": "the image data ends early (cut-off download or copy)",
    "corrupt": "the header or the compressed data is damaged; detail names the decoder error "
    "(with --jpeg_verify strict, also JPEGs libjpeg warns about: data it repaired silently)",
    "too_many_pixels": "the header declares more than --max_pixels pixels (decompression bomb)",
    "too_many_scans": "a progressive JPEG with more scans than any encoder writes (CPU bomb)",
    "too_small": "the shorter side is below --min_side",
    "animated": "an animated image (GIF, APNG, WebP, multi-page TIFF) and --animated reject",
    "changed_during_run": "the file's bytes changed between inspection and writing",
    "decoder_error": "a decoder (or our own per-file code) failed on this file in a way nobody "
    "anticipated, or its decoder process died; detail names the exception or the signal. "
    "The file is left out, the job goes on",
}

# Why the stored bytes differ from the source (image/transcode_reason, comma-joined in this order).
TRANSCODE_REASONS = {
    "unsupported_format": "the source format is not stored as is and --transcode png|jpeg is set",
    "bmp_to_png": "a BMP: TensorFlow's BMP decoder ignores palettes and compression, so its "
    "pixels are stored as lossless PNG (by default; --transcode jpeg stores JPEG)",
    "webp_to_png": "a WebP with alpha or animation: tf.io.decode_image(channels=3) refuses those, "
    "so its (first frame's) pixels are stored as lossless PNG",
    "animated_first_frame": "an animated or multi-frame source; its first frame is stored",
    "exif_orientation": "EXIF says the pixels are stored rotated/flipped; TensorFlow ignores EXIF, "
    "so the upright pixels are stored (--apply_exif_orientation)",
    "max_side": "the longer side exceeded --max_side; stored downscaled",
}

# Formats stored as they are. Each decodes with tf.io.decode_image(channels=3,
# expand_animations=False) and with tf.io.decode_jpeg/decode_png (one kernel serves all three)
# on every TF 2 release. TF 2.21 also decodes BMP and WebP, but its BMP decoder ignores palettes
# and compression (it returns wrong pixels without an error), so BMP is stored as PNG; a still
# WebP without alpha is stored as is unless --transcode none (decode_image, which the reader and
# `verify` use for every non-JPEG, reads it; TF < 2.15 does not), any other WebP as PNG.
STORED_FORMATS = ("jpeg", "png", "gif")

# --transcode: auto (the default) keeps every image TensorFlow decodes (BMP -> PNG, WebP as is or
# PNG) and rejects the rest; none is the strict mode of old (JPEG/PNG/GIF only); png|jpeg also
# re-encode every other format Pillow decodes here (in a decoder subprocess, see decode_worker).
TRANSCODE_MODES = ("auto", "none", "png", "jpeg")

# Formats TensorFlow decodes that are kept under --transcode auto|png|jpeg (and that --transcode
# none rejects without opening them).
_TF_DECODABLE_OTHER = ("bmp", "webp")

# Real encoders write a handful of progressive scans (Pillow 10, mozjpeg ~10-15). libjpeg redoes
# work per scan over the whole image, so a crafted file with thousands of tiny scans takes minutes
# to decode from a few KB; 500 leaves a wide margin over any encoder.
MAX_PROGRESSIVE_SCANS = 500

# TensorFlow's JPEG and PNG kernels refuse outputs of 2**29 or more (bytes for JPEG, pixels for
# PNG); a --max_pixels above that surfaces as too_many_pixels, not as a decoder error.
_TF_MAX_OUTPUT = 1 << 29

# Magic bytes, checked in this order: exactly the prefixes TensorFlow's own classifier
# (decode_image_op.cc) uses, so "what we call a GIF" is "what TensorFlow decodes as GIF" (TF
# and giflib accept "GIF8" + any version bytes).
_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF8", "gif"),
)

# Signatures of formats nobody here can decode: named in the detail, always unsupported_format.
_UNDECODABLE = (
    (b"\xff\x0a", "JPEG XL codestream"),
    (b"\x00\x00\x00\x0cJXL \r\n\x87\n", "JPEG XL"),
)
_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1")

# Signatures of common non-image files, only to make the not_an_image detail readable.
_NON_IMAGE = (
    (b"%PDF", "PDF document"),
    (b"PK\x03\x04", "ZIP archive (also .docx/.xlsx/.apk)"),
    (b"PK\x05\x06", "empty ZIP archive"),
    (b"\x1f\x8b", "gzip data"),
    (b"Rar!\x1a\x07", "RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
    (b"\x7fELF", "ELF executable"),
    (b"%!PS", "PostScript document"),
    (b"{\\rtf", "RTF document"),
    (b"\xd0\xcf\x11\xe0", "MS Office (OLE) document"),
)

# JPEG start-of-frame markers (all coding processes); C4 (DHT), C8 (JPG), CC (DAC) are not frames.
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_SOF_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_SOF_NAMES = {
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
_ORIENTATION_TRANSPOSE = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}

# Malformed headers make Pillow plugins raise these (Image.open itself catches the first four);
# anything else is a bug and propagates.
_PIL_HEADER_ERRORS = (
    SyntaxError,
    IndexError,
    TypeError,
    struct.error,
    ValueError,
    KeyError,
    EOFError,
    ZeroDivisionError,
    OSError,
    NotImplementedError,
)
# ICC profiles are tens of KB (v4 with LUTs a few hundred); larger is junk or a zlib bomb.
_MAX_ICC_BYTES = 4 << 20

# The stored mode -> channels that tf.io.decode_image(channels=0) yields for it.
_MODE_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


# --jpeg_verify: dct (1/8-scale libjpeg decode, the default), full (full-size decode), strict (dct,
# and also reject JPEGs libjpeg had to repair: see _libjpeg_warning).
JPEG_VERIFY_MODES = ("dct", "full", "strict")

# --resize_filter: Pillow's resampling filter for --max_side downscales. Measured on 450x400
# photos going to 256 (CPU us per image): lanczos 1,940, bicubic 1,350, bilinear 780 (all
# antialiased: the kernel widens with the scale factor). Pillow resamples 8-bit images in fixed
# point, so a filter's output is a pure function of the pixels (shards stay byte-identical).
RESIZE_FILTERS = ("lanczos", "bicubic", "bilinear")

# 89.5 Mpx is Pillow's own decompression-bomb threshold: larger headers are refused before decoding.
DEFAULT_MAX_PIXELS = 89_478_485


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """Per-image limits and transcode choices (a subset of ConvertConfig, same names)."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    min_side: int = 1
    max_file_mb: float = 0.0
    apply_exif_orientation: bool = True
    animated: str = "first_frame"
    transcode: str = "auto"
    max_side: int = 0
    jpeg_quality: int = 95
    jpeg_verify: str = "dct"
    resize_filter: str = "lanczos"

    def __post_init__(self):
        if self.max_pixels < 1:
            raise ValueError(f"--max_pixels must be >= 1, got {self.max_pixels}")
        if self.min_side < 1:
            raise ValueError(f"--min_side must be >= 1, got {self.min_side}")
        if self.max_file_mb < 0:
            raise ValueError(f"--max_file_mb must be >= 0 (0: no limit), got {self.max_file_mb}")
        if self.animated not in ("first_frame", "reject"):
            raise ValueError(f"--animated must be first_frame or reject, got {self.animated!r}")
        if self.transcode not in TRANSCODE_MODES:
            raise ValueError(
                f"--transcode must be one of {', '.join(TRANSCODE_MODES)}, got {self.transcode!r}"
            )
        if self.max_side < 0:
            raise ValueError(f"--max_side must be >= 0 (0: keep size), got {self.max_side}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"--jpeg_quality must be in 1..100, got {self.jpeg_quality}")
        if self.resize_filter not in RESIZE_FILTERS:
            raise ValueError(
                f"--resize_filter must be one of {', '.join(RESIZE_FILTERS)}, "
                f"got {self.resize_filter!r}"
            )
        if self.jpeg_verify not in JPEG_VERIFY_MODES:
            raise ValueError(
                f"--jpeg_verify must be one of {', '.join(JPEG_VERIFY_MODES)}, "
                f"got {self.jpeg_verify!r}"
            )
        if self.jpeg_verify == "strict" and importlib.util.find_spec("simplejpeg") is None:
            raise ValueError(
                "--jpeg_verify strict needs the simplejpeg package, which is not installed: "
                "pip install simplejpeg==1.9.0 (it is in requirements.txt)"
            )


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What the check learned. height/width/channels/format describe the bytes that will be stored.

    channels is what `tf.io.decode_image(channels=0)` yields for the stored bytes (1 gray, 2 gray
    + alpha, 3 RGB, 4 RGBA); stats are over `decode_image(channels=3)` of the stored bytes.
    """

    format: str
    source_format: str
    height: int
    width: int
    channels: int
    transcode: str = ""
    stats: tuple | None = None


class Rejected(Exception):
    """The file must not be written; `reason` is a key of REASONS, `detail` says why."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass
class _Header:
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
    jpeg_sos_at: int = -1
    pil: Any = None  # the lazily opened Pillow image of a non-stored format
    isolated: bool = False  # Pillow runs in a decoder subprocess for this format (decode_worker)
    webp_as_is: bool = False  # a WebP TensorFlow decodes with channels=3 (see _webp_as_is)


# ----------------------------------------------------------------------------- format detection
def sniff_format(data: bytes) -> str | None:
    """The format TensorFlow would decode these bytes as ("jpeg", "png", "gif"), else None."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    return None


def _cut_signature(data: bytes) -> str | None:
    """The format whose signature these (too few) bytes begin, e.g. 5 bytes of a PNG signature."""
    for magic, name in _MAGIC:
        if len(data) < len(magic) and magic.startswith(data):
            return name
    return None


def _describe_non_image(data: bytes) -> str:
    head = data[:1024]
    for magic, what in _NON_IMAGE:
        if head.startswith(magic):
            return what
    if head[4:8] == b"ftyp":
        return f"ISO media file (brand {head[8:12].decode('latin-1')!r}; video or audio?)"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html")) or b"<html" in text or b"<body" in text:
        return "HTML document (an error page saved as an image?)"
    if text.startswith(b"<"):
        return "XML/markup document"
    try:
        head.decode("utf-8")
        is_text = True
    except UnicodeDecodeError as e:
        is_text = e.start >= len(head) - 3  # a multi-byte character cut by the 1024-byte window
    if is_text:
        snippet = head[:40].decode("utf-8", "replace")
        return f"text ({len(data)} bytes, starting {snippet!r})"
    return f"unknown binary data (first bytes {data[:8].hex(' ')})"


def _undecodable_image(data: bytes) -> str | None:
    """Name an image format that no decoder here reads (HEIC, JPEG XL, SVG), else None."""
    for magic, what in _UNDECODABLE:
        if data.startswith(magic):
            return what
    if data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS:
        return f"HEIF/HEIC ({data[8:12].decode('latin-1')})"
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in head):
        return "SVG (vector graphics)"
    return None


# ----------------------------------------------------------------------------- header parsers
def _u16be(b, i: int) -> int:
    return (b[i] << 8) | b[i + 1]


def _exif_orientation(tiff: bytes) -> int:
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
            return value if value in _ORIENTATION_TRANSPOSE else 1
    return 1


def _probe_jpeg(data: bytes) -> _Header:
    """Walk the markers up to the first SOS, tolerating garbage between them as libjpeg does."""
    h = _Header()
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
            h.orientation = _exif_orientation(data[body + 6 : min(seg_end, n)])
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


def _probe_png(data: bytes) -> _Header:
    """IHDR, then the chunks before the first IDAT (tRNS, acTL, eXIf)."""
    h = _Header()
    n = len(data)
    if n < 33 or data[12:16] != b"IHDR":
        return h
    h.width, h.height = struct.unpack(">II", data[16:24])
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
            h.orientation = _exif_orientation(data[i + 8 : min(i + 8 + length, n)])
        elif kind == b"iCCP":
            h.icc = _inflate_icc(data[i + 8 : min(i + 8 + length, n)])
        i += 12 + length
    if not exif_seen and h.complete:
        # eXIf after IDAT is legal; PNG has no other place where these 4 bytes mean this.
        k = data.find(b"eXIf", i)
        if k >= 4:
            length = int.from_bytes(data[k - 4 : k], "big")
            if k + 4 + length <= n:
                h.orientation = _exif_orientation(data[k + 4 : k + 4 + length])
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


def _skip_gif_blocks(data: bytes, i: int) -> int:
    n = len(data)
    while i < n:
        size = data[i]
        i += 1 + size
        if size == 0:
            return i
    return n + 1  # ran off the end


def _probe_gif(data: bytes) -> _Header:
    """Screen size and the first two image descriptors (enough to tell animated from still)."""
    h = _Header()
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
            i = _skip_gif_blocks(data, i + 2)
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
            i = _skip_gif_blocks(data, i + 1)  # + LZW minimum code size byte
            frames += 1
        else:
            break
    h.frames = max(frames, 1)
    return h


def _webp_size(data: bytes) -> tuple[int, int]:
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


def _pillow_open(data: bytes, formats: tuple[str, ...]):
    """Open lazily (header only) with the Pillow plugins of `formats` only, or None if none accepts.

    The restriction of Image.open(fp, formats=...), but calling the plugins directly: Image.open
    would also run Pillow's own decompression-bomb check (89.5 Mpx warning, 179 Mpx error);
    --max_pixels replaces it, checked by us before anything is decoded. A plugin outside
    `formats` never runs: less attack surface.
    """
    from PIL import Image

    Image.init()
    fp = io.BytesIO(data)
    prefix = data[:16]
    for fmt in formats:
        if fmt not in Image.OPEN:
            continue  # this Pillow build lacks the plugin
        factory, accept = Image.OPEN[fmt]
        try:
            if accept is not None:
                accepted = accept(prefix)
                if not accepted or isinstance(accepted, str):
                    continue
            fp.seek(0)
            return factory(fp, "")
        except Image.DecompressionBombError as e:
            raise Rejected("too_many_pixels", f"Pillow ({fmt}): {e}") from e
        except _PIL_HEADER_ERRORS:
            continue
    return None


# BMP info-header sizes: 12 core (OS/2 v1), 40 v3, 52/56 v3 + RGB(A) masks, 64 OS/2 v2, 108 v4,
# 124 v5. A "BM" file with any other size is no BMP any decoder here reads.
_BMP_HEADER_SIZES = (12, 40, 52, 56, 64, 108, 124)


def _is_bmp(d: bytes) -> bool:
    size = int.from_bytes(d[14:18], "little")
    return d[:2] == b"BM" and len(d) >= 18 and size in _BMP_HEADER_SIZES


def _is_tga(d: bytes) -> bool:
    """TGA has no magic: a plausible 18-byte header (colour-map type, image type, depth, sides)."""
    return (
        len(d) >= 18
        and d[1] in (0, 1)
        and d[2] in (1, 2, 3, 9, 10, 11)
        and d[16] in (1, 8, 15, 16, 24, 32)
        and int.from_bytes(d[12:14], "little") > 0
        and int.from_bytes(d[14:16], "little") > 0
    )


# Image containers named from their first 64 bytes without running any decoder, checked in order.
_CONTAINERS = (
    (_is_bmp, "bmp"),
    (lambda d: d[:4] == b"RIFF" and d[8:12] == b"WEBP", "webp"),
    (lambda d: d[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"), "tiff"),
    (lambda d: d[:4] == b"8BPS", "psd"),
    (lambda d: d[:4] == b"\x00\x00\x01\x00" and d[4:6] not in (b"", b"\x00\x00"), "ico"),
    (lambda d: d[:4] == b"\x00\x00\x02\x00" and d[4:6] not in (b"", b"\x00\x00"), "cur"),
    (lambda d: len(d) > 2 and d[0] == 0x50 and 0x31 <= d[1] <= 0x37 and d[2] in b" \n\r\t", "ppm"),
    (lambda d: d[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n", "jpeg2000"),
    (lambda d: d[:4] == b"\xff\x4f\xff\x51", "jpeg2000"),  # a bare J2K codestream
    (lambda d: d[:4] == b"qoif", "qoi"),
    (lambda d: d[4:8] == b"ftyp" and d[8:12] in (b"avif", b"avis"), "avif"),
    (lambda d: d[:4] == b"DDS ", "dds"),
    (lambda d: d[:2] == b"\x01\xda" and len(d) > 3 and d[2] in (0, 1), "sgi"),
    (lambda d: d[:4] == b"\xc5\xd0\xd3\xc6" or (d[:4] == b"%!PS" and b"EPSF" in d[:40]), "eps"),
    (lambda d: d[:4] in (b"\xd7\xcd\xc6\x9a", b"\x01\x00\x09\x00"), "wmf"),
    (lambda d: d[:4] == b"\x01\x00\x00\x00" and d[40:44] == b" EMF", "emf"),
    (lambda d: len(d) >= 64 and d[0] == 0x0A and d[1] in (0, 2, 3, 4, 5) and d[2] == 1, "pcx"),
    (_is_tga, "tga"),
)

# Our name -> the only Pillow plugin allowed to open it (a name of Image.ID).
_PIL_PLUGINS = {
    "bmp": ("BMP",),
    "webp": ("WEBP",),
    "gif": ("GIF",),  # the first frame of an animated GIF
    "tiff": ("TIFF",),
    "psd": ("PSD",),
    "ico": ("ICO",),
    "cur": ("CUR",),
    "ppm": ("PPM",),
    "jpeg2000": ("JPEG2000",),
    "qoi": ("QOI",),
    "avif": ("AVIF",),
    "dds": ("DDS",),
    "sgi": ("SGI",),
    "pcx": ("PCX",),
    "tga": ("TGA",),
}
# Formats that open but whose pixels need an external program (Ghostscript, Windows GDI).
_NO_PIXELS = {"eps": "needs Ghostscript", "wmf": "a vector metafile", "emf": "a vector metafile"}

# Decoded by Pillow in the converter's own process: the formats kept by default, whose decoders
# are small and heavily exercised (BMP and GIF are Pillow's own C, WebP is libwebp as in
# TensorFlow). Every other plugin runs in a decoder subprocess that may die (decode_worker).
_IN_PROCESS = ("bmp", "webp", "gif")


def sniff_container(data: bytes) -> str | None:
    """The image format these bytes start like ("jpeg", "png", "gif", "bmp", "webp", "tiff",
    "psd", ...), from magic bytes only (no decoder runs), else None."""
    fmt = sniff_format(data)
    if fmt is not None:
        return fmt
    head = data[:64]
    for test, name in _CONTAINERS:
        if test(head):
            return name
    return None


def _pil_header(im, fmt: str) -> _Header:
    """What a lazily opened Pillow image says about itself. Plugins parse lazily (PSD layers,
    TIFF frames and tags), so their errors here are this file's damage."""
    try:
        h = _Header(width=im.size[0], height=im.size[1], complete=True)
        h.frames = int(getattr(im, "n_frames", 1) or 1)
        # Our own EXIF reader: Pillow's getexif() warns on damaged EXIF, and it must stay quiet.
        if isinstance(im.info.get("exif"), bytes):
            h.orientation = _exif_orientation(im.info["exif"])
        elif hasattr(im, "tag_v2"):  # TIFF: Orientation is a tag of the image's own IFD
            value = im.tag_v2.get(0x0112, 1)
            h.orientation = value if value in _ORIENTATION_TRANSPOSE else 1
            # Pillow (>= 8) transposes TIFFs on load, always; its size is already the upright one.
            h.upright_on_load = True
    except _PIL_HEADER_ERRORS as e:
        raise Rejected("corrupt", f"Pillow ({fmt.upper()}): {type(e).__name__}: {e}") from e
    return h


def _pil_pixels(im):
    """The first frame of a lazily opened Pillow image in L, LA, RGB or RGBA, and its ICC."""
    from PIL import Image

    try:
        im.seek(0)
        im.load()
        return _normalize_mode(im), im.info.get("icc_profile")
    except Image.DecompressionBombError as e:
        raise Rejected("too_many_pixels", f"Pillow ({im.format}): {e}") from e
    except _PIL_HEADER_ERRORS as e:
        reason = "truncated" if "truncated" in str(e) else "corrupt"
        raise Rejected(reason, f"Pillow ({im.format}): {type(e).__name__}: {e}") from e


def _webp_as_is(data: bytes) -> bool:
    """Whether TensorFlow decodes this WebP with channels=3: libwebp (TensorFlow's decoder too)
    reports neither alpha (VP8X flag, VP8L bit) nor animation (VP8X flag). TensorFlow refuses
    channels=3 on the others, and TF 2.21 corrupts the heap decoding an animated WebP with
    channels=0: they are decoded by Pillow and stored as PNG, never handed to TensorFlow."""
    animated = data[12:16] == b"VP8X" and len(data) > 20 and bool(data[20] & 0x02)
    return not animated and not _webp_alpha(data)


def _webp_alpha(data: bytes) -> bool:
    """Whether libwebp reports alpha: VP8X's flag or VP8L's bit."""
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) > 20:
        return bool(data[20] & 0x10)
    if chunk == b"VP8L" and len(data) >= 25:
        return bool((int.from_bytes(data[21:25], "little") >> 28) & 1)
    return False


def _not_decodable(data: bytes, fmt: str) -> Rejected:
    """A container whose plugin could not even open it: cut (RIFF size) or damaged."""
    if data[:4] == b"RIFF" and int.from_bytes(data[4:8], "little") + 8 > len(data):
        return Rejected(
            "truncated",
            f"the RIFF header declares {int.from_bytes(data[4:8], 'little') + 8} bytes; "
            f"the file has {len(data)}",
        )
    return Rejected("corrupt", f"Pillow cannot open this {fmt.upper()} (damaged header)")


def _probe_other(data: bytes, opts: CheckOptions) -> tuple[str, _Header]:
    """A format TensorFlow does not store as is: its name and header, or Rejected.

    The name comes from magic bytes; a format these options do not keep is rejected before any
    plugin runs. BMP/WebP are opened in this process, every other format in a decoder
    subprocess (decode_worker).
    """
    fmt = sniff_container(data)
    if fmt is None:
        what = _undecodable_image(data)
        if what:
            raise Rejected(
                "unsupported_format",
                f"{what}: neither TensorFlow's decode_image "
                "nor Pillow decodes it here; convert it before the run",
            )
        raise Rejected("not_an_image", _describe_non_image(data))
    if opts.transcode == "none":
        raise Rejected(
            "unsupported_format",
            f"{fmt.upper()} is not stored with --transcode none (only JPEG, PNG, GIF); drop "
            "--transcode none to keep BMP and WebP, or pass --transcode png|jpeg",
        )
    if fmt in _NO_PIXELS:
        raise Rejected(
            "unsupported_format", f"{fmt.upper()} is {_NO_PIXELS[fmt]}; cannot transcode"
        )
    if fmt not in _TF_DECODABLE_OTHER and opts.transcode == "auto":
        raise Rejected(
            "unsupported_format",
            f"TensorFlow does not decode {fmt.upper()}; pass --transcode png or "
            "--transcode jpeg to store it re-encoded",
        )
    if fmt in _IN_PROCESS:
        im = _pillow_open(data, _PIL_PLUGINS[fmt])
        if im is None:
            return fmt, _Header()  # _source_pixels names the damage
        h = _pil_header(im, fmt)
        h.pil = im
    else:
        from transforms import decode_worker

        h = decode_worker.probe(data, _PIL_PLUGINS.get(fmt, ()))
        if h is None:
            h = _Header()
        h.isolated = True
    if fmt == "webp":
        h.channels = 4 if _webp_alpha(data) else 3
        h.webp_as_is = _webp_as_is(data)
    return fmt, h


# ----------------------------------------------------------------------------- TF decode
def _tf():
    import tensorflow as tf  # Deferred: importing this module must stay cheap for Beam pickling.

    return tf


def _tf_message(e) -> str:
    lines = [ln for ln in str(getattr(e, "message", e)).splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    # Eager errors start with "{{function_node __wrapped__DecodeJpeg_device_...}} ".
    if text.startswith("{{") and "}}" in text:
        text = text.split("}}", 1)[1].strip()
    return text.replace(" [Op:DecodeImage]", "").replace(" [Op:DecodeJpeg]", "")


# --jpeg_verify dct: libjpeg's smallest DCT scale (measured 300 vs 436 CPU us per 28 KB photo).
_VERIFY_DCT_RATIO = 8

# simplejpeg's output colour space per JPEG colour space, for the strict check: the cheapest
# libjpeg can convert to (gray skips the chroma IDCT); the entropy decoding, where the warnings
# come from, covers every component whatever the output.
_STRICT_COLORSPACE = {
    "Gray": "GRAY",
    "YCbCr": "GRAY",
    "RGB": "GRAY",
    "CMYK": "CMYK",
    "YCCK": "CMYK",
}


# The texts of libjpeg's warnings (jerror.h, JWRN_*): damage or oddities it worked around.
# simplejpeg raises them as ValueError with strict=True, from the header as from the data.
_LIBJPEG_WARNINGS = (
    "Corrupt JPEG data",  # extraneous bytes, premature end of segment, bad Huffman code, ...
    "Premature end of JPEG file",
    "Warning:",  # unknown JFIF revision, thumbnail size mismatch
    "Inconsistent progression sequence",
    "Invalid SOS parameters for sequential JPEG",
    "Unknown Adobe color transform code",
    "Application transferred too many scanlines",
)


def _libjpeg_warning(data: bytes) -> str | None:
    """What libjpeg warned about while decoding `data` (data it had to repair or skip: a cut or
    zeroed stretch of entropy data decodes to grey or smeared blocks without an error), or None.

    One libjpeg-turbo decode at 1/8 scale through simplejpeg with strict=True, which turns
    libjpeg's warnings into errors (~225 us per 28 KB photo). Only called on bytes TensorFlow
    already decoded. A warning in the header counts too (the data behind it is then not decoded
    here, and the file is rejected anyway). Files TurboJPEG cannot decode at all (a chroma
    layout it does not classify; TensorFlow decodes them) keep TensorFlow's verdict: None.
    """
    import simplejpeg  # Deferred: only --jpeg_verify strict needs it.

    def decode(**kwargs) -> str | None:
        """None if simplejpeg decodes `data` at 1/8 scale, else its message."""
        try:
            colorspace = simplejpeg.decode_jpeg_header(data, strict=False)[2]
            simplejpeg.decode_jpeg(
                data,
                colorspace=_STRICT_COLORSPACE.get(colorspace, "RGB"),
                min_factor=_VERIFY_DCT_RATIO,
                min_height=1,
                min_width=1,
                **kwargs,
            )
            return None
        except ValueError as e:
            return str(e).strip() or type(e).__name__

    message = decode(strict=True)
    if message is None or message.startswith(_LIBJPEG_WARNINGS):
        return message
    # Another text: a warning if the lenient decode gets through, else TurboJPEG's own limit.
    return message if decode(strict=False) is None else None


def _dct_side(side: int, ratio: int) -> int:
    """A side as libjpeg outputs it when decoding at 1/ratio scale (rounded up)."""
    return -(-side // ratio)


def _dct_shape(height: int, width: int, ratio: int) -> tuple[int, int]:
    """(height, width) as libjpeg outputs them when decoding at 1/ratio scale."""
    return _dct_side(height, ratio), _dct_side(width, ratio)


def _transcode_deferred(reasons: list[str], fmt: str, channels: int) -> bool:
    """Whether inspection leaves this transcode to the writer: a gray or colour JPEG that only
    needs --max_side (its output sides are computed, not made; see check_image)."""
    return reasons == ["max_side"] and fmt == "jpeg" and channels in (1, 3)


def _tf_decode(fmt: str, data: bytes, channels: int = 3, accurate: bool = False, ratio: int = 1):
    """Decode as the reader will: decode_jpeg for JPEG (the same kernel and flags as
    decode_image, so one call proves both), decode_image(expand_animations=False) otherwise.
    `ratio` (JPEG only) is libjpeg's DCT scaling: 1, 2, 4 or 8.

    Returns:
        The uint8 tensor [H, W, C].

    Raises:
        tf.errors.InvalidArgumentError: what TensorFlow says about the bytes.
    """
    tf = _tf()
    if fmt == "jpeg":
        dct = "INTEGER_ACCURATE" if accurate else ""
        return tf.io.decode_jpeg(data, channels=channels, dct_method=dct, ratio=ratio)
    return tf.io.decode_image(data, channels=channels, expand_animations=False)


def _decode_failure(fmt: str, data: bytes, h: _Header, error) -> Rejected:
    """Turn a TensorFlow decode error into a reason, with our own diagnosis first in the detail."""
    op = "tf.io.decode_jpeg" if fmt == "jpeg" else "tf.io.decode_image"
    tf_says = f"{op}: {_tf_message(error)}"
    if (
        h.width
        and h.height
        and h.width * h.height * (h.channels if fmt == "jpeg" else 1) >= (_TF_MAX_OUTPUT)
    ):
        return Rejected(
            "too_many_pixels",
            f"{h.width}x{h.height} is beyond what TensorFlow's "
            f"{fmt.upper()} decoder accepts (2^29 output); {tf_says}",
        )
    if h.complete and not (h.width and h.height):
        reason, why = "corrupt", f"the header declares a {h.width}x{h.height} image"
    elif fmt == "jpeg":
        reason, why = _jpeg_diagnosis(data, h)
    elif fmt == "png":
        reason, why = _png_diagnosis(data)
    elif fmt == "gif":
        reason, why = _gif_diagnosis(data)
    else:  # a WebP stored as is
        cut = _not_decodable(data, fmt)
        reason, why = cut.reason, cut.detail.replace("Pillow cannot open", "libwebp cannot decode")
    return Rejected(reason, f"{why}; {tf_says}")


def _jpeg_diagnosis(data: bytes, h: _Header) -> tuple[str, str]:
    if h.jpeg_sof and (h.jpeg_precision != 8 or h.jpeg_sof not in (0xC0, 0xC1, 0xC2)):
        kind = _SOF_NAMES.get(h.jpeg_sof, hex(h.jpeg_sof))
        return "unsupported_format", (
            f"{h.jpeg_precision}-bit {kind} JPEG (SOF {h.jpeg_sof:#x}): "
            "TensorFlow decodes 8-bit baseline/progressive JPEG only"
        )
    if h.jpeg_sos_at < 0:
        if h.ran_out:
            return "truncated", f"the file ends at byte {len(data)} inside the JPEG header"
        return "corrupt", "the JPEG header is damaged (no frame or scan header found)"
    if data.find(b"\xff\xd9", h.jpeg_sos_at) < 0:
        return "truncated", (
            f"the compressed data ends at byte {len(data)} with no end-of-image marker"
        )
    return "corrupt", "the JPEG tables or compressed data are damaged"


def _gif_diagnosis(data: bytes) -> tuple[str, str]:
    n = len(data)
    flags = data[10] if n > 10 else 0
    i = 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
    while i < n:
        block = data[i]
        if block == 0x3B:
            return "corrupt", "the GIF blocks are complete but the image data does not decode"
        if block == 0x21:
            i = _skip_gif_blocks(data, i + 2)
        elif block == 0x2C and i + 10 <= n:
            lflags = data[i + 9]
            i = _skip_gif_blocks(data, i + 11 + (3 * (2 << (lflags & 7)) if lflags & 0x80 else 0))
        elif block == 0x2C:
            break
        else:
            return "corrupt", f"unknown GIF block {block:#04x} at byte {i}"
    return "truncated", f"the GIF data ends at byte {n} inside a block, before its trailer"


def _png_diagnosis(data: bytes) -> tuple[str, str]:
    n = len(data)
    i = 8
    while i + 8 <= n:
        length = int.from_bytes(data[i : i + 4], "big")
        kind = data[i + 4 : i + 8]
        name = kind.decode("latin-1")
        if i + 12 + length > n:
            return "truncated", (
                f"chunk {name!r} at byte {i} needs {length} bytes; the file ends at byte {n}"
            )
        crc = int.from_bytes(data[i + 8 + length : i + 12 + length], "big")
        if zlib.crc32(data[i + 4 : i + 8 + length]) != crc:
            return "corrupt", f"chunk {name!r} at byte {i} fails its CRC"
        if kind == b"IEND":
            return "corrupt", "chunks are intact but the image data does not decode"
        i += 12 + length
    return "truncated", f"the file ends at byte {n} before the IEND chunk"


def _channel_stats(pixels: np.ndarray) -> tuple:
    """(sum_r, sum_g, sum_b, sumsq_r, sumsq_g, sumsq_b, num_pixels), exact, of uint8 [H, W, 3].

    Pillow's C histogram is ~10x faster than float64 sums on numpy (measured ~0.2 ms on a
    450x400 image); sums of value and value^2 follow exactly from the 3x256 counts.
    """
    from PIL import Image

    height, width = pixels.shape[:2]
    pixels = np.ascontiguousarray(pixels)
    hist = Image.frombuffer("RGB", (width, height), pixels, "raw", "RGB", 0, 1).histogram()
    counts = np.asarray(hist, dtype=np.int64).reshape(3, 256)
    values = np.arange(256, dtype=np.int64)
    sums = counts @ values
    sumsq = counts @ (values * values)
    return (*map(float, sums), *map(float, sumsq), int(height * width))


# ----------------------------------------------------------------------------- the check
def check_file_size(num_bytes: int, opts: CheckOptions) -> None:
    """Refuse by size alone (callers that know the size from the listing can skip the read).

    Raises:
        Rejected: empty_file or file_too_large.
    """
    if num_bytes == 0:
        raise Rejected("empty_file", "0 bytes")
    if opts.max_file_mb and num_bytes > opts.max_file_mb * 1e6:
        raise Rejected("file_too_large", f"{num_bytes} bytes > --max_file_mb {opts.max_file_mb:g}")


def _check_dims(width: int, height: int, opts: CheckOptions, what: str) -> None:
    if width <= 0 or height <= 0:
        raise Rejected("corrupt", f"the {what} declares a {width}x{height} image")
    if width * height > opts.max_pixels:
        raise Rejected(
            "too_many_pixels",
            f"the {what} declares {width}x{height} = "
            f"{width * height} pixels > --max_pixels {opts.max_pixels}",
        )
    if min(width, height) < opts.min_side:
        raise Rejected("too_small", f"{width}x{height}: shorter side < --min_side {opts.min_side}")


def _probe(data: bytes, opts: CheckOptions) -> tuple[str, _Header]:
    fmt = sniff_format(data)
    if fmt == "jpeg":
        return fmt, _probe_jpeg(data)
    if fmt == "png":
        return fmt, _probe_png(data)
    if fmt == "gif":
        return fmt, _probe_gif(data)
    cut = _cut_signature(data)
    if cut:
        raise Rejected("truncated", f"{len(data)} bytes: the start of a {cut.upper()} signature")
    return _probe_other(data, opts)


def _probe_checked(data: bytes, opts: CheckOptions) -> tuple[str, _Header]:
    """_probe, with the header's dimensions checked before any decoder allocates."""
    width, height = _webp_size(data)
    if width and height:
        _check_dims(width, height, opts, "WebP header")
    fmt, h = _probe(data, opts)
    if h.width and h.height:  # a 0 side is left to the decoder, which names the error
        _check_dims(h.width, h.height, opts, "header")
    return fmt, h


def _transcode_reasons(fmt: str, h: _Header, opts: CheckOptions) -> list[str]:
    reasons = []
    if fmt not in STORED_FORMATS:
        # _probe_other already rejected what these options do not keep (--transcode none, ...).
        if fmt == "webp" and h.frames == 1 and h.webp_as_is:
            pass  # decode_image(channels=3) reads a still WebP without alpha: stored as is
        elif fmt in _TF_DECODABLE_OTHER and opts.transcode != "jpeg":
            reasons.append(f"{fmt}_to_png")
        else:
            reasons.append("unsupported_format")
    if h.frames > 1:
        if opts.animated == "reject":
            raise Rejected(
                "animated",
                f"{fmt.upper()} with {h.frames}"
                f"{'+' if fmt == 'gif' else ''} frames and --animated reject",
            )
        reasons.append("animated_first_frame")
    if h.orientation != 1 and (opts.apply_exif_orientation or h.upright_on_load):
        reasons.append("exif_orientation")
    if opts.max_side and max(h.width, h.height) > opts.max_side:
        reasons.append("max_side")
    return reasons


def check_image(data: bytes, opts: CheckOptions, compute_stats: bool = False) -> ImageInfo:
    """Validate one file's bytes by decoding them as training will, once.

    Order: size, signature, header (dimensions refused before any pixel buffer exists), then
    either one TensorFlow decode of the original bytes, or, when a transcode is needed, the
    transcode and one TensorFlow decode of its output. Whatever is accepted decodes with
    tf.io.decode_image(channels=3, expand_animations=False) (and decode_jpeg for JPEG): it was
    decoded that way here.

    Args:
        data: the file's bytes.
        opts: limits and transcode choices.
        compute_stats: also return per-channel pixel sums over the stored image.

    Returns:
        What will be stored: format, size, channels, transcode reasons, stats.

    Raises:
        Rejected: with a reason from REASONS and a human detail.
    """
    check_file_size(len(data), opts)
    fmt, h = _probe_checked(data, opts)
    if h.jpeg_sof in _SOF_PROGRESSIVE:
        scans = data.count(b"\xff\xda")
        if scans > MAX_PROGRESSIVE_SCANS:
            raise Rejected(
                "too_many_scans",
                f"progressive JPEG with {scans} scans "
                f"(> {MAX_PROGRESSIVE_SCANS}): refused as a decoding-time bomb",
            )
    reasons = _transcode_reasons(fmt, h, opts)
    # A JPEG that only needs downscaling is verified as it is, and its output sides are computed
    # (as _transcode will resize): the resize (2 ms with Lanczos for a 450x400 photo) then runs
    # once, in the writer, instead of here and there. Pixel statistics need the stored pixels,
    # so images that feed them are transcoded here.
    deferred = (
        _transcode_deferred(reasons, fmt, h.channels)
        and not compute_stats
        and h.width > 0
        and h.height > 0
    )
    if reasons and not deferred:
        stored, stored_fmt, channels = _transcode(data, fmt, h, reasons, opts)
    else:
        stored, stored_fmt, channels = data, fmt, h.channels
    tf = _tf()
    # JPEG at 1/8 DCT scale: libjpeg still entropy-decodes every coefficient of every block (the
    # only stage that can fail on damaged data) and skips only the full-size IDCT, upsampling and
    # colour conversion. Rejects are identical to a full decode (tests/test_image_check.py
    # damages 1,500 JPEGs both ways); the sides come from the header, checked against the output.
    scaled = (
        opts.jpeg_verify in ("dct", "strict")
        and not compute_stats
        and stored_fmt == "jpeg"
        and stored is data
        and h.height > 0
        and h.width > 0
    )
    try:
        decoded = _tf_decode(stored_fmt, stored, ratio=_VERIFY_DCT_RATIO if scaled else 1)
    except tf.errors.InvalidArgumentError as e:
        raise _decode_failure(stored_fmt, stored, h if stored is data else _Header(), e) from e
    height, width = int(decoded.shape[0]), int(decoded.shape[1])
    if scaled:
        if (height, width) != _dct_shape(h.height, h.width, _VERIFY_DCT_RATIO):
            # The decoder read other sides than our header parser: trust the decoder at full size.
            decoded = _tf_decode(stored_fmt, stored)
            height, width = int(decoded.shape[0]), int(decoded.shape[1])
        else:
            height, width = h.height, h.width
    if opts.jpeg_verify == "strict" and fmt == "jpeg":
        # The source bytes, also when transcoded: a repaired source bakes its damage into the
        # re-encode.
        warning = _libjpeg_warning(data)
        if warning is not None:
            raise Rejected(
                "corrupt",
                f"libjpeg warned while decoding ({warning}): it silently repairs or works "
                "around such data; TensorFlow decodes it without an error, so --jpeg_verify dct "
                "or full would write it",
            )
    if deferred:
        _, (width, height) = _max_side_plan(width, height, opts.max_side, fmt)
    _check_dims(width, height, opts, "decoded image")
    stats = _channel_stats(decoded.numpy()) if compute_stats else None
    return ImageInfo(stored_fmt, fmt, height, width, channels, ",".join(reasons), stats)


def encode_for_storage(data: bytes, info: ImageInfo, opts: CheckOptions) -> bytes:
    """The bytes to store: `data` itself unless `info.transcode`, else the same transcode that
    check_image made and verified (a pure function of data and opts: same input, same bytes).

    Raises:
        Rejected: if the bytes no longer transcode (they changed since inspection).
        ValueError: if opts differ from inspection so that the stored format would change.
    """
    if not info.transcode:
        return data
    fmt, h = _probe_checked(data, opts)
    stored, stored_fmt, _ = _transcode(data, fmt, h, info.transcode.split(","), opts)
    if stored_fmt != info.format:
        raise ValueError(
            f"transcode now yields {stored_fmt}, inspection said {info.format}: "
            "the options changed between inspection and writing"
        )
    if _transcode_deferred(info.transcode.split(","), info.source_format, info.channels):
        # Inspection may not have made this re-encode: decode it here, so every stored byte
        # string has been through TensorFlow's decoder, with the sides the record states.
        # (Other transcodes were decoded at inspection.)
        tf = _tf()
        ratio = _VERIFY_DCT_RATIO
        try:
            decoded = _tf_decode(stored_fmt, stored, ratio=ratio)
        except tf.errors.InvalidArgumentError as e:
            raise Rejected(
                "corrupt", f"the re-encoded image does not decode: {_tf_message(e)}"
            ) from e
        if tuple(decoded.shape[:2]) != _dct_shape(info.height, info.width, ratio):
            raise Rejected(
                "corrupt",
                f"the re-encoded image decodes to {decoded.shape[1]}x{decoded.shape[0]} at "
                f"1/{ratio} scale; inspection recorded {info.width}x{info.height}",
            )
    return stored


# ----------------------------------------------------------------------------- transcoding
def _transcode(
    data: bytes, fmt: str, h: _Header, reasons: list[str], opts: CheckOptions
) -> tuple[bytes, str, int]:
    """Re-encode: (stored bytes, stored format, channels). Deterministic for given inputs."""
    from PIL import Image

    ratio = 1
    if "max_side" in reasons:
        ratio, _ = _max_side_plan(h.width, h.height, opts.max_side, fmt)
    image, icc = _source_pixels(data, fmt, h, ratio)
    if "exif_orientation" in reasons and not h.upright_on_load:
        image = image.transpose(getattr(Image.Transpose, _ORIENTATION_TRANSPOSE[h.orientation]))
    if "max_side" in reasons:
        _, size = _max_side_plan(image.width, image.height, opts.max_side, "")
        image = image.resize(size, getattr(Image.Resampling, opts.resize_filter.upper()))
    if fmt == "jpeg":
        target = "jpeg"
    elif fmt in STORED_FORMATS or (fmt in _TF_DECODABLE_OTHER and opts.transcode != "jpeg"):
        target = "png"  # lossless: BMP is uncompressed; WebP with alpha or animation
    else:
        target = opts.transcode
    if target == "jpeg" and image.mode in ("LA", "RGBA"):
        image = image.convert(image.mode[:-1])  # JPEG has no alpha; TF's channels=3 drops it too
    if icc and not _icc_matches(icc, image.mode):
        icc = None
    out = io.BytesIO()
    extra = {"icc_profile": icc} if icc else {}
    if target == "jpeg":
        image.save(out, "JPEG", quality=opts.jpeg_quality, **extra)
    else:
        image.save(out, "PNG", compress_level=6, **extra)
    return out.getvalue(), target, _MODE_CHANNELS[image.mode]


def _max_side_plan(width: int, height: int, max_side: int, fmt: str) -> tuple[int, tuple[int, int]]:
    """(DCT ratio to decode a `fmt` source at, (width, height) after the --max_side resize).

    A JPEG is decoded at libjpeg's 1/2, 1/4 or 1/8 scale while its long side stays >= max_side
    (a 4000x3000 photo going to 256 decodes 8x smaller and resizes from 500x375); the resize
    then brings the long side to max_side, keeping the aspect ratio.
    """
    ratio = 1
    if fmt == "jpeg":
        for r in (8, 4, 2):
            if _dct_side(max(width, height), r) >= max_side:
                ratio = r
                break
    h, w = _dct_shape(height, width, ratio)
    scale = max_side / max(w, h)
    return ratio, (max(1, round(w * scale)), max(1, round(h * scale)))


def _icc_matches(icc: bytes, mode: str) -> bool:
    space = icc[16:20] if len(icc) >= 20 else b""
    return space == (b"GRAY" if mode in ("L", "LA") else b"RGB ")


def _source_pixels(data: bytes, fmt: str, h: _Header, ratio: int = 1):
    """The source's (first frame) pixels as a Pillow image in L, LA, RGB or RGBA, and its ICC.

    JPEG/PNG/still GIF are decoded by TensorFlow, so a file TF rejects is rejected here too
    rather than "repaired" by a more lenient decoder. Animated GIFs and other formats are
    decoded by Pillow (TF's GIF decoder would read every frame). `ratio` > 1 decodes a JPEG
    at that DCT scale (1/ratio of each side).
    """
    from PIL import Image

    tf = _tf()
    if fmt in STORED_FORMATS and not (fmt == "gif" and h.frames > 1):
        try:
            pixels = _tf_decode(fmt, data, channels=0, accurate=True, ratio=ratio).numpy()
        except tf.errors.InvalidArgumentError as e:
            raise _decode_failure(fmt, data, h, e) from e
        image = Image.fromarray(pixels if pixels.shape[2] > 1 else pixels[:, :, 0])
        return image, h.icc
    if h.isolated:
        from transforms import decode_worker

        decoded = decode_worker.pixels(data, _PIL_PLUGINS.get(fmt, ()))
        if decoded is None:
            raise _not_decodable(data, fmt)
        mode, size, raw, icc = decoded
        return Image.frombytes(mode, size, raw), icc
    im = h.pil if h.pil is not None else _pillow_open(data, _PIL_PLUGINS.get(fmt, ()))
    if im is None:
        raise _not_decodable(data, fmt)
    return _pil_pixels(im)


def _normalize_mode(im):
    """L, LA, RGB or RGBA: what TF's decoders produce; 16-bit gray keeps its top 8 bits."""
    from PIL import Image

    mode = im.mode
    if mode in _MODE_CHANNELS:
        return im
    if mode.startswith("I;16"):
        wide = np.asarray(im, dtype=np.uint16)
        return Image.fromarray((wide >> 8).astype(np.uint8), "L")
    if mode in ("I", "F"):
        raise Rejected(
            "unsupported_format",
            f"{im.format} with {mode} (32-bit) pixels has no "
            "defined 8-bit mapping; convert it before the run",
        )
    if mode in ("P", "PA"):
        target = "RGBA" if mode == "PA" or "transparency" in im.info else "RGB"
    elif mode == "1":
        target = "L"
    elif mode in ("La", "RGBa"):
        target = mode.upper()
    else:
        target = "RGB"  # CMYK, YCbCr, RGBX, LAB, HSV
    try:
        return im.convert(target)
    except ValueError as e:  # Pillow has no conversion for this mode (LAB, HSV, ...)
        raise Rejected("unsupported_format", f"{im.format} {mode} pixels: {e}") from e
