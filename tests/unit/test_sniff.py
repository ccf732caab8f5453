"""Format sniffing from magic bytes (transforms/images/sniff.py), exactly: the format each
signature names, the edge of each signature, and the readable detail a user sees in
rejected.jsonl for a file that is no image (mutants bench/MUTATION.md found alive)."""

from __future__ import annotations

import pytest

from transforms.images.sniff import (
    cut_signature,
    describe_non_image,
    sniff_container,
    sniff_format,
    undecodable_image,
)


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"\xff\xd8\xff\xe0rest", "jpeg"),
        (b"\xff\xd8\xfe", None),  # two bytes of JPEG's three
        (b"\x89PNG\r\n\x1a\nIHDR", "png"),
        (b"\x89PNG\r\n\x1a", None),
        (b"GIF89a", "gif"),
        (b"GIF87a", "gif"),
        (b"GIF7", None),
        (b"", None),
    ],
)
def test_sniff_format_is_tensorflows_own_prefixes(data, expected):
    assert sniff_format(data) == expected


def test_a_cut_signature_names_the_format_it_begins():
    assert cut_signature(b"\x89PN") == "png"
    assert cut_signature(b"\xff\xd8") == "jpeg"
    assert cut_signature(b"GIF") == "gif"
    assert cut_signature(b"\x89PNG\r\n\x1a\n") is None  # whole: not cut
    assert cut_signature(b"\x89PX") is None
    assert cut_signature(b"") == "jpeg"  # zero bytes begin every signature; the first wins


def _bmp(header_size: int) -> bytes:
    return b"BM" + bytes(12) + header_size.to_bytes(4, "little") + bytes(46)


def _tga(**over) -> bytes:
    d = bytearray(18)
    d[1], d[2], d[16] = over.get("cmap", 0), over.get("kind", 2), over.get("depth", 24)
    d[12:14] = over.get("width", 4).to_bytes(2, "little")
    d[14:16] = over.get("height", 3).to_bytes(2, "little")
    return bytes(d)


@pytest.mark.parametrize(
    "data, expected",
    [
        *[(_bmp(size), "bmp") for size in (12, 40, 52, 56, 64, 108, 124)],
        (_bmp(41), None),
        (b"BM" + bytes(10), None),  # too short for its info-header size
        (_bmp(40)[:18], "bmp"),  # exactly the 18 bytes that name the info-header size
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "webp"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", None),
        (b"II*\x00", "tiff"),
        (b"MM\x00*", "tiff"),
        (b"II+\x00", "tiff"),
        (b"MM\x00+", "tiff"),
        (b"8BPS\x00\x01", "psd"),
        (b"\x00\x00\x01\x00\x01\x00", "ico"),
        (b"\x00\x00\x01\x00\x00\x00", None),  # an icon directory of no images
        (b"\x00\x00\x01\x00", None),
        (b"\x00\x00\x02\x00\x01\x00", "cur"),
        (b"P6\n4 3\n255\n", "ppm"),
        (b"P1 ", "ppm"),
        (b"P7\t", "ppm"),
        (b"P8 ", None),
        (b"P6x", None),
        (b"P6", None),
        (b"\x00\x00\x00\x0cjP  \r\n\x87\n", "jpeg2000"),
        (b"\xff\x4f\xff\x51", "jpeg2000"),
        (b"qoif", "qoi"),
        (b"\x00\x00\x00\x1cftypavif", "avif"),
        (b"\x00\x00\x00\x1cftypavis", "avif"),
        (b"\x00\x00\x00\x1cftypisom", None),
        (b"DDS |", "dds"),
        (b"\x01\xda\x01\x01", "sgi"),
        (b"\x01\xda\x00\x01", "sgi"),
        (b"\x01\xda\x02\x01", None),
        (b"\x01\xda\x01", None),
        (b"\xc5\xd0\xd3\xc6", "eps"),
        (b"%!PS-Adobe-3.0 EPSF-3.0", "eps"),
        (b"%!PS-Adobe-3.0\n", None),
        (b"\xd7\xcd\xc6\x9a", "wmf"),
        (b"\x01\x00\x09\x00", "wmf"),
        (b"\x01\x00\x00\x00" + bytes(36) + b" EMF", "emf"),
        (b"\x01\x00\x00\x00" + bytes(36) + b" XYZ", None),
        (b"\x0a\x05\x01" + bytes(61), "pcx"),
        (b"\x0a\x00\x01" + bytes(61), "pcx"),
        (b"\x0a\x01\x01" + bytes(61), None),
        (b"\x0a\x05\x01" + bytes(60), None),  # 63 bytes: shorter than a PCX header
        (_tga(), "tga"),
        (_tga(cmap=1, kind=1, depth=8), "tga"),
        (_tga(kind=11, depth=32), "tga"),
        (_tga(kind=9, depth=15), "tga"),
        (_tga(kind=10, depth=16), "tga"),
        (_tga(kind=3, depth=1), "tga"),
        (_tga(width=1, height=1), "tga"),
        (_tga(width=256, height=512), "tga"),  # little-endian sides
        (_tga(cmap=2), None),
        (_tga(kind=4), None),
        (_tga(depth=12), None),
        (_tga(width=0), None),
        (_tga(height=0), None),
        (_tga()[:17], None),
        (b"\xff\xd8\xff", "jpeg"),  # TensorFlow's formats first
    ],
)
def test_sniff_container_names_each_format_and_refuses_near_misses(data, expected):
    assert sniff_container(data) == expected


