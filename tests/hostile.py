"""Hostile test images, generated on the fly: every corrupt or odd input the converter must survive.

`make_hostile_corpus(dir, n, seed)` writes at least `n` files under `dir/<label>/` and returns, per
path, what the converter must do with it under the given CheckOptions. Nothing is downloaded: the
pixels are crops of the photos that ship with scikit-image.

Expectations are known by construction (a truncated JPEG is "truncated", a 100000x100000 PNG header
is "too_many_pixels"), except for random bit flips in compressed data, where the specification
itself is "whatever TensorFlow's decoder says": those are settled by decoding with TensorFlow here,
and the converter must agree with it.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import pathlib
import random
import struct
import zlib

import numpy as np
from PIL import Image

from transforms.images.limits import CheckOptions

__all__ = ["Expected", "encode", "make_hostile_corpus", "photo", "png_chunk", "tf_decodes"]

# Photos that ship with scikit-image (no download): the crops below are real photographic
# content, so JPEG entropy data and PNG filters behave as they do on a real corpus.
_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")
# Small crops keep the corpus (and every test that decodes it) fast on two shared cores.
_CROP_SIDES = (64, 200)
_LABELS = ("cat", "dog")


@dataclasses.dataclass(frozen=True)
class Expected:
    """What must happen to one hostile file.

    outcome: "written" or a key of core.rejects.REASONS. When written: format is the stored
    image/format, transcode the image/transcode_reason ("" if the bytes are stored as they are).
    case: what the file is, for failure messages.
    """

    outcome: str
    case: str
    format: str = ""
    transcode: str = ""
    source_format: str = ""


# ----------------------------------------------------------------------------- building blocks
@functools.cache
def _source_photo(name: str) -> Image.Image:
    """scikit-image's photo `name`, decoded once per process (93 decodes of the 512x512 PNGs
    were half of a 200-file corpus's build). Callers only crop it: crop returns a copy."""
    import skimage

    with Image.open(pathlib.Path(skimage.__file__).parent / "data" / name) as im:
        return im.convert("RGB")


def photo(rng: random.Random, width: int | None = None, height: int | None = None) -> Image.Image:
    """A random RGB crop of a scikit-image photo."""
    src = _source_photo(rng.choice(_PHOTOS))
    w = width or rng.randint(*_CROP_SIDES)
    h = height or rng.randint(*_CROP_SIDES)
    w, h = min(w, src.width), min(h, src.height)
    x, y = rng.randint(0, src.width - w), rng.randint(0, src.height - h)
    return src.crop((x, y, x + w, y + h))


def encode(image: Image.Image, fmt: str, **kwargs) -> bytes:
    """Pillow-encode to bytes."""
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk with a correct CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _raw_png(width: int, height: int, bit_depth: int, color_type: int, rows: bytes) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    idat = png_chunk(b"IDAT", zlib.compress(rows))
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + idat + png_chunk(b"IEND", b"")


def tf_decodes(data: bytes) -> bool:
    """TensorFlow's verdict, as the reader decodes: decode_image(channels=3, expand_animations=
    False), and decode_jpeg too when the bytes are JPEG."""
    import tensorflow as tf

    try:
        tf.io.decode_image(data, channels=3, expand_animations=False)
        if data.startswith(b"\xff\xd8\xff"):
            tf.io.decode_jpeg(data, channels=3)
    except tf.errors.InvalidArgumentError:
        return False
    return True


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _sos_end(jpeg: bytes) -> int:
    """Offset of the first entropy-coded byte of the last scan."""
    sos = jpeg.rfind(b"\xff\xda")
    return sos + 2 + struct.unpack(">H", jpeg[sos + 2 : sos + 4])[0]


def _segment(jpeg: bytes, marker: int) -> int:
    """Offset of the first segment with this marker (its 0xFF byte)."""
    return jpeg.index(bytes([0xFF, marker]))


def _gif_blocks_start(gif: bytes) -> int:
    """Offset of the first block after the header and global color table."""
    flags = gif[10]
    return 13 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)


def _gif_first_frame(gif: bytes) -> int:
    """Offset of the first image descriptor (0x2C), skipping extension blocks."""
    i = _gif_blocks_start(gif)
    while gif[i] == 0x21:
        i += 2
        while gif[i]:
            i += 1 + gif[i]
        i += 1
    assert gif[i] == 0x2C, "no image descriptor where expected"
    return i


