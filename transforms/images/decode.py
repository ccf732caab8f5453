"""TensorFlow decode as the reader decodes, the strict libjpeg check, and diagnosis of failures."""

from __future__ import annotations

import zlib

from core.rejects import Rejected
from transforms.images.headers import SOF_NAMES, Header, skip_gif_blocks
from transforms.images.pillow_probe import not_decodable

# Package-private: transforms.images.check is the entry point; its sibling modules use these.
__all__ = [
    "dct_shape",
    "dct_side",
    "decode_failure",
    "libjpeg_warning",
    "load_tf",
    "tf_decode",
    "tf_message",
    "VERIFY_DCT_RATIO",
]


# TensorFlow's JPEG and PNG kernels refuse outputs of 2**29 or more (bytes for JPEG, pixels for
# PNG); a --max_pixels above that surfaces as too_many_pixels, not as a decoder error.
_TF_MAX_OUTPUT = 1 << 29


def load_tf():
    import tensorflow as tf  # Deferred: importing this module must stay cheap for Beam pickling.

    return tf


def tf_message(e) -> str:
    lines = [ln for ln in str(getattr(e, "message", e)).splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    # Eager errors start with "{{function_node __wrapped__DecodeJpeg_device_...}} ".
    if text.startswith("{{") and "}}" in text:
        text = text.split("}}", 1)[1].strip()
    return text.replace(" [Op:DecodeImage]", "").replace(" [Op:DecodeJpeg]", "")


# --jpeg_verify dct: libjpeg's smallest DCT scale, the cheapest decode that still reads every
# coefficient.
VERIFY_DCT_RATIO = 8

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


def libjpeg_warning(data: bytes) -> str | None:
    """What libjpeg warned about while decoding `data` (data it had to repair or skip: a cut or
    zeroed stretch of entropy data decodes to grey or smeared blocks without an error), or None.

    One libjpeg-turbo decode at 1/8 scale through simplejpeg with strict=True, which turns
    libjpeg's warnings into errors. Only called on bytes TensorFlow
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
                min_factor=VERIFY_DCT_RATIO,
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


def dct_side(side: int, ratio: int) -> int:
    """A side as libjpeg outputs it when decoding at 1/ratio scale (rounded up)."""
    return -(-side // ratio)


def dct_shape(height: int, width: int, ratio: int) -> tuple[int, int]:
    """(height, width) as libjpeg outputs them when decoding at 1/ratio scale."""
    return dct_side(height, ratio), dct_side(width, ratio)


def tf_decode(fmt: str, data: bytes, channels: int = 3, accurate: bool = False, ratio: int = 1):
    """Decode as the reader will: decode_jpeg for JPEG (the same kernel and flags as
    decode_image, so one call proves both), decode_image(expand_animations=False) otherwise.
    `ratio` (JPEG only) is libjpeg's DCT scaling: 1, 2, 4 or 8.

    Returns:
        The uint8 tensor [H, W, C].

    Raises:
        tf.errors.InvalidArgumentError: what TensorFlow says about the bytes.
    """
    tf = load_tf()
    if fmt == "jpeg":
        dct = "INTEGER_ACCURATE" if accurate else ""
        return tf.io.decode_jpeg(data, channels=channels, dct_method=dct, ratio=ratio)
    return tf.io.decode_image(data, channels=channels, expand_animations=False)


def decode_failure(fmt: str, data: bytes, h: Header, error) -> Rejected:
    """Turn a TensorFlow decode error into a reason, with our own diagnosis first in the detail."""
    op = "tf.io.decode_jpeg" if fmt == "jpeg" else "tf.io.decode_image"
    tf_says = f"{op}: {tf_message(error)}"
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
        cut = not_decodable(data, fmt)
        reason, why = cut.reason, cut.detail.replace("Pillow cannot open", "libwebp cannot decode")
    return Rejected(reason, f"{why}; {tf_says}")


def _jpeg_diagnosis(data: bytes, h: Header) -> tuple[str, str]:
    if h.jpeg_sof and (h.jpeg_precision != 8 or h.jpeg_sof not in (0xC0, 0xC1, 0xC2)):
        kind = SOF_NAMES.get(h.jpeg_sof, hex(h.jpeg_sof))
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
            i = skip_gif_blocks(data, i + 2)
        elif block == 0x2C and i + 10 <= n:
            lflags = data[i + 9]
            i = skip_gif_blocks(data, i + 11 + (3 * (2 << (lflags & 7)) if lflags & 0x80 else 0))
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
