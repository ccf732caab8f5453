"""Pillow for the formats TensorFlow does not store as is: restricted plugin open, header, pixels."""

from __future__ import annotations

import io
import struct

import numpy as np
from PIL import Image

from core.rejects import Rejected
from transforms.images import bmp_repair, decoder_pool
from transforms.images.headers import (
    ORIENTATION_TRANSPOSE,
    Header,
    exif_orientation,
    webp_alpha,
    webp_as_is,
)
from transforms.images.limits import TF_DECODABLE_OTHER, CheckOptions
from transforms.images.sniff import describe_non_image, sniff_container, undecodable_image

# Package-private: transforms.images.check is the entry point; its sibling modules use these.
__all__ = [
    "MODE_CHANNELS",
    "not_decodable",
    "pil_header",
    "pil_pixels",
    "PIL_PLUGINS",
    "pillow_open",
    "probe_other",
]


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


# The stored mode -> channels that tf.io.decode_image(channels=0) yields for it.
MODE_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def pillow_open(data: bytes, formats: tuple[str, ...]):
    """Open lazily (header only) with the Pillow plugins of `formats` only, or None if none accepts.

    The restriction of Image.open(fp, formats=...), but calling the plugins directly: Image.open
    would also run Pillow's own decompression-bomb check (89.5 Mpx warning, 179 Mpx error);
    --max_pixels replaces it, checked by us before anything is decoded. A plugin outside
    `formats` never runs: less attack surface.
    """
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


# Our name -> the only Pillow plugin allowed to open it (a name of Image.ID).
PIL_PLUGINS = {
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
# TensorFlow). Every other plugin runs in a decoder subprocess that may die (decoder_pool).
_IN_PROCESS = ("bmp", "webp", "gif")


def pil_header(im, fmt: str) -> Header:
    """What a lazily opened Pillow image says about itself. Plugins parse lazily (PSD layers,
    TIFF frames and tags), so their errors here are this file's damage."""
    try:
        h = Header(width=im.size[0], height=im.size[1], complete=True)
        h.frames = int(getattr(im, "n_frames", 1) or 1)
        # Our own EXIF reader: Pillow's getexif() warns on damaged EXIF, and it must stay quiet.
        if isinstance(im.info.get("exif"), bytes):
            h.orientation = exif_orientation(im.info["exif"])
        elif hasattr(im, "tag_v2"):  # TIFF: Orientation is a tag of the image's own IFD
            value = im.tag_v2.get(0x0112, 1)
            h.orientation = value if value in ORIENTATION_TRANSPOSE else 1
            # Pillow (>= 8) transposes TIFFs on load, always; its size is already the upright one.
            h.upright_on_load = True
    except _PIL_HEADER_ERRORS as e:
        raise Rejected("corrupt", f"Pillow ({fmt.upper()}): {type(e).__name__}: {e}") from e
    return h


def pil_pixels(im):
    """The first frame of a lazily opened Pillow image in L, LA, RGB or RGBA, and its ICC."""
    try:
        im.seek(0)
        im.load()
        return _normalize_mode(im), im.info.get("icc_profile")
    except Image.DecompressionBombError as e:
        raise Rejected("too_many_pixels", f"Pillow ({im.format}): {e}") from e
    except _PIL_HEADER_ERRORS as e:
        reason = "truncated" if "truncated" in str(e) else "corrupt"
        raise Rejected(reason, f"Pillow ({im.format}): {type(e).__name__}: {e}") from e


def not_decodable(data: bytes, fmt: str) -> Rejected:
    """A container whose plugin could not even open it: cut (RIFF size) or damaged."""
    if data[:4] == b"RIFF" and int.from_bytes(data[4:8], "little") + 8 > len(data):
        return Rejected(
            "truncated",
            f"the RIFF header declares {int.from_bytes(data[4:8], 'little') + 8} bytes; "
            f"the file has {len(data)}",
        )
    return Rejected("corrupt", f"Pillow cannot open this {fmt.upper()} (damaged header)")


def probe_other(data: bytes, opts: CheckOptions) -> tuple[str, Header]:
    """A format TensorFlow does not store as is: its name and header, or Rejected.

    The name comes from magic bytes; a format these options do not keep is rejected before any
    plugin runs. BMP/WebP are opened in this process, every other format in a decoder
    subprocess (decoder_pool).
    """
    fmt = sniff_container(data)
    if fmt is None:
        what = undecodable_image(data)
        if what:
            raise Rejected(
                "unsupported_format",
                f"{what}: neither TensorFlow's decode_image "
                "nor Pillow decodes it here; convert it before the run",
            )
        raise Rejected("not_an_image", describe_non_image(data))
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
    if fmt not in TF_DECODABLE_OTHER and opts.transcode == "auto":
        raise Rejected(
            "unsupported_format",
            f"TensorFlow does not decode {fmt.upper()}; pass --transcode png or "
            "--transcode jpeg to store it re-encoded",
        )
    if fmt == "bmp":  # layouts TensorFlow decodes and Pillow refuses, rewritten; else as is
        data = bmp_repair.for_pillow(data, opts.max_pixels)
    if fmt in _IN_PROCESS:
        im = pillow_open(data, PIL_PLUGINS[fmt])
        if im is None:
            return fmt, Header()  # source_pixels names the damage
        h = pil_header(im, fmt)
        h.pil = im
    else:
        h = decoder_pool.probe(data, PIL_PLUGINS.get(fmt, ()))
        if h is None:
            h = Header()
        h.isolated = True
    if fmt == "webp":
        h.channels = 4 if webp_alpha(data) else 3
        h.webp_as_is = webp_as_is(data)
    return fmt, h


def _normalize_mode(im):
    """L, LA, RGB or RGBA: what TF's decoders produce; 16-bit gray keeps its top 8 bits."""
    mode = im.mode
    if mode in MODE_CHANNELS:
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
