"""Decide, for one file's bytes, whether TensorFlow can train on it: limits, decode, transcode.

The per-file entry points (check_image at inspection, encode_for_storage in the writer); the
jobs they chain live beside this module: sniff, headers, pillow_probe, decode, transcode, stats.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from core.rejects import Rejected
from transforms.images import arrays, png16
from transforms.images.array_contract import ArrayImage
from transforms.images.decode import (
    VERIFY_DCT_RATIO,
    dct_shape,
    decode_failure,
    libjpeg_warning,
    load_tf,
    tf_decode,
    tf_message,
)
from transforms.images.headers import (
    SOF_PROGRESSIVE,
    Header,
    probe_gif,
    probe_jpeg,
    probe_png,
    webp_size,
)
from transforms.images.limits import (
    MAX_PROGRESSIVE_SCANS,
    CheckOptions,
    check_dims,
    check_file_size,
)
from transforms.images.phash import phashes, reduction
from transforms.images.pillow_probe import probe_other
from transforms.images.sniff import array_format, cut_signature, sniff_format
from transforms.images.stats import _channel_stats
from transforms.images.transcode import (
    max_side_plan,
    transcode_bytes,
    transcode_deferred,
    transcode_reasons,
)

__all__ = ["ImageInfo", "array_reasons", "check_image", "encode_for_storage"]


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
    phash: int | None = None  # transforms/images/phash.py; None: --near_duplicates off
    phash_crops: tuple[int, ...] | None = None  # its crop windows' pHashes, as phash


def _probe(data: bytes, opts: CheckOptions) -> tuple[str, Header]:
    fmt = sniff_format(data)
    if fmt == "jpeg":
        return fmt, probe_jpeg(data)
    if fmt == "png":
        return fmt, probe_png(data)
    if fmt == "gif":
        return fmt, probe_gif(data)
    cut = cut_signature(data)
    if cut:
        raise Rejected("truncated", f"{len(data)} bytes: the start of a {cut.upper()} signature")
    return probe_other(data, opts)


def _probe_checked(data: bytes, opts: CheckOptions) -> tuple[str, Header]:
    """_probe, with the header's dimensions checked before any decoder allocates."""
    width, height = webp_size(data)
    if width and height:
        check_dims(width, height, opts, "WebP header")
    fmt, h = _probe(data, opts)
    if h.width and h.height:  # a 0 side is left to the decoder, which names the error
        check_dims(h.width, h.height, opts, "header")
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
    fmt = array_format(data)
    if fmt is not None and sniff_format(data) is None:
        return _check_arrays(fmt, data, opts, compute_stats)
    fmt, h = _probe_checked(data, opts)
    if fmt == "png" and png16.decoded_to_arrays(h, opts):
        return _check_arrays(png16.FORMAT, data, opts, compute_stats)
    _refuse_scan_bombs(data, h)
    reasons = transcode_reasons(fmt, h, opts)
    # A JPEG that only needs downscaling is verified as it is, and its output sides are computed
    # (as transcode_bytes will resize): the resize then runs once, in the writer, instead of
    # here and there. Pixel statistics need the stored pixels, so images that feed them are
    # transcoded here.
    deferred = (
        transcode_deferred(reasons, fmt, h.channels)
        and not compute_stats
        and h.width > 0
        and h.height > 0
    )
    if reasons and not deferred:
        stored, stored_fmt, channels = transcode_bytes(data, fmt, h, reasons, opts)
    else:
        stored, stored_fmt, channels = data, fmt, h.channels
    decoded, height, width = _decode_as_training(stored, stored_fmt, data, h, opts, compute_stats)
    hashed = (None, None)
    if opts.phash:
        # A JPEG stored as it is (or downscaled in the writer) is hashed from its own bytes,
        # however it was verified: statistics or --jpeg_verify never change its record.
        own = fmt == "jpeg" and h.height > 0 and h.width > 0
        own = own and (not reasons or transcode_deferred(reasons, fmt, h.channels))
        hashed = _phashes(decoded, data, h) if own else phashes(np.asarray(decoded))
    if opts.jpeg_verify == "strict" and fmt == "jpeg":
        # The source bytes, also when transcoded: a repaired source bakes its damage into the
        # re-encode.
        _refuse_libjpeg_warnings(data)
    if deferred:
        _, (width, height) = max_side_plan(width, height, opts.max_side, fmt)
    check_dims(width, height, opts, "decoded image")
    # np.asarray: a read-only view of the tensor's buffer, where `.numpy()` copies it.
    stats = _channel_stats(np.asarray(decoded)) if compute_stats else None
    return ImageInfo(stored_fmt, fmt, height, width, channels, ",".join(reasons), stats, *hashed)


