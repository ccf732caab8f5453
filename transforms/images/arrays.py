"""Images decoded to numpy arrays (DICOM, TIFF, 16-bit PNG): which module decodes each, checks,
--max_side and storage.

A format module (transforms/images/dicom.py, tiff.py, png16.py) implements the contract of
array_contract.py (`decode_arrays(data, request) -> ArrayImage`, raising `Rejected`); it runs
in a decoder subprocess (decoder_pool.arrays), so a native crash costs one file, unless its
decoder is TensorFlow's own (IN_PROCESS_FORMATS). This module checks what came back, downscales
it to --max_side, and stores each frame: 8- or 16-bit PNG for 1 to 4 channels, raw pixels
(image/format "raw", image/dtype) for other depths and band counts or under --store pixels.
See docs/dicom.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import io

import numpy as np
from PIL import Image

from core import schema
from core.rejects import Rejected
from transforms.images import decoder_pool
from transforms.images.array_contract import ArrayImage, ArrayRequest
from transforms.images.limits import CheckOptions, check_dims
from transforms.images.transcode import max_side_plan

__all__ = [
    "ARRAY_FORMATS",
    "IN_PROCESS_FORMATS",
    "StoredFrame",
    "decode",
    "encode_frame",
    "fit_max_side",
    "jpeg_quality",
    "pixels_frame",
    "request_for",
    "stored_frames",
]

# Format name (as sniff.py names it) -> the module whose decode_arrays() reads it.
ARRAY_FORMATS = {
    "dicom": "transforms.images.dicom",
    "png16": "transforms.images.png16",
    "tiff": "transforms.images.tiff",
}
# Formats decoded in the calling process: libpng through TensorFlow, the decoder every PNG already
# goes through there (decoder_pool.py: the common path pays no subprocess).
IN_PROCESS_FORMATS = frozenset({"png16"})

# zlib level of the stored PNGs: zlib's default, as transcode.py's Pillow re-encodes use.
_PNG_COMPRESSION = 6
# PNG holds 8- and 16-bit samples in 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA) channels.
_PNG_DTYPES = (np.uint8, np.uint16)
_PNG_MAX_CHANNELS = 4
# The longest side each encoder writes: libpng's default limit (TensorFlow's encoder and decoder
# keep it) and libjpeg's (JPEG_MAX_DIMENSION). A frame past JPEG's is a PNG, past PNG's raw.
_PNG_MAX_SIDE = 1_000_000
_JPEG_MAX_SIDE = 65_500
# --store pixels records: RGB, as tf.io.decode_image(channels=3) shows a stored PNG.
_PIXELS_CHANNELS = 3


@dataclasses.dataclass(frozen=True)
class StoredFrame:
    """One frame as stored: bytes, image/format ("png" or "raw"), shape and dtype name."""

    data: bytes
    format: str
    height: int
    width: int
    channels: int
    dtype: str


def request_for(opts: CheckOptions) -> ArrayRequest:
    return ArrayRequest(
        bit_depth=opts.bit_depth,
        frames=opts.frames,
        max_pixels=opts.max_pixels,
        apply_exif_orientation=opts.apply_exif_orientation,
    )


def decode(fmt: str, data: bytes, opts: CheckOptions) -> ArrayImage:
    """`data` of array format `fmt` decoded (in a decoder subprocess unless IN_PROCESS_FORMATS),
    its frames checked against the limits and downscaled to --max_side (fit_max_side).

    Raises:
        Rejected: the module's own reasons, decoder_error if its process died, corrupt if it
            returned no frames or frames of differing shapes, too_many_pixels / too_small.
    """
    if fmt in IN_PROCESS_FORMATS:
        image = importlib.import_module(ARRAY_FORMATS[fmt]).decode_arrays(data, request_for(opts))
    else:
        image = decoder_pool.arrays(fmt, data, request_for(opts))
    if not image.frames:
        raise Rejected("corrupt", f"{fmt.upper()}: no frame decoded")
    first = image.frames[0]
    for frame in image.frames:
        if frame.ndim != 3 or frame.shape != first.shape or frame.dtype != first.dtype:
            raise Rejected(
                "corrupt",
                f"{fmt.upper()}: frames of shapes {first.shape} and {frame.shape} "
                f"({first.dtype}, {frame.dtype}) in one file",
            )
    check_dims(first.shape[1], first.shape[0], opts, "decoded image")
    return fit_max_side(image, opts)


def fit_max_side(image: ArrayImage, opts: CheckOptions) -> ArrayImage:
    """`image` with every frame downscaled so that its longer side is --max_side (aspect ratio
    kept, nothing upscaled), as transcode.py resizes photos: the same sides, Pillow's
    --resize_filter; reason max_side. The sides after it are checked as a photo's are.

    Raises:
        Rejected: too_small, the downscaled image's shorter side is below --min_side.
    """
    height, width = image.frames[0].shape[:2]
    if not opts.max_side or max(height, width) <= opts.max_side:
        return image
    _, size = max_side_plan(width, height, opts.max_side, "")
    check_dims(size[0], size[1], opts, "downscaled image")
    frames = [_resized(frame, size, opts.resize_filter) for frame in image.frames]
    return dataclasses.replace(image, frames=frames, reasons=[*image.reasons, "max_side"])


def _resized(frame: np.ndarray, size: tuple[int, int], filter_name: str) -> np.ndarray:
    """One H x W x C frame resized to `size` (width, height) with Pillow's `filter_name`.

    uint8 with 1-4 channels resizes as one L/LA/RGB/RGBA image, exactly as a photo (alpha
    premultiplied by Pillow); other frames band by band, integers up to 32 bits in Pillow's
    32-bit integer mode, the rest in its float32 mode, rounded and clipped back to their dtype.
    """
    resample = getattr(Image.Resampling, filter_name.upper())
    channels = frame.shape[2]
    if frame.dtype == np.uint8 and channels <= _PNG_MAX_CHANNELS:
        image = Image.fromarray(frame[:, :, 0] if channels == 1 else frame)
        return np.asarray(image.resize(size, resample)).reshape(size[1], size[0], channels)
    return np.stack([_resized_band(frame[:, :, b], size, resample) for b in range(channels)], 2)


def _resized_band(band: np.ndarray, size: tuple[int, int], resample) -> np.ndarray:
    as_int = band.dtype.kind in "iu" and band.dtype.itemsize <= 2
    samples = band.astype(np.int32 if as_int else np.float32)
    out = np.asarray(Image.fromarray(samples).resize(size, resample))
    if band.dtype.kind in "iu":
        info = np.iinfo(band.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return out.astype(band.dtype)


def encode_frame(frame: np.ndarray, jpeg_quality: int = 0) -> StoredFrame:
    """One H x W x C frame as stored: PNG (uint8/uint16, 1-4 channels, sides up to a million;
    what tf.io.decode_image reads), else raw little-endian samples in H x W x C order.
    `jpeg_quality` (--transcode jpeg) stores a uint8 frame of 1-4 channels and sides up to 65,500
    as a gray or RGB JPEG instead (more bands stay raw: every band is kept)."""
    height, width, channels = frame.shape
    dtype = frame.dtype.name
    side = max(height, width)
    if jpeg_quality and frame.dtype == np.uint8 and channels <= _PNG_MAX_CHANNELS:
        if side <= _JPEG_MAX_SIDE:
            return _jpeg(frame, jpeg_quality)
    if frame.dtype.type in _PNG_DTYPES and channels <= _PNG_MAX_CHANNELS and side <= _PNG_MAX_SIDE:
        import tensorflow as tf

        # TensorFlow's PNG encoder writes 16-bit samples in every channel count (Pillow only
        # for gray); same pixels, same bytes.
        data = tf.io.encode_png(np.ascontiguousarray(frame), compression=_PNG_COMPRESSION)
        return StoredFrame(data.numpy(), "png", height, width, channels, dtype)
    raw = np.ascontiguousarray(frame, dtype=frame.dtype.newbyteorder("<"))
    return StoredFrame(raw.tobytes(), schema.RAW_FORMAT, height, width, channels, dtype)


def _jpeg(frame: np.ndarray, quality: int) -> StoredFrame:
    """A uint8 frame as a JPEG: gray stays gray, other band counts become RGB (alpha dropped)."""
    channels = frame.shape[2]
    image = Image.fromarray(frame[:, :, 0] if channels == 1 else frame[:, :, :3].copy())
    if image.mode not in ("L", "RGB"):
        image = image.convert("RGB")
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    kept = 1 if image.mode == "L" else 3
    return StoredFrame(out.getvalue(), "jpeg", frame.shape[0], frame.shape[1], kept, "uint8")


def jpeg_quality(opts: CheckOptions) -> int:
    """The JPEG quality frames are stored at (--transcode jpeg), 0 for PNG."""
    return opts.jpeg_quality if opts.transcode == "jpeg" else 0


def pixels_frame(frame: np.ndarray) -> StoredFrame:
    """A uint8 frame of 1-4 channels as --store pixels|smart records hold pixels: raw uint8 RGB,
    H x W x 3, gray replicated and alpha dropped (what tf.io.decode_image(channels=3) makes of
    the PNG encode_frame would store), so the reader's pixel path reads it like a photo's."""
    height, width, channels = frame.shape
    colour = frame[:, :, :1] if channels <= 2 else frame[:, :, :3]
    rgb = np.ascontiguousarray(np.broadcast_to(colour, (height, width, _PIXELS_CHANNELS)))
    return StoredFrame(rgb.tobytes(), schema.RAW_FORMAT, height, width, _PIXELS_CHANNELS, "uint8")


def _as_pixels(frame: np.ndarray) -> bool:
    """Whether --store pixels|smart stores `frame` by pixels_frame (uint8, 1-4 channels); other
    frames keep their own form (16-bit PNG, raw samples of their dtype)."""
    return frame.dtype == np.uint8 and frame.shape[2] <= _PNG_MAX_CHANNELS


def stored_frames(image: ArrayImage, request: ArrayRequest, quality: int = 0, pixels=False):
    """Yield (StoredFrame, the record's optional features, whether it is a pixels_frame) for
    each decoded frame; `pixels` (--store pixels, or smart for a small image) stores uint8
    frames by pixels_frame."""
    for index, frame in enumerate(image.frames):
        viewed = pixels and _as_pixels(frame)
        stored = pixels_frame(frame) if viewed else encode_frame(frame, quality)
        features = dict(image.features)
        features[schema.FRAME] = index
        features[schema.DTYPE] = stored.dtype
        rescaled = (image.value_scale, image.value_offset) != (1.0, 0.0)  # e.g. TIFF's ranges
        if (
            request.bit_depth == 16
            or rescaled
            or (stored.format == schema.RAW_FORMAT and not viewed)
        ):
            features[schema.VALUE_SCALE] = image.value_scale
            features[schema.VALUE_OFFSET] = image.value_offset
        yield stored, features, viewed
