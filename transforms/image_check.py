"""Decide, for one file's bytes, whether TensorFlow can train on it: format, size, decode, transcode."""

from __future__ import annotations

import dataclasses
import io

import numpy as np

__all__ = ["CheckOptions", "ImageInfo", "Rejected", "check_image", "encode_for_storage", "REASONS"]

# The stable reject-reason taxonomy written to rejected.jsonl (documented in the README).
REASONS = {
    "unreadable": "the file could not be read (missing, permission, storage error)",
    "empty_file": "the file has zero bytes",
    "not_an_image": "the bytes are no image format we know (text, HTML, PDF, zip, ...)",
    "unsupported_format": "an image format TensorFlow cannot decode (use --transcode png|jpeg)",
    "corrupt": "the image header or data is damaged; the decoder error is in detail",
    "truncated": "the image data ends early",
    "too_many_pixels": "the header declares more than --max_pixels pixels",
    "too_small": "the shorter side is below --min_side",
    "file_too_large": "the file is larger than --max_file_mb",
    "animated": "an animated image and --animated reject",
    "changed_during_run": "the file's bytes changed between inspection and writing",
}

# Magic bytes -> format; detection never trusts the file extension.
_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
)
# Formats tf.io.decode_image decodes (webp checked by RIFF....WEBP below).
TF_FORMATS = ("jpeg", "png", "gif", "bmp", "webp")


@dataclasses.dataclass(frozen=True)
class CheckOptions:
    """Per-image limits and transcode choices (a subset of ConvertConfig)."""

    max_pixels: int = 89_478_485
    min_side: int = 1
    max_file_mb: float = 0.0
    apply_exif_orientation: bool = True
    animated: str = "first_frame"
    transcode: str = "none"
    max_side: int = 0
    jpeg_quality: int = 95


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    """What the check learned; height/width/channels describe the bytes that will be stored."""

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


def detect_format(data: bytes) -> str | None:
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def _channel_stats(pixels: np.ndarray) -> tuple:
    flat = pixels.reshape(-1, 3).astype(np.float64)
    sums = flat.sum(axis=0)
    sumsq = np.einsum("ij,ij->j", flat, flat)
    return (*map(float, sums), *map(float, sumsq), int(flat.shape[0]))


def check_image(data: bytes, opts: CheckOptions, compute_stats: bool = False) -> ImageInfo:
    """Validate one file's bytes by decoding them as training will.

    Raises:
        Rejected: with a reason from REASONS and a human detail.
    """
    if not data:
        raise Rejected("empty_file", "0 bytes")
    if opts.max_file_mb and len(data) > opts.max_file_mb * 1e6:
        raise Rejected("file_too_large", f"{len(data)} bytes > --max_file_mb {opts.max_file_mb}")
    fmt = detect_format(data)
    if fmt is None:
        raise Rejected("not_an_image", f"unknown leading bytes {data[:8]!r}")
    import tensorflow as tf

    try:
        pixels = tf.io.decode_image(data, channels=3, expand_animations=False).numpy()
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as e:
        raise Rejected("corrupt", f"tf.io.decode_image: {e.message.splitlines()[0]}") from e
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    from PIL import Image

    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}.get(Image.open(io.BytesIO(data)).mode, 3)
    stats = _channel_stats(pixels) if compute_stats else None
    return ImageInfo(fmt, fmt, height, width, channels, "", stats)


def encode_for_storage(data: bytes, info: ImageInfo, opts: CheckOptions) -> bytes:
    """The bytes to store: the original unless `info.transcode` says otherwise (deterministic)."""
    if not info.transcode:
        return data
    raise NotImplementedError(info.transcode)