def _phashes(decoded, jpeg: bytes, h: Header) -> tuple[int, tuple[int, ...]]:
    """The pHashes of a JPEG's bytes decoded at the DCT scale the hash reduces it by: the check's
    own 1/8-scale decode where that is it, else one more decode (a small JPEG: cheap; one
    decoded at full size for statistics or --jpeg_verify full: the 1/8 scale is cheap)."""
    pixels = np.asarray(decoded)
    wanted = reduction(h.height, h.width)
    if pixels.shape[:2] != dct_shape(h.height, h.width, wanted):
        pixels = np.asarray(tf_decode("jpeg", jpeg, ratio=wanted))
    return phashes(pixels)


def array_reasons(image: ArrayImage, opts: CheckOptions) -> list[str]:
    """The transcode reasons of an image decoded to arrays (every record of the file has them)."""
    reasons = ["decoded_pixels"]
    if image.num_frames > 1:
        if opts.animated == "reject":
            raise Rejected("animated", f"{image.num_frames} frames and --animated reject")
        reasons.append("frame_per_record" if len(image.frames) > 1 else "animated_first_frame")
    return reasons + image.reasons


def _check_arrays(fmt: str, data: bytes, opts: CheckOptions, compute_stats: bool) -> ImageInfo:
    """check_image for a format decoded to arrays (arrays.ARRAY_FORMATS; a decoder process for
    all but arrays.IN_PROCESS_FORMATS); its first frame stored and, as PNG, decoded by
    TensorFlow as the reader will."""
    image = arrays.decode(fmt, data, opts)
    reasons = array_reasons(image, opts)
    stored = arrays.encode_frame(image.frames[0], arrays.jpeg_quality(opts))
    # Raw frames (any depth, any bands) are hashed as they are: the bits do not change when the
    # values are scaled and shifted, so no 8-bit view is needed.
    pixels = hashed_pixels = image.frames[0]
    if stored.format == "raw" and compute_stats:  # as the reader's default
        from core import raw_pixels  # TensorFlow, loaded only where needed (as load_tf does)

        pixels = raw_pixels.as_photo(image.frames[0]).numpy()
    elif stored.format != "raw":
        tf = load_tf()
        try:
            decoded = tf_decode(stored.format, stored.data)
        except tf.errors.InvalidArgumentError as e:  # our own encode: a bug, named as one
            detail = f"the stored {stored.format.upper()} does not decode: {tf_message(e)}"
            raise Rejected("decoder_error", detail) from e
        pixels = hashed_pixels = np.asarray(decoded)
    stats = _channel_stats(pixels) if compute_stats else None
    hashed = phashes(hashed_pixels) if opts.phash else (None, None)
    return ImageInfo(
        stored.format, fmt, stored.height, stored.width, stored.channels, ",".join(reasons),
        stats, *hashed,
    )  # fmt: skip


def _refuse_scan_bombs(data: bytes, h: Header) -> None:
    """Raise Rejected for a progressive JPEG with more scans than any photo needs."""
    if h.jpeg_sof not in SOF_PROGRESSIVE:
        return
    scans = data.count(b"\xff\xda")
    if scans > MAX_PROGRESSIVE_SCANS:
        raise Rejected(
            "too_many_scans",
            f"progressive JPEG with {scans} scans "
            f"(> {MAX_PROGRESSIVE_SCANS}): refused as a decoding-time bomb",
        )


