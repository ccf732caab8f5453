"""Re-encoding: why the stored bytes differ from the source, and the deterministic transcode."""

from __future__ import annotations

import io

from PIL import Image

from core.rejects import Rejected
from transforms.images import decoder_pool
from transforms.images.decode import dct_shape, dct_side, decode_failure, load_tf, tf_decode
from transforms.images.headers import ORIENTATION_TRANSPOSE, Header
from transforms.images.limits import STORED_FORMATS, TF_DECODABLE_OTHER, CheckOptions
from transforms.images.pillow_probe import (
    MODE_CHANNELS,
    PIL_PLUGINS,
    not_decodable,
    pil_pixels,
    pillow_open,
)

__all__ = [
    "JPEG_BACKGROUND",
    "max_side_plan",
    "source_pixels",
    "transcode_bytes",
    "transcode_deferred",
    "TRANSCODE_REASONS",
    "transcode_reasons",
]

# --transcode jpeg: the colour a non-JPEG source's transparency is composited onto (JPEG has no
# alpha). White, as browsers and most converters show transparent photos; TensorFlow's own
# decode_image(channels=3) instead drops alpha and shows whatever colour the transparent pixels
# happen to hold (often black), which a JPEG-only pipeline never sees.
JPEG_BACKGROUND = (255, 255, 255)


# Why the stored bytes differ from the source (image/transcode_reason, comma-joined in this order).
TRANSCODE_REASONS = {
    "unsupported_format": "the source format is not stored as is and --transcode png|jpeg is set",
    "bmp_to_png": "a BMP: TensorFlow's BMP decoder ignores palettes and compression, so its "
    "pixels are stored as lossless PNG (by default; --transcode jpeg stores JPEG)",
    "webp_to_png": "a WebP with alpha or animation: tf.io.decode_image(channels=3) refuses those, "
    "so its (first frame's) pixels are stored as lossless PNG",
    "png_to_jpeg": "a PNG under --transcode jpeg: stored as an RGB JPEG (alpha composited onto "
    "JPEG_BACKGROUND) that JPEG-only readers decode",
    "gif_to_jpeg": "a GIF under --transcode jpeg: its first frame stored as an RGB JPEG",
    "animated_first_frame": "an animated or multi-frame source; its first frame is stored",
    "decoded_pixels": "a DICOM, a 16-bit PNG (transcoded_from png16) or other image decoded to "
    "arrays: its pixels stored as PNG, 8-bit as a viewer shows them (--bit_depth 16: 16-bit, the "
    "full range), or as raw pixels for other depths and band counts (transforms/images/arrays.py)",
    "frame_per_record": "a multi-frame source under --frames all: one record per frame "
    "(image/frame names it)",
    "exif_orientation": "EXIF says the pixels are stored rotated/flipped; TensorFlow ignores EXIF, "
    "so the upright pixels are stored (--apply_exif_orientation)",
    "max_side": "the longer side exceeded --max_side; stored downscaled",
    "tile": "a chip of the source cut by --tile: its window's pixels stored (image/tile/*)",
}


def transcode_deferred(reasons: list[str], fmt: str, channels: int) -> bool:
    """Whether inspection leaves this transcode to the writer: a gray or colour JPEG that only
    needs --max_side (its output sides are computed, not made; see check_image)."""
    return reasons == ["max_side"] and fmt == "jpeg" and channels in (1, 3)


def transcode_reasons(fmt: str, h: Header, opts: CheckOptions) -> list[str]:
    reasons = []
    if fmt not in STORED_FORMATS:
        # probe_other already rejected what these options do not keep (--transcode none, ...).
        if opts.transcode == "jpeg":
            reasons.append("unsupported_format")  # BMP, WebP (also a still one), TIFF, ...
        elif fmt == "webp" and h.frames == 1 and h.webp_as_is:
            pass  # decode_image(channels=3) reads a still WebP without alpha: stored as is
        elif fmt in TF_DECODABLE_OTHER:
            reasons.append(f"{fmt}_to_png")
        else:
            reasons.append("unsupported_format")
    elif fmt != "jpeg" and opts.transcode == "jpeg":
        reasons.append(f"{fmt}_to_jpeg")  # JPEG-only readers (decode_jpeg) fail on PNG and GIF
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


