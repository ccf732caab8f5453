"""Decide, for one file's bytes, whether TensorFlow can train on it: limits, decode, transcode.

The per-file entry points (check_image at inspection, encode_for_storage in the writer); the
jobs they chain live beside this module: sniff, headers, pillow_probe, decode, transcode, stats.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core.rejects import Rejected
from transforms.images.decode import (
    _VERIFY_DCT_RATIO,
    _dct_shape,
    _decode_failure,
    _libjpeg_warning,
    _tf,
    _tf_decode,
    _tf_message,
)
from transforms.images.headers import (
    _SOF_PROGRESSIVE,
    _Header,
    _probe_gif,
    _probe_jpeg,
    _probe_png,
    _webp_size,
)
from transforms.images.limits import (
    MAX_PROGRESSIVE_SCANS,
    CheckOptions,
    _check_dims,
    check_file_size,
)
from transforms.images.pillow_probe import _probe_other
from transforms.images.sniff import _cut_signature, sniff_format
from transforms.images.stats import _channel_stats
from transforms.images.transcode import (
    _max_side_plan,
    _transcode,
    _transcode_deferred,
    _transcode_reasons,
)

__all__ = ["ImageInfo", "check_image", "encode_for_storage"]


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
    # colour conversion. Rejects are identical to a full decode (tests/unit/test_image_check.py
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
    # np.asarray: a read-only view of the tensor's buffer, where `.numpy()` copies it (76 of a
    # sampled photo's ~1,490 us; docs/benchmarks.md, 2026-12-04 18:40).
    stats = _channel_stats(np.asarray(decoded)) if compute_stats else None
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