def _flip(data: bytes, offset: int, bit: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << bit
    return bytes(out)


def _set(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


# ----------------------------------------------------------------------------- the catalog
class _Corpus:
    def __init__(self, root: str, rng: random.Random, opts: CheckOptions):
        self.root = root
        self.rng = rng
        self.opts = opts
        self.files: dict[str, Expected] = {}

    def add(self, name: str, data: bytes, expected: Expected) -> None:
        label = _LABELS[len(self.files) % len(_LABELS)]
        path = os.path.join(self.root, label, f"{len(self.files):04d}_{name}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        self.files[path] = expected

    # Expectations that depend on the options -----------------------------------------------
    def written(self, case: str, fmt: str, source: str | None = None, reasons=(), size=None):
        reasons = list(reasons)
        if size is not None:
            w, h = size
            if min(w, h) < self.opts.min_side:
                return Expected("too_small", case)
            if w * h > self.opts.max_pixels:
                return Expected("too_many_pixels", case)
            if self.opts.max_side and max(w, h) > self.opts.max_side:
                reasons.append("max_side")
        if "exif_orientation" in reasons and not self.opts.apply_exif_orientation:
            reasons.remove("exif_orientation")
        src = source or fmt
        if self.opts.transcode == "jpeg" and src in ("png", "gif"):
            reasons.append(f"{src}_to_jpeg")  # --transcode jpeg: every record a JPEG
            fmt = "jpeg"
        if self.opts.transcode == "jpeg" and src == "webp" and "unsupported_format" not in reasons:
            reasons.append("unsupported_format")  # a still WebP is not kept as is either
        order = (
            "unsupported_format",
            "bmp_to_png",
            "webp_to_png",
            "png_to_jpeg",
            "gif_to_jpeg",
            "animated_first_frame",
            "exif_orientation",
            "max_side",
        )
        reasons = [r for r in order if r in reasons]
        if reasons and fmt == "gif":
            fmt = "png"
        if reasons and fmt == "webp":
            fmt = "jpeg" if self.opts.transcode == "jpeg" else "png"
        return Expected("written", case, fmt, ",".join(reasons), src)

    def written_png16(self, case: str, size) -> Expected:
        """A 16-bit PNG (transforms/images/png16.py): its pixels scaled to 8 bits, unless it is
        re-encoded as any PNG (--transcode jpeg) or kept as it is (--bit_depth 16)."""
        png = self.written(case, "png", size=size)
        if png.outcome != "written" or self.opts.transcode == "jpeg":
            return png
        if self.opts.bit_depth == 16 and not png.transcode:
            return png
        reasons = ",".join(["decoded_pixels", *filter(None, png.transcode.split(","))])
        return Expected("written", case, "png", reasons, "png16")

    def written_tiff(self, case: str, size, animated: bool = False) -> Expected:
        """A TIFF (transforms/images/tiff.py): decoded to pixels under every --transcode, its
        first page stored (a PNG; a JPEG with --transcode jpeg)."""
        if animated and self.opts.animated == "reject":
            return Expected("animated", case)
        first = ["animated_first_frame"] if animated else []
        stored = self.written(case, "png", "tiff", reasons=first, size=size)
        if stored.outcome != "written":
            return stored
        fmt = "jpeg" if self.opts.transcode == "jpeg" else "png"
        reasons = ",".join(["decoded_pixels", *filter(None, stored.transcode.split(","))])
        return Expected("written", case, fmt, reasons, "tiff")

    def _kept_as(self, fmt: str) -> tuple[str, list[str]]:
        """(stored format, transcode reasons) of a non-JPEG/PNG/GIF source that is kept."""
        if fmt in ("bmp", "webp") and self.opts.transcode != "jpeg":
            return "png", [f"{fmt}_to_png"]  # --transcode auto|png
        return self.opts.transcode, ["unsupported_format"]

    def _rejected_format(self, fmt: str) -> bool:
        """--transcode none keeps JPEG/PNG/GIF only; auto also BMP and WebP."""
        mode = self.opts.transcode
        return mode == "none" or (mode == "auto" and fmt not in ("bmp", "webp"))

    def animated(self, case: str, fmt: str, size, unsupported: bool = False):
        if unsupported and self._rejected_format(fmt):
            return Expected("unsupported_format", case)
        if self.opts.animated == "reject":
            return Expected("animated", case)
        target = "jpeg" if fmt == "jpeg" else "png"
        reasons = []
        if unsupported:
            target, reasons = self._kept_as(fmt)
        return self.written(case, target, fmt, reasons + ["animated_first_frame"], size)

    def unsupported(
        self, case: str, fmt: str, size, animated: bool = False, decodable=True, as_is=False
    ):
        """A format other than JPEG/PNG/GIF; `as_is`: a WebP that decode_image(channels=3)
        reads (still, no alpha), stored as it is unless --transcode none."""
        if self._rejected_format(fmt) or not decodable:
            return Expected("unsupported_format", case)
        if animated:
            return self.animated(case, fmt, size, unsupported=True)
        if as_is:
            return self.written(case, fmt, fmt, [], size)
        target, reasons = self._kept_as(fmt)
        return self.written(case, target, fmt, reasons, size)

    def by_tf(self, case: str, data: bytes, fmt: str, failure: str, size):
        """Random damage: the expectation is TensorFlow's own verdict."""
        if tf_decodes(data):
            return self.written(case, fmt, size=size)
        return Expected(failure, case)


def _healthy(c: _Corpus) -> None:
    rng = c.rng
    for i in range(6):
        im = photo(rng)
        c.add(
            f"photo_{i}.jpg",
            encode(im, "JPEG", quality=rng.choice((75, 90))),
            c.written("baseline JPEG", "jpeg", size=im.size),
        )
    for i in range(3):
        im = photo(rng)
        c.add(
            f"progressive_{i}.jpg",
            encode(im, "JPEG", progressive=True),
            c.written("progressive JPEG", "jpeg", size=im.size),
        )
    im = photo(rng)
    c.add(
        "restart_markers.jpg",
        encode(im, "JPEG", restart_marker_blocks=4),
        c.written("JPEG with restart markers", "jpeg", size=im.size),
    )
    im = photo(rng)
    c.add(
        "subsampling_444.jpg",
        encode(im, "JPEG", subsampling=0),
        c.written("4:4:4 JPEG", "jpeg", size=im.size),
    )
    im = photo(rng)
    c.add(
        "gray.jpg",
        encode(im.convert("L"), "JPEG"),
        c.written("grayscale JPEG", "jpeg", size=im.size),
    )
    im = photo(rng)
    cmyk = encode(im.convert("CMYK"), "JPEG", quality=95)
    c.add("cmyk.jpg", cmyk, c.written("CMYK JPEG (Adobe)", "jpeg", size=im.size))
    adobe = cmyk.index(b"Adobe")
    c.add(
        "ycck.jpg",
        _set(cmyk, adobe + 11, b"\x02"),
        c.written("JPEG flagged YCCK (Adobe transform 2)", "jpeg", size=im.size),
    )
    im = photo(rng)
    mpo = io.BytesIO()
    im.save(mpo, "MPO", save_all=True, append_images=[im.transpose(Image.Transpose.ROTATE_180)])
    c.add(
        "camera.mpo.jpg",
        mpo.getvalue(),
        c.written("MPO (multi-picture JPEG)", "jpeg", size=im.size),
    )
    # PNG modes.
    im = photo(rng)
    c.add("rgb.png", encode(im, "PNG"), c.written("RGB PNG", "png", size=im.size))
    c.add("gray.png", encode(im.convert("L"), "PNG"), c.written("gray PNG", "png", size=im.size))
    c.add(
        "gray_alpha.png",
        encode(im.convert("LA"), "PNG"),
        c.written("gray+alpha PNG", "png", size=im.size),
    )
    rgba = np.asarray(im.convert("RGBA")).copy()
    rgba[: im.height // 2, :, 3] = 0
    c.add(
        "rgba.png",
        encode(Image.fromarray(rgba), "PNG"),
        c.written("RGBA PNG, half transparent", "png", size=im.size),
    )
    pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    c.add("palette.png", encode(pal, "PNG"), c.written("palette PNG", "png", size=im.size))
    c.add(
        "palette_trns.png",
        encode(pal, "PNG", transparency=0),
        c.written("palette PNG with tRNS", "png", size=im.size),
    )
    c.add(
        "bilevel.png", encode(im.convert("1"), "PNG"), c.written("1-bit PNG", "png", size=im.size)
    )
    gray16 = np.asarray(im.convert("L")).astype(np.uint16) * 257
    c.add(
        "gray16.png",
        encode(Image.fromarray(gray16), "PNG"),
        c.written_png16("16-bit gray PNG", size=im.size),
    )
    rgb48 = np.asarray(im).astype(">u2") * 257
    rows = b"".join(b"\x00" + row.tobytes() for row in rgb48)
    c.add(
        "rgb48.png",
        _raw_png(im.width, im.height, 16, 2, rows),
        c.written_png16("48-bit RGB PNG", size=im.size),
    )
    # GIF.
    im = photo(rng)
    c.add("still.gif", encode(im.convert("P"), "GIF"), c.written("GIF", "gif", size=im.size))
    c.add(
        "still_trns.gif",
        encode(im.convert("P"), "GIF", transparency=0),
        c.written("GIF with transparency", "gif", size=im.size),
    )
    c.add(
        "still_loop.gif",
        encode(im.convert("P"), "GIF", loop=0),
        c.written("one-frame GIF with a NETSCAPE loop block", "gif", size=im.size),
    )
    # Tiny images (thumbnails, tracking pixels).
    for side in ((1, 1), (3, 2), (16, 16), (31, 40)):
        im = photo(rng, *side)
        c.add(
            f"tiny_{side[0]}x{side[1]}.png",
            encode(im, "PNG"),
            c.written(f"{side[0]}x{side[1]} PNG", "png", size=side),
        )
        c.add(
            f"tiny_{side[0]}x{side[1]}.jpg",
            encode(im, "JPEG"),
            c.written(f"{side[0]}x{side[1]} JPEG", "jpeg", size=side),
        )


def _wrong_extension(c: _Corpus) -> None:
    rng = c.rng
    im = photo(rng)
    c.add("png_named.jpg", encode(im, "PNG"), c.written("PNG named .jpg", "png", size=im.size))
    im = photo(rng)
    c.add("jpeg_named.png", encode(im, "JPEG"), c.written("JPEG named .png", "jpeg", size=im.size))
    im = photo(rng)
    c.add(
        "gif_named.jpeg",
        encode(im.convert("P"), "GIF"),
        c.written("GIF named .jpeg", "gif", size=im.size),
    )
    im = photo(rng)
    c.add(
        "jpeg_no_extension",
        encode(im, "JPEG"),
        c.written("JPEG without extension", "jpeg", size=im.size),
    )
    im = photo(rng)
    c.add("jpeg_named.txt", encode(im, "JPEG"), c.written("JPEG named .txt", "jpeg", size=im.size))


def _not_images(c: _Corpus) -> None:
    c.add("empty.jpg", b"", Expected("empty_file", "zero bytes"))
    c.add("empty.png", b"", Expected("empty_file", "zero bytes"))
    html = (
        b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>"
        b"<body><h1>Not Found</h1></body></html>\n"
    )
    c.add("error_page.jpg", html, Expected("not_an_image", "HTML named .jpg"))
    c.add(
        "error_page.png",
        b"\xef\xbb\xbf  <html><body>Access denied</body></html>",
        Expected("not_an_image", "HTML with BOM named .png"),
    )
    c.add(
        "notes.jpg",
        b"just some text, not an image\n" * 20,
        Expected("not_an_image", "text named .jpg"),
    )
    c.add(
        "data.json.png",
        b'{"image": "elsewhere", "ok": false}',
        Expected("not_an_image", "JSON named .png"),
    )
    c.add(
        "doc.pdf.jpg",
        b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n%%EOF\n",
        Expected("not_an_image", "PDF named .jpg"),
    )
    zipped = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("inside.jpg", encode(photo(c.rng), "JPEG"))
    c.add("archive.jpg", zipped.getvalue(), Expected("not_an_image", "ZIP (holding a JPEG)"))
    c.add("compressed.png", zlib.compress(b"x" * 1000), Expected("not_an_image", "zlib stream"))
    import gzip

    c.add("page.gz.jpg", gzip.compress(html, mtime=0), Expected("not_an_image", "gzip"))
    c.add("random.jpg", random.Random(7).randbytes(4000), Expected("not_an_image", "random bytes"))
    c.add("zeros.png", bytes(4096), Expected("not_an_image", "zero-filled file"))
    c.add(
        "bm_text.bmp",
        b"BM is how this text starts, but it is not a bitmap\n" * 4,
        Expected("not_an_image", "text starting with BM"),
    )
    c.add(
        "riff_wave.webp",
        b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(40),
        Expected("not_an_image", "RIFF WAVE named .webp"),
    )
    c.add(
        "drawing.svg",
        b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" '
        b'width="10" height="10"><rect width="10" height="10"/></svg>\n',
        Expected("unsupported_format", "SVG"),
    )
    c.add(
        "phone.heic",
        b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64),
        Expected("unsupported_format", "HEIC header"),
    )
    c.add("next.jxl", b"\xff\x0a" + bytes(64), Expected("unsupported_format", "JPEG XL codestream"))
    c.add("two_bytes.jpg", b"\xff\xd8", Expected("truncated", "2 bytes of a JPEG signature"))
    c.add("png_sig_only.png", b"\x89PNG\r\n\x1a\n", Expected("truncated", "PNG signature only"))


def _truncations(c: _Corpus) -> None:
    rng = c.rng
    im = photo(rng)
    jpeg = encode(im, "JPEG", quality=90, exif=_exif(1))
    start = _sos_end(jpeg)
    offsets = (
        [3, 4, 20, 100, start - 5, start + 1]
        + [start + (len(jpeg) - start) * k // 10 for k in range(1, 10)]
        + [len(jpeg) - 2, len(jpeg) - 1]
    )
    for off in offsets:
        c.add(f"jpeg_cut_{off}.jpg", jpeg[:off], Expected("truncated", f"JPEG cut at {off}"))
    prog = encode(photo(rng), "JPEG", progressive=True)
    for frac in (0.2, 0.5, 0.9):
        off = int(len(prog) * frac)
        c.add(
            f"progressive_cut_{off}.jpg",
            prog[:off],
            Expected("truncated", f"progressive JPEG cut at {off}"),
        )
    rotated = encode(photo(rng), "JPEG", exif=_exif(6))
    c.add(
        "rotated_cut.jpg",
        rotated[: len(rotated) * 2 // 3],
        Expected("truncated", "EXIF-rotated JPEG cut (transcode path)"),
    )
    png = encode(photo(rng), "PNG")
    for off in (
        9,
        20,
        33,
        40,
        len(png) // 3,
        len(png) // 2,
        len(png) - 40,
        len(png) - 12,
        len(png) - 1,
    ):
        c.add(f"png_cut_{off}.png", png[:off], Expected("truncated", f"PNG cut at {off}"))
    gif = encode(photo(rng, 120, 90).convert("P"), "GIF")
    for frac in (0.05, 0.3, 0.6, 0.95):
        off = int(len(gif) * frac)
        c.add(f"gif_cut_{off}.gif", gif[:off], Expected("truncated", f"GIF cut at {off}"))
    im = photo(rng, 120, 90)
    c.add(
        "gif_no_trailer.gif",
        encode(im.convert("P"), "GIF")[:-1],
        c.written("GIF without its trailer byte (TF and giflib accept it)", "gif", size=im.size),
    )


def _appended(c: _Corpus) -> None:
    rng = c.rng
    tail = b"garbage after the image \x00\xff\xd8" * 50
    for fmt, ext in (("JPEG", "jpg"), ("PNG", "png")):
        im = photo(rng)
        c.add(
            f"appended.{ext}",
            encode(im, fmt) + tail,
            c.written(f"{fmt} + garbage", fmt.lower(), size=im.size),
        )
    im = photo(rng)
    c.add(
        "appended_zip.jpg",
        encode(im, "JPEG") + b"PK\x03\x04" + bytes(200),
        c.written("JPEG + ZIP polyglot", "jpeg", size=im.size),
    )
    im = photo(rng)
    c.add(
        "appended.gif",
        encode(im.convert("P"), "GIF") + tail,
        c.written("GIF + garbage", "gif", size=im.size),
    )


def _header_damage(c: _Corpus) -> None:
    rng = c.rng
    im = photo(rng)
    jpeg = encode(im, "JPEG", quality=90)
    sof = _segment(jpeg, 0xC0)
    dqt = _segment(jpeg, 0xDB)
    dht = _segment(jpeg, 0xC4)
    sos = jpeg.rfind(b"\xff\xda")
    cases = {
        "sof_zero_height": (_set(jpeg, sof + 5, b"\x00\x00"), "corrupt"),
        "sof_zero_width": (_set(jpeg, sof + 7, b"\x00\x00"), "corrupt"),
        "sof_5_components": (_set(jpeg, sof + 9, b"\x05"), "corrupt"),
        "sof_12_bit": (_set(jpeg, sof + 4, b"\x0c"), "unsupported_format"),
        "sof_lossless": (_set(jpeg, sof + 1, b"\xc3"), "unsupported_format"),
        "dqt_bad_table_id": (_set(jpeg, dqt + 4, b"\x0f"), "corrupt"),
        "dht_bogus_counts": (_set(jpeg, dht + 5, b"\xff" * 16), "corrupt"),
        "sos_bad_component": (_set(jpeg, sos + 5, b"\x09"), "corrupt"),
        "segment_length_1": (_set(jpeg, dqt + 2, b"\x00\x01"), "corrupt"),
        "no_sof": (_set(jpeg, sof + 1, b"\xc8"), "corrupt"),
        "marker_in_data": (_set(jpeg, _sos_end(jpeg) + 500, b"\xff\xc8"), None),
    }
    for name, (data, outcome) in cases.items():
        c.add(
            f"jpeg_{name}.jpg",
            data,
            Expected(outcome, f"JPEG {name}")
            if outcome
            else c.by_tf(f"JPEG {name}", data, "jpeg", "corrupt", im.size),
        )
    im = photo(rng)
    png = encode(im, "PNG")
    idat = png.index(b"IDAT") - 4
    idat_len = struct.unpack(">I", png[idat : idat + 4])[0]
    body = png[idat + 8 : idat + 8 + idat_len]
    bad = bytearray(body)
    bad[len(bad) // 2] ^= 0x55
    recrc = png[:idat] + png_chunk(b"IDAT", bytes(bad)) + png[idat + 12 + idat_len :]
    cases = {
        "ihdr_bitflip": _flip(png, 17, 3),
        "ihdr_crc": _flip(png, 30, 0),
        "idat_bitflip": _flip(png, idat + 8 + idat_len // 2, 5),
        "idat_bad_zlib_good_crc": recrc,
        "iend_crc": _flip(png, len(png) - 1, 0),
        "bad_color_type": png[:8]
        + png_chunk(b"IHDR", struct.pack(">IIBBBBB", im.width, im.height, 8, 5, 0, 0, 0))
        + png[33:],
    }
    for name, data in cases.items():
        c.add(f"png_{name}.png", data, Expected("corrupt", f"PNG {name}"))
    text = png[:33] + png_chunk(b"tEXt", b"Comment\x00hello") + png[33:]
    tpos = text.index(b"tEXt")
    c.add(
        "png_text_crc.png",
        _flip(text, tpos + 10, 1),
        c.by_tf(
            "PNG ancillary chunk with bad CRC", _flip(text, tpos + 10, 1), "png", "corrupt", im.size
        ),
    )
    im = photo(rng, 120, 90)
    gif = encode(im.convert("P"), "GIF")
    c.add(
        "gif_bad_block.gif",
        _set(gif, _gif_first_frame(gif), b"\x99"),
        Expected("corrupt", "GIF with an unknown block type"),
    )
    # EXIF that is garbage must not matter: TF ignores it, the pixels are fine.
    im = photo(rng)
    c.add(
        "exif_garbage.jpg",
        encode(im, "JPEG", exif=b"Exif\x00\x00II*\x00\xff\xff\xff\x7f" + bytes(30)),
        c.written("JPEG with garbage EXIF", "jpeg", size=im.size),
    )
    c.add(
        "exif_count_huge.jpg",
        encode(im, "JPEG", exif=b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\xff\xff" + bytes(20)),
        c.written("JPEG with an EXIF IFD claiming 65535 entries", "jpeg", size=im.size),
    )


def _orientation(c: _Corpus) -> None:
    rng = c.rng
    for value in range(1, 9):
        im = photo(rng)
        size = im.size if value < 5 else im.size[::-1]
        reasons = ["exif_orientation"] if value != 1 else []
        c.add(
            f"orientation_{value}.jpg",
            encode(im, "JPEG", exif=_exif(value)),
            c.written(f"JPEG EXIF orientation {value}", "jpeg", reasons=reasons, size=size),
        )
    im = photo(rng)
    c.add(
        "orientation_6.png",
        encode(im, "PNG", exif=_exif(6)),
        c.written(
            "PNG eXIf orientation 6", "png", reasons=["exif_orientation"], size=im.size[::-1]
        ),
    )
    im = photo(rng)
    c.add(
        "orientation_9.jpg",
        encode(im, "JPEG", exif=_exif(9)),
        c.written("JPEG EXIF orientation 9 (invalid, ignored)", "jpeg", size=im.size),
    )
    im = photo(rng)
    c.add(
        "orientation_8_cmyk.jpg",
        encode(im.convert("CMYK"), "JPEG", exif=_exif(8)),
        c.written(
            "CMYK JPEG with orientation 8", "jpeg", reasons=["exif_orientation"], size=im.size[::-1]
        ),
    )


def _animated(c: _Corpus) -> None:
    rng = c.rng
    for frames in (2, 5):
        im = photo(rng, 120, 90)
        seq = [im.rotate(30 * k).convert("P") for k in range(frames)]
        data = encode(seq[0], "GIF", save_all=True, append_images=seq[1:], duration=80, loop=0)
        c.add(f"animated_{frames}.gif", data, c.animated(f"GIF, {frames} frames", "gif", im.size))
    im = photo(rng, 120, 90)
    seq = [im, im.rotate(90, expand=False), im.rotate(180)]
    c.add(
        "animated.png",
        encode(seq[0], "PNG", save_all=True, append_images=seq[1:]),
        c.animated("APNG, 3 frames", "png", im.size),
    )
    c.add(
        "animated_named.gif.png",
        encode(seq[0], "GIF", save_all=True, append_images=seq[1:]),
        c.animated("animated GIF named .png", "gif", im.size),
    )
    anim = encode(seq[0], "GIF", save_all=True, append_images=seq[1:])
    c.add(
        "animated_cut.gif",
        anim[: len(anim) * 3 // 4],
        c.animated("animated GIF cut inside its last frame", "gif", im.size),
    )


def _other_formats(c: _Corpus) -> None:
    rng = c.rng
    im = photo(rng)
    pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=32)
    rgba = im.convert("RGBA")
    simple = [
        ("rgb.bmp", encode(im, "BMP"), "bmp"),
        ("palette.bmp", encode(pal, "BMP"), "bmp"),
        ("bilevel.bmp", encode(im.convert("1"), "BMP"), "bmp"),
        ("lossy.webp", encode(im, "WEBP", quality=80), "webp"),
        ("lossless.webp", encode(rgba, "WEBP", lossless=True), "webp"),
        ("rgb.tiff", encode(im, "TIFF"), "tiff"),
        ("lzw.tif", encode(im, "TIFF", compression="tiff_lzw"), "tiff"),
        ("cmyk.tiff", encode(im.convert("CMYK"), "TIFF"), "tiff"),
        (
            "gray16.tiff",
            encode(Image.fromarray(np.asarray(im.convert("L")).astype(np.uint16) * 257), "TIFF"),
            "tiff",
        ),
        ("rgb.ppm", encode(im, "PPM"), "ppm"),
        ("gray.pgm", encode(im.convert("L"), "PPM"), "ppm"),
        ("rgb.tga", encode(im, "TGA"), "tga"),
        ("rgb.pcx", encode(im, "PCX"), "pcx"),
        ("icon.ico", encode(im.resize((48, 48)), "ICO", sizes=[(48, 48)]), "ico"),
        ("rgb.jp2", encode(im, "JPEG2000"), "jpeg2000"),
        ("rgb.qoi", encode(im, "QOI"), "qoi"),
        ("rgb.avif", encode(im, "AVIF", quality=70), "avif"),
    ]
    for name, data, fmt in simple:
        size = (48, 48) if fmt == "ico" else im.size
        as_is = fmt == "webp" and not webp_has_alpha(data)
        if fmt == "tiff":
            c.add(name, data, c.written_tiff(f"TIFF {name}", size))
            continue
        c.add(name, data, c.unsupported(f"{fmt.upper()} {name}", fmt, size, as_is=as_is))
    c.add(
        "figure.eps",
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 200 100\n"
        b"newpath 0 0 moveto 20 10 lineto stroke\n%%EOF\n",
        c.unsupported("EPS (needs Ghostscript)", "eps", (200, 100), decodable=False),
    )
    c.add(
        "float.tiff",
        encode(Image.fromarray(np.zeros((20, 30), np.float32)), "TIFF"),
        c.written_tiff("32-bit float TIFF", (30, 20)),
    )
    seq = [im, im.rotate(90), im.rotate(180)]
    c.add(
        "animated.webp",
        encode(seq[0], "WEBP", save_all=True, append_images=seq[1:]),
        c.unsupported("animated WebP", "webp", im.size, animated=True),
    )
    c.add(
        "pages.tiff",
        encode(seq[0], "TIFF", save_all=True, append_images=seq[1:]),
        c.written_tiff("3-page TIFF", im.size, animated=True),
    )
    bmp = encode(im, "BMP")
    c.add(
        "bmp_cut.bmp",
        bmp[: len(bmp) // 2],
        Expected("unsupported_format", "BMP cut in half")
        if c.opts.transcode == "none"
        else Expected("truncated", "BMP cut in half"),
    )
    webp = encode(im, "WEBP")
    c.add(
        "webp_cut.webp",
        webp[: len(webp) // 2],
        Expected("unsupported_format", "WebP cut in half")
        if c.opts.transcode == "none"
        else Expected("truncated", "WebP cut in half"),
    )


def webp_has_alpha(data: bytes) -> bool:
    """The alpha flag libwebp reports (VP8X flag bit, VP8L header bit): TensorFlow's
    decode_image(channels=3) refuses such a WebP."""
    if data[12:16] == b"VP8X":
        return bool(data[20] & 0x10)
    if data[12:16] == b"VP8L":
        return bool((int.from_bytes(data[21:25], "little") >> 28) & 1)
    return False


def _bombs(c: _Corpus) -> None:
    rows = zlib.compress(b"\x00" * 4000)
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    c.add(
        "bomb.png",
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", rows)
        + png_chunk(b"IEND", b""),
        Expected("too_many_pixels", "PNG 100000x100000 header"),
    )
    wide = struct.pack(">IIBBBBB", 2**31 - 1, 1, 8, 0, 0, 0, 0)
    c.add(
        "bomb_wide.png",
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", wide)
        + png_chunk(b"IDAT", rows)
        + png_chunk(b"IEND", b""),
        Expected("too_many_pixels", "PNG (2^31-1)x1 header"),
    )
    jpeg = encode(photo(c.rng, 64, 64), "JPEG")
    sof = _segment(jpeg, 0xC0)
    c.add(
        "bomb.jpg",
        _set(jpeg, sof + 5, struct.pack(">HH", 65000, 65000)),
        Expected("too_many_pixels", "JPEG 65000x65000 SOF"),
    )
    gif = encode(photo(c.rng, 64, 64).convert("P"), "GIF")
    c.add(
        "bomb_screen.gif",
        _set(gif, 6, struct.pack("<HH", 65535, 65535)),
        Expected("too_many_pixels", "GIF 65535x65535 screen"),
    )
    frame = _gif_first_frame(gif)
    c.add(
        "bomb_frame.gif",
        _set(gif, frame + 5, struct.pack("<HH", 60000, 60000)),
        Expected("too_many_pixels", "GIF with a 60000x60000 frame on a 64x64 screen"),
    )
    bmp = encode(photo(c.rng, 64, 64), "BMP")
    c.add(
        "bomb.bmp",
        _set(bmp, 18, struct.pack("<ii", 50000, 50000)),
        Expected("too_many_pixels", "BMP 50000x50000 header"),
    )
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00\x00\x00\x00" + (16383).to_bytes(3, "little") * 2
    c.add(
        "bomb.webp",
        b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x,
        Expected("too_many_pixels", "WebP VP8X 16384x16384 canvas"),
    )
    tiff = encode(photo(c.rng, 64, 64), "TIFF")
    big = bytearray(tiff)
    # Pillow writes ImageWidth/ImageLength as SHORT or LONG entries in IFD0; patch both values.
    ifd = struct.unpack("<I", tiff[4:8])[0]
    for k in range(struct.unpack("<H", tiff[ifd : ifd + 2])[0]):
        e = ifd + 2 + 12 * k
        if struct.unpack("<H", tiff[e : e + 2])[0] in (256, 257):
            big[e + 2 : e + 4] = struct.pack("<H", 4)
            big[e + 8 : e + 12] = struct.pack("<I", 60000)
    c.add(
        "bomb.tiff",
        bytes(big),
        Expected("too_many_pixels", "TIFF 60000x60000 IFD"),
    )
    prog = encode(photo(c.rng, 64, 64), "JPEG", progressive=True)
    eoi = prog.rindex(b"\xff\xd9")
    sos = prog.rfind(b"\xff\xda")
    scan = prog[sos:eoi]
    c.add(
        "scan_bomb.jpg",
        prog[:eoi] + scan * 600 + b"\xff\xd9",
        Expected("too_many_scans", "progressive JPEG with 600+ scans"),
    )


def _random_damage(c: _Corpus, count: int) -> None:
    """Random truncations, bit flips in compressed data and cut+EOI repairs, to reach n."""
    rng = c.rng
    for i in range(count):
        kind = rng.choice(("jpeg", "jpeg", "progressive", "png", "gif"))
        im = photo(rng, rng.randint(40, 160), rng.randint(40, 160))
        if kind == "gif":
            data = encode(im.convert("P"), "GIF")
        elif kind == "png":
            data = encode(im, "PNG")
        else:
            data = encode(
                im, "JPEG", quality=rng.choice((60, 85, 95)), progressive=kind == "progressive"
            )
        fmt = "jpeg" if kind == "progressive" else kind
        mutation = rng.choice(("truncate", "flip", "flip", "cut_eoi" if fmt == "jpeg" else "flip"))
        start = (
            _sos_end(data)
            if fmt == "jpeg"
            else (data.index(b"IDAT") + 4 if fmt == "png" else _gif_first_frame(data) + 12)
        )
        if mutation == "truncate":
            off = rng.randrange(start, len(data) - 1)
            c.add(
                f"random_{i}_cut_{off}.{fmt}",
                data[:off],
                Expected("truncated", f"random: {kind} cut at {off}"),
            )
        elif mutation == "flip":
            off = rng.randrange(start, len(data) - 20)
            damaged = _flip(data, off, rng.randrange(8))
            failure = "corrupt"
            c.add(
                f"random_{i}_flip_{off}.{fmt}",
                damaged,
                c.by_tf(f"random: {kind} bit flip at {off}", damaged, fmt, failure, im.size),
            )
        else:
            off = rng.randrange(start + 10, len(data) - 4)
            damaged = data[:off] + b"\xff\xd9"
            c.add(
                f"random_{i}_cut_eoi_{off}.{fmt}",
                damaged,
                c.by_tf(f"random: {kind} cut at {off} + EOI", damaged, fmt, "corrupt", im.size),
            )


def make_hostile_corpus(
    directory: str, n: int = 200, seed: int = 0, opts: CheckOptions | None = None
) -> dict[str, Expected]:
    """Write at least `n` hostile files under `directory/<label>/` and say what must become of each.

    Args:
        directory: where to write (created if missing).
        n: the minimum number of files; the fixed catalog (~190 files) is topped up with random
            damage up to n.
        seed: makes the crops and the random damage reproducible.
        opts: the CheckOptions the converter runs with (default: the defaults); expectations for
            transcode, animation, EXIF and size options follow them.

    Returns:
        path -> Expected(outcome, case, format, transcode, source_format).
    """
    c = _Corpus(directory, random.Random(seed), opts or CheckOptions())
    for part in (
        _healthy,
        _wrong_extension,
        _not_images,
        _truncations,
        _appended,
        _header_damage,
        _orientation,
        _animated,
        _other_formats,
        _bombs,
    ):
        part(c)
    _random_damage(c, max(0, n - len(c.files)) or 10)
    return c.files
