"""Per-image limits and transcode choices (CheckOptions); refusals by size and declared sides.

Imports no numpy, no Pillow, no TensorFlow: option parsing and the plan digest import it.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from core.rejects import Rejected

__all__ = [
    "BIT_DEPTHS",
    "check_dims",
    "check_file_size",
    "CheckOptions",
    "DEFAULT_MAX_PIXELS",
    "FRAME_MODES",
    "JPEG_VERIFY_MODES",
    "MAX_PROGRESSIVE_SCANS",
    "RESIZE_FILTERS",
    "STORED_FORMATS",
    "TF_DECODABLE_OTHER",
    "TRANSCODE_MODES",
]


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
TF_DECODABLE_OTHER = ("bmp", "webp")


# Real encoders write a handful of progressive scans (Pillow 10, mozjpeg ~10-15). libjpeg redoes
# work per scan over the whole image, so a crafted file with thousands of tiny scans takes minutes
# to decode from a few KB; 500 leaves a wide margin over any encoder.
MAX_PROGRESSIVE_SCANS = 500


# --jpeg_verify: dct (1/8-scale libjpeg decode, the default), full (full-size decode), strict (dct,
# and also reject JPEGs libjpeg had to repair: see libjpeg_warning).
JPEG_VERIFY_MODES = ("dct", "full", "strict")

# --resize_filter: Pillow's resampling filter for --max_side downscales, sharpest and slowest
# first (all antialiased). Pillow resamples 8-bit images in fixed point, so a filter's output is
# a pure function of the pixels (shards stay byte-identical).
RESIZE_FILTERS = ("lanczos", "bicubic", "bilinear")

# --bit_depth: 8 (as a viewer shows the image) or 16 (the full range kept, 16-bit PNG); --frames:
# the first frame (or page) of a multi-frame image, or one record per frame.
BIT_DEPTHS = (8, 16)
FRAME_MODES = ("first", "all")

# 89.5 Mpx is Pillow's own decompression-bomb threshold: larger headers are refused before decoding.
DEFAULT_MAX_PIXELS = 89_478_485


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """Per-image limits and transcode choices (ConvertConfig.check; each field is the option of
    the same name)."""

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
    bit_depth: int = 8
    frames: str = "first"
    # --near_duplicates other than off: inspection computes each image's perceptual hash.
    phash: bool = True

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
        if self.bit_depth not in BIT_DEPTHS:
            raise ValueError(f"--bit_depth must be 8 or 16, got {self.bit_depth!r}")
        if self.frames not in FRAME_MODES:
            raise ValueError(f"--frames must be first or all, got {self.frames!r}")
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


def check_file_size(num_bytes: int, opts: CheckOptions) -> None:
    """Refuse by size alone (callers that know the size from the listing can skip the read).

    Raises:
        Rejected: empty_file or file_too_large.
    """
    if num_bytes == 0:
        raise Rejected("empty_file", "0 bytes")
    if opts.max_file_mb and num_bytes > opts.max_file_mb * 1e6:
        raise Rejected("file_too_large", f"{num_bytes} bytes > --max_file_mb {opts.max_file_mb:g}")


def check_dims(width: int, height: int, opts: CheckOptions, what: str) -> None:
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