def _decode_as_training(stored, stored_fmt, data, h: Header, opts, compute_stats: bool):
    """(decoded pixels, height, width) of the bytes to store, decoded by TensorFlow as training
    will. Raises Rejected with the decoder's diagnosis."""
    tf = load_tf()
    # JPEG at 1/8 DCT scale: libjpeg still entropy-decodes every coefficient of every block (the
    # only stage that can fail on damaged data) and skips only the full-size IDCT, upsampling and
    # colour conversion. Rejects are identical to a full decode (tests/unit/test_image_check.py
    # damages JPEGs both ways); the sides come from the header, checked against the output.
    scaled = (
        opts.jpeg_verify in ("dct", "strict")
        and not compute_stats
        and stored_fmt == "jpeg"
        and stored is data
        and h.height > 0
        and h.width > 0
    )
    try:
        decoded = tf_decode(stored_fmt, stored, ratio=VERIFY_DCT_RATIO if scaled else 1)
    except tf.errors.InvalidArgumentError as e:
        raise decode_failure(stored_fmt, stored, h if stored is data else Header(), e) from e
    height, width = int(decoded.shape[0]), int(decoded.shape[1])
    if not scaled:
        return decoded, height, width
    if (height, width) != dct_shape(h.height, h.width, VERIFY_DCT_RATIO):
        # The decoder read other sides than our header parser: trust the decoder at full size.
        decoded = tf_decode(stored_fmt, stored)
        return decoded, int(decoded.shape[0]), int(decoded.shape[1])
    return decoded, h.height, h.width


def _refuse_libjpeg_warnings(data: bytes) -> None:
    """--jpeg_verify strict: raise Rejected if libjpeg warns while decoding `data`."""
    warning = libjpeg_warning(data)
    if warning is not None:
        raise Rejected(
            "corrupt",
            f"libjpeg warned while decoding ({warning}): it silently repairs or works "
            "around such data; TensorFlow decodes it without an error, so --jpeg_verify dct "
            "or full would write it",
        )


def _one_record(data: bytes, info: ImageInfo, opts: CheckOptions) -> bytes:
    """encode_for_storage of an image decoded to arrays that makes one record (the writer's
    store_modes.store_records makes every record of any file)."""
    image = arrays.decode(info.source_format, data, opts)
    if len(image.frames) != 1:
        raise ValueError("a file of several records (--frames all): use store_modes.store_records")
    stored = arrays.encode_frame(image.frames[0], arrays.jpeg_quality(opts))
    if stored.format != info.format:
        raise ValueError(
            f"the frame is now stored as {stored.format}, inspection said {info.format}: "
            "the options changed between inspection and writing"
        )
    return stored.data


def encode_for_storage(data: bytes, info: ImageInfo, opts: CheckOptions) -> bytes:
    """The bytes to store: `data` itself unless `info.transcode`, else the same transcode that
    check_image made and verified (a pure function of data and opts: same input, same bytes).

    Raises:
        Rejected: if the bytes no longer transcode (they changed since inspection).
        ValueError: if opts differ from inspection so that the stored format would change.
    """
    if not info.transcode:
        return data
    if info.source_format in arrays.ARRAY_FORMATS:
        return _one_record(data, info, opts)
    fmt, h = _probe_checked(data, opts)
    stored, stored_fmt, _ = transcode_bytes(data, fmt, h, info.transcode.split(","), opts)
    if stored_fmt != info.format:
        raise ValueError(
            f"transcode now yields {stored_fmt}, inspection said {info.format}: "
            "the options changed between inspection and writing"
        )
    if transcode_deferred(info.transcode.split(","), info.source_format, info.channels):
        # Inspection may not have made this re-encode: decode it here, so every stored byte
        # string has been through TensorFlow's decoder, with the sides the record states.
        # (Other transcodes were decoded at inspection.)
        tf = load_tf()
        ratio = VERIFY_DCT_RATIO
        try:
            decoded = tf_decode(stored_fmt, stored, ratio=ratio)
        except tf.errors.InvalidArgumentError as e:
            raise Rejected(
                "corrupt", f"the re-encoded image does not decode: {tf_message(e)}"
            ) from e
        if tuple(decoded.shape[:2]) != dct_shape(info.height, info.width, ratio):
            raise Rejected(
                "corrupt",
                f"the re-encoded image decodes to {decoded.shape[1]}x{decoded.shape[0]} at "
                f"1/{ratio} scale; inspection recorded {info.width}x{info.height}",
            )
    return stored
