"""Format sniffing from magic bytes alone (no decoder runs): what a file is, or what it is not."""

from __future__ import annotations

from transforms.images import dicom, tiff

__all__ = [
    "array_format",
    "cut_signature",
    "describe_non_image",
    "sniff_container",
    "sniff_format",
    "undecodable_image",
]


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


def sniff_format(data: bytes) -> str | None:
    """The format TensorFlow would decode these bytes as ("jpeg", "png", "gif"), else None."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    return None


def cut_signature(data: bytes) -> str | None:
    """The format whose signature these (too few) bytes begin, e.g. 5 bytes of a PNG signature."""
    for magic, name in _MAGIC:
        if len(data) < len(magic) and magic.startswith(data):
            return name
    return None


def describe_non_image(data: bytes) -> str:
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
        # A multi-byte character cut by the 1024-byte window (only where the window cut the data).
        is_text = len(data) > len(head) and e.start >= len(head) - 3
    if is_text:
        snippet = head[:40].decode("utf-8", "replace")
        return f"text ({len(data)} bytes, starting {snippet!r})"
    return f"unknown binary data (first bytes {data[:8].hex(' ')})"


def undecodable_image(data: bytes) -> str | None:
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


# BMP info-header sizes: 12 core (OS/2 v1), 40 v3, 52/56 v3 + RGB(A) masks, 64 OS/2 v2, 108 v4,
# 124 v5, and the shorter OS/2 v2 headers (16 to 60 bytes, which TensorFlow decodes and
# bmp_repair widens for Pillow). A "BM" file with any other size is no BMP any decoder reads.
_BMP_HEADER_SIZES = (12, *range(16, 65, 4), 108, 124)


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


def array_format(data: bytes) -> str | None:
    """The format decoded to arrays (transforms/images/arrays.py) these bytes are, else None.

    DICOM first: its 128-byte preamble may hold another format's header (DICOM-TIFF files).
    Each format's own module says what its files look like (pydicom and tifffile are imported
    only to decode).
    """
    if dicom.looks_like_dicom(data):
        return "dicom"
    return "tiff" if tiff.looks_like_tiff(data) else None


def sniff_container(data: bytes) -> str | None:
    """The image format these bytes start like ("jpeg", "png", "gif", "dicom", "bmp", "webp",
    "tiff", "psd", ...), from magic bytes only (no decoder runs), else None."""
    fmt = sniff_format(data) or array_format(data)
    if fmt is not None:
        return fmt
    head = data[:64]
    for test, name in _CONTAINERS:
        if test(head):
            return name
    return None