def transcode_bytes(
    data: bytes, fmt: str, h: Header, reasons: list[str], opts: CheckOptions
) -> tuple[bytes, str, int]:
    """Re-encode: (stored bytes, stored format, channels). Deterministic for given inputs."""
    ratio = 1
    if "max_side" in reasons:
        ratio, _ = max_side_plan(h.width, h.height, opts.max_side, fmt)
    image, icc = source_pixels(data, fmt, h, ratio)
    if "exif_orientation" in reasons and not h.upright_on_load:
        image = image.transpose(getattr(Image.Transpose, ORIENTATION_TRANSPOSE[h.orientation]))
    if "max_side" in reasons:
        _, size = max_side_plan(image.width, image.height, opts.max_side, "")
        image = image.resize(size, getattr(Image.Resampling, opts.resize_filter.upper()))
    if fmt == "jpeg" or opts.transcode == "jpeg":
        target = "jpeg"
    elif fmt in STORED_FORMATS or fmt in TF_DECODABLE_OTHER:
        target = "png"  # lossless: BMP is uncompressed; WebP with alpha or animation
    else:
        target = opts.transcode
    if target == "jpeg" and fmt != "jpeg":
        image = _jpeg_ready(image)
    if icc and not _icc_matches(icc, image.mode):
        icc = None
    out = io.BytesIO()
    extra = {"icc_profile": icc} if icc else {}
    if target == "jpeg":
        image.save(out, "JPEG", quality=opts.jpeg_quality, **extra)
    else:
        image.save(out, "PNG", compress_level=6, **extra)
    return out.getvalue(), target, MODE_CHANNELS[image.mode]


def _jpeg_ready(image):
    """A non-JPEG source's pixels for a JPEG re-encode: RGB, transparency composited onto
    JPEG_BACKGROUND (JPEG has no alpha; gray and palette sources become RGB too, so every
    --transcode jpeg record decodes to 3 channels however the reader asks)."""
    if image.mode in ("LA", "RGBA"):
        backdrop = Image.new("RGBA", image.size, (*JPEG_BACKGROUND, 255))
        image = Image.alpha_composite(backdrop, image.convert("RGBA"))
    return image.convert("RGB")


def max_side_plan(width: int, height: int, max_side: int, fmt: str) -> tuple[int, tuple[int, int]]:
    """(DCT ratio to decode a `fmt` source at, (width, height) after the --max_side resize).

    A JPEG is decoded at libjpeg's 1/2, 1/4 or 1/8 scale while its long side stays >= max_side
    (a 4000x3000 photo going to 256 decodes 8x smaller and resizes from 500x375); the resize
    then brings the long side to max_side, keeping the aspect ratio.
    """
    ratio = 1
    if fmt == "jpeg":
        for r in (8, 4, 2):
            if dct_side(max(width, height), r) >= max_side:
                ratio = r
                break
    h, w = dct_shape(height, width, ratio)
    scale = max_side / max(w, h)
    return ratio, (max(1, round(w * scale)), max(1, round(h * scale)))


def _icc_matches(icc: bytes, mode: str) -> bool:
    space = icc[16:20] if len(icc) >= 20 else b""
    return space == (b"GRAY" if mode in ("L", "LA") else b"RGB ")


def source_pixels(data: bytes, fmt: str, h: Header, ratio: int = 1):
    """The source's (first frame) pixels as a Pillow image in L, LA, RGB or RGBA, and its ICC.

    JPEG/PNG/still GIF are decoded by TensorFlow, so a file TF rejects is rejected here too
    rather than "repaired" by a more lenient decoder. Animated GIFs and other formats are
    decoded by Pillow (TF's GIF decoder would read every frame). `ratio` > 1 decodes a JPEG
    at that DCT scale (1/ratio of each side).
    """
    tf = load_tf()
    if fmt in STORED_FORMATS and not (fmt == "gif" and h.frames > 1):
        try:
            pixels = tf_decode(fmt, data, channels=0, accurate=True, ratio=ratio).numpy()
        except tf.errors.InvalidArgumentError as e:
            raise decode_failure(fmt, data, h, e) from e
        image = Image.fromarray(pixels if pixels.shape[2] > 1 else pixels[:, :, 0])
        return image, h.icc
    if h.isolated:
        decoded = decoder_pool.pixels(data, PIL_PLUGINS.get(fmt, ()))
        if decoded is None:
            raise not_decodable(data, fmt)
        mode, size, raw, icc = decoded
        return Image.frombytes(mode, size, raw), icc
    im = h.pil if h.pil is not None else pillow_open(data, PIL_PLUGINS.get(fmt, ()))
    if im is None:
        raise not_decodable(data, fmt)
    return pil_pixels(im)
