"""A broad corpus of real-world image format variants (test helper): every BMP header version,
WebP VP8/VP8L/VP8X (alpha, animation, EXIF, ICC), JPEG/PNG/GIF flavours, and other formats.

`bmp_variant` builds BMPs by hand for the header versions Pillow does not write (OS/2 v1 12, v3
40 with bitfields, 52, 56, OS/2 v2 64, v4 108, v5 124; top-down with a negative height).
"""

from __future__ import annotations

import io
import os
import random
import struct

import numpy as np
from PIL import Image

__all__ = [
    "bmp_variant",
    "make_format_corpus",
    "tf_decodable_paths",
    "tf_decodes_somehow",
    "webp_variants",
]


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _photo(rng: random.Random, w: int, h: int) -> Image.Image:
    """A smooth gradient with noise: compresses like a photo, not like noise."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack(
        [
            (x * 255 // max(w - 1, 1)),
            (y * 255 // max(h - 1, 1)),
            ((x + y) * 127 // max(w + h - 2, 1)),
        ],
        axis=-1,
    )
    noise = np.random.default_rng(rng.randrange(1 << 30)).integers(0, 24, (h, w, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def bmp_variant(im: Image.Image, header_size: int, bpp: int = 24, top_down: bool = False) -> bytes:
    """A BMP with an info header of `header_size` bytes (12, 40, 52, 56, 64, 108, 124).

    bpp 24 is BI_RGB; bpp 16 (5-6-5) and 32 (8-8-8-8) use BI_BITFIELDS masks (in the header
    for 52 and up, after a 40-byte header otherwise). 12 (OS/2 v1) allows 24 bpp only.
    """
    rgb = np.asarray(im.convert("RGB"), dtype=np.uint32)
    h, w = rgb.shape[:2]
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    if bpp == 24:
        px = np.stack([b, g, r], axis=-1).astype(np.uint8).reshape(h, w * 3)
        masks = None
        compression = 0
    elif bpp == 16:
        v = ((r >> 3) << 11) | ((g >> 2) << 5) | (b >> 3)
        px = v.astype("<u2").view(np.uint8).reshape(h, w * 2)
        masks = (0xF800, 0x07E0, 0x001F, 0)
        compression = 3
    elif bpp == 32:
        v = (r << 16) | (g << 8) | b | (np.uint32(255) << 24)
        px = v.astype("<u4").view(np.uint8).reshape(h, w * 4)
        masks = (0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000)
        compression = 3
    else:
        raise ValueError(bpp)
    stride = (px.shape[1] + 3) & ~3
    rows = np.zeros((h, stride), np.uint8)
    rows[:, : px.shape[1]] = px
    if not top_down:
        rows = rows[::-1]
    pixels = rows.tobytes()
    if header_size == 12:
        if bpp != 24 or top_down:
            raise ValueError("OS/2 v1 headers hold 24 bpp, bottom-up, here")
        info = struct.pack("<IHHHH", 12, w, -h if top_down else h, 1, 24)
        extra = b""
    else:
        if header_size == 64 and compression:
            raise ValueError("OS/2 v2 has no BI_BITFIELDS")
        info = struct.pack(
            "<IiiHHIIiiII",
            header_size,
            w,
            -h if top_down else h,
            1,
            bpp,
            compression,
            len(pixels),
            2835,
            2835,
            0,
            0,
        )
        extra = b""
        if header_size == 40:
            if masks:
                extra = struct.pack("<III", *masks[:3])
        elif header_size == 64:
            info += bytes(24)
        else:
            m = masks or (0x00FF0000, 0x0000FF00, 0x000000FF, 0)
            info += struct.pack("<III", *m[:3])
            if header_size >= 56:
                info += struct.pack("<I", m[3])
            if header_size >= 108:
                info += b"BGRs" + bytes(36) + bytes(12)  # sRGB: endpoints and gammas unused
            if header_size == 124:
                info += struct.pack("<IIII", 4, 0, 0, 0)  # intent: perceptual
        assert len(info) == header_size, (len(info), header_size)
    offset = 14 + len(info) + len(extra)
    head = b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset)
    return head + info + extra + pixels


def webp_variants(im: Image.Image) -> list[tuple[str, bytes]]:
    """WebPs Pillow writes: lossy (VP8), lossless (VP8L), alpha, EXIF/ICC (VP8X), animated."""
    rgba = im.convert("RGBA")
    alpha = np.asarray(rgba).copy()
    alpha[..., 3] = np.linspace(0, 255, alpha.shape[1], dtype=np.uint8)[None, :]
    rgba = Image.fromarray(alpha)
    frames = [im, im.rotate(90), im.rotate(180)]
    exif = Image.Exif()
    exif[0x010F] = "imgrec"
    return [
        ("lossy", _encode(im, "WEBP", quality=80)),
        ("lossless", _encode(im, "WEBP", lossless=True)),
        ("lossy_alpha", _encode(rgba, "WEBP", quality=80)),
        ("lossless_alpha", _encode(rgba, "WEBP", lossless=True)),
        ("exif", _encode(im, "WEBP", exif=exif.tobytes())),
        ("gray", _encode(im.convert("L"), "WEBP")),
        ("animated", _encode(frames[0], "WEBP", save_all=True, append_images=frames[1:])),
        (
            "animated_lossless",
            _encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True),
        ),
    ]


def tf_decodes_somehow(data: bytes) -> bool:
    """Whether tf.io.decode_image decodes these bytes with any channel count (0, 3 or 4), as
    a still or as an animation: the images a user expects a converter to keep."""
    import tensorflow as tf

    for channels in (0, 3, 4):
        for expand in (False, True):
            try:
                tf.io.decode_image(data, channels=channels, expand_animations=expand)
                return True
            except (tf.errors.InvalidArgumentError, tf.errors.UnknownError):
                continue
    return False


# Imports TensorFlow once, then decodes in forked children (no TensorFlow op has run before the
# fork): a child that dies, or reports nothing for _STUCK_S seconds, is replaced by a new fork
# that starts after the last file reported, and the file it was on counts as not decodable. One
# TensorFlow import instead of one per crash (four crashes on the broad corpus: ~3 s of CPU
# each). A child can also hang instead of dying: one sat in a futex wait on an animated WebP,
# its TensorFlow threads deadlocked, until the test's 600 s timeout, which fails the test
# (2026-12-03, once in ~15 runs); such a child is now killed and its file counts as not decodable.
_STUCK_S = 60
_CHILD = """
import os, select, signal, sys
import tensorflow  # noqa: F401 - imported once, before any fork
from tests.format_corpus import tf_decodes_somehow
stuck_s = float(sys.argv[1])
todo = sys.stdin.read().splitlines()
while todo:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        with os.fdopen(write_end, "w") as out:
            for path in todo:
                with open(path, "rb") as f:
                    ok = tf_decodes_somehow(f.read())
                out.write("1\\n" if ok else "0\\n")
                out.flush()
        os._exit(0)
    os.close(write_end)
    got = b""
    while True:
        if not select.select([read_end], [], [], stuck_s)[0]:
            os.kill(pid, signal.SIGKILL)  # stuck on a file: it counts as not decodable
            break
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        got += chunk
    os.close(read_end)
    lines = got.decode().split("\\n")[:-1]  # whole lines only
    _, status = os.waitpid(pid, 0)
    for flag, path in zip(lines, todo):
        print(flag + " " + path, flush=True)
    if status != 0:  # it died, or was killed, on the next file
        print("0 " + todo[len(lines)], flush=True)
    todo = todo[len(lines) + (status != 0):]