def test_sniff_container_reads_only_the_first_64_bytes():
    assert sniff_container(b"\x01\x00\x00\x00" + bytes(36) + b" EMF" + bytes(100)) == "emf"
    assert sniff_container(bytes(64) + b"qoif") is None


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"%PDF-1.7\n", "PDF document"),
        (b"PK\x03\x04\x14\x00", "ZIP archive (also .docx/.xlsx/.apk)"),
        (b"PK\x05\x06", "empty ZIP archive"),
        (b"\x1f\x8b\x08\x00", "gzip data"),
        (b"Rar!\x1a\x07\x00", "RAR archive"),
        (b"7z\xbc\xaf\x27\x1c\x00", "7-Zip archive"),
        (b"\x7fELF\x02\x01", "ELF executable"),
        (b"%!PS-Adobe", "PostScript document"),
        (b"{\\rtf1\\ansi", "RTF document"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1", "MS Office (OLE) document"),
        (b"\x00\x00\x00\x18ftypmp42\x00", "ISO media file (brand 'mp42'; video or audio?)"),
        (b"\xef\xbb\xbf \n<!DOCTYPE html><p>", "HTML document (an error page saved as an image?)"),
        (b"<HTML><body>", "HTML document (an error page saved as an image?)"),
        (b"<?xml version='1.0'?><html>", "HTML document (an error page saved as an image?)"),
        (b"<div><body>", "HTML document (an error page saved as an image?)"),
        (b"\t<?xml version='1.0'?><feed/>", "XML/markup document"),
        (b"hello, world\n", "text (13 bytes, starting 'hello, world\\n')"),
        (b"x" * 50, f"text (50 bytes, starting {'x' * 40!r})"),
        (b"\x00\x9f\x92\x96\x04\x05\x06\x07\x08", "unknown binary data (first bytes 00 9f 92 96 04 05 06 07)"),
        # A bad byte near the end of a short file: no window cut it, so it is binary.
        (b"ok\xffno", "unknown binary data (first bytes 6f 6b ff 6e 6f)"),
    ],
)  # fmt: skip
def test_a_non_image_is_described_readably(data, expected):
    assert describe_non_image(data) == expected


def test_text_cut_mid_character_by_the_window_is_still_text():
    # 1023 ASCII bytes then a 3-byte character: the 1024-byte window ends inside it.
    data = b"a" * 1023 + "€".encode() + b"tail"
    assert describe_non_image(data).startswith(f"text ({len(data)} bytes, starting 'aaaa")
    # A bad byte well inside the window is binary, not text.
    bad = b"a" * 1000 + b"\xff" + b"a" * 100
    assert describe_non_image(bad).startswith("unknown binary data")
    # Markers past the first 1024 bytes are not read.
    assert describe_non_image(b"a" * 1024 + b"<html>").startswith("text (")


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"\xff\x0a\x00", "JPEG XL codestream"),
        (b"\x00\x00\x00\x0cJXL \r\n\x87\n", "JPEG XL"),
        (b"\x00\x00\x00\x18ftypheic", "HEIF/HEIC (heic)"),
        (b"\x00\x00\x00\x18ftypmif1", "HEIF/HEIC (mif1)"),
        (b"\x00\x00\x00\x18ftypmsf1", "HEIF/HEIC (msf1)"),
        (b"\x00\x00\x00\x18ftypmp42", None),
        (b"\xef\xbb\xbf\n<SVG xmlns='http://www.w3.org/2000/svg'>", "SVG (vector graphics)"),
        (b"<?xml version='1.0'?>\n<svg>", "SVG (vector graphics)"),
        (b"<?xml version='1.0'?>\n<feed/>", None),
        (b"<html><svg>", None),
        (b"plain", None),
    ],
)
def test_an_image_no_decoder_here_reads_is_named(data, expected):
    assert undecodable_image(data) == expected