"""


def tf_decodable_paths(paths: list[str]) -> set[str]:
    """The paths tf_decodes_somehow accepts, decided outside the test process: TensorFlow 2.21's
    own BMP/WebP decoders corrupt the heap on some valid files (glibc aborts the process with
    "free(): invalid next size" a few files later), so they must not run in the test process.
    One child process (_CHILD) decodes them in forks of itself."""
    import subprocess

    from tests.runs import tf_script

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        tf_script(_CHILD, str(_STUCK_S)),
        input="\n".join(paths),
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = [line.split(" ", 1) for line in proc.stdout.splitlines() if line[:2] in ("0 ", "1 ")]
    assert [path for _, path in done] == list(paths), proc.stderr[-3000:]
    return {path for flag, path in done if flag == "1"}


def make_format_corpus(root: str, seed: int = 0, copies: int = 3) -> dict[str, str]:
    """Write the corpus under root/<format>/; {path: variant name}. `copies` images per variant
    (different sizes, odd and even sides)."""
    rng = random.Random(seed)
    files: dict[str, str] = {}

    def add(kind: str, name: str, data: bytes) -> None:
        folder = os.path.join(root, kind)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{len(files):04d}_{name}")
        with open(path, "wb") as f:
            f.write(data)
        files[path] = name

    for k in range(copies):
        w, h = rng.choice((16, 33, 64, 97)), rng.choice((12, 31, 48, 80))
        im = _photo(rng, w, h)
        gray = im.convert("L")
        pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
        rgba = im.convert("RGBA")
        # JPEG
        add("jpeg", f"baseline_{k}.jpg", _encode(im, "JPEG", quality=85))
        add("jpeg", f"progressive_{k}.jpg", _encode(im, "JPEG", progressive=True))
        add("jpeg", f"gray_{k}.jpg", _encode(gray, "JPEG"))
        add("jpeg", f"cmyk_{k}.jpg", _encode(im.convert("CMYK"), "JPEG"))
        add("jpeg", f"444_{k}.jpg", _encode(im, "JPEG", subsampling=0))
        add("jpeg", f"restart_{k}.jpg", _encode(im, "JPEG", restart_marker_blocks=2))
        # PNG
        add("png", f"rgb_{k}.png", _encode(im, "PNG"))
        add("png", f"rgba_{k}.png", _encode(rgba, "PNG"))
        add("png", f"gray_{k}.png", _encode(gray, "PNG"))
        add("png", f"gray_alpha_{k}.png", _encode(im.convert("LA"), "PNG"))
        add("png", f"palette_{k}.png", _encode(pal, "PNG"))
        add("png", f"palette_trns_{k}.png", _encode(pal, "PNG", transparency=0))
        add("png", f"bilevel_{k}.png", _encode(im.convert("1"), "PNG"))
        add(
            "png",
            f"gray16_{k}.png",
            _encode(Image.fromarray(np.asarray(gray).astype(np.uint16) * 257), "PNG"),
        )
        add("png", f"interlaced_{k}.png", _encode(im, "PNG", interlace=1))
        apng = _encode(im, "PNG", save_all=True, append_images=[im.rotate(90)])
        add("png", f"apng_{k}.png", apng)
        # GIF
        add("gif", f"still_{k}.gif", _encode(pal, "GIF"))
        add("gif", f"transparent_{k}.gif", _encode(pal, "GIF", transparency=0))
        add(
            "gif",
            f"animated_{k}.gif",
            _encode(pal, "GIF", save_all=True, append_images=[pal.rotate(90)], duration=50),
        )
        # BMP: what Pillow writes, then hand-built header versions
        for mode in ("RGB", "RGBA", "L", "P", "1"):
            add("bmp", f"pillow_{mode}_{k}.bmp", _encode(im.convert(mode), "BMP"))
        add("bmp", f"pillow_rle8_{k}.bmp", _bmp_rle8(pal))
        for size in (12, 40, 52, 56, 64, 108, 124):
            for bpp in (24, 16, 32):
                if (size == 12 and bpp != 24) or (size == 64 and bpp != 24):
                    continue
                for top_down in (False, True) if size != 12 else (False,):  # v1: unsigned
                    name = f"v{size}_{bpp}bpp{'_topdown' if top_down else ''}_{k}.bmp"
                    add("bmp", name, bmp_variant(im, size, bpp, top_down))
        # WebP
        for name, data in webp_variants(im):
            add("webp", f"{name}_{k}.webp", data)
        # Formats TensorFlow does not decode (rejected by default)
        add("other", f"rgb_{k}.tiff", _encode(im, "TIFF"))
        add("other", f"rgb_{k}.ico", _encode(im.resize((32, 32)), "ICO", sizes=[(32, 32)]))
        add("other", f"rgb_{k}.ppm", _encode(im, "PPM"))
    return files


def _bmp_rle8(pal: Image.Image) -> bytes:
    """An 8-bit RLE-compressed BMP (BI_RLE8), which Pillow reads but does not write: every pixel
    an encoded run of 1, each row ended by an end-of-line escape."""
    px = np.asarray(pal)
    h, w = px.shape
    palette = pal.getpalette()[: 256 * 3]
    palette += [0] * (256 * 3 - len(palette))
    table = b"".join(
        bytes((palette[3 * i + 2], palette[3 * i + 1], palette[3 * i], 0)) for i in range(256)
    )
    data = bytearray()
    for row in px[::-1]:
        for v in row:
            data += bytes((1, int(v)))
        data += b"\x00\x00"  # end of line
    data += b"\x00\x01"  # end of bitmap
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 8, 1, len(data), 2835, 2835, 256, 0)
    offset = 14 + 40 + len(table)
    head = b"BM" + struct.pack("<IHHI", offset + len(data), 0, 0, offset)
    return head + info + table + bytes(data)
