"""Images decoded to numpy arrays (DICOM, TIFF): the format modules' contract, checks, storage.

A format module (transforms/images/dicom.py, tiff.py) implements
`decode_arrays(data: bytes, request: ArrayRequest) -> ArrayImage` and raises `Rejected`; it runs
in a decoder subprocess (decode_worker.arrays), so a native crash costs one file. This module
checks what came back and stores each frame: 8- or 16-bit PNG for 1 to 4 channels, raw pixels
(image/format "raw", image/dtype) for other depths and band counts. See docs/array_images.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from core import schema
from core.rejects import Rejected
from transforms.images.limits import CheckOptions, check_dims

__all__ = [
    "ARRAY_FORMATS",
    "ArrayImage",
    "ArrayRequest",
    "StoredFrame",
    "check_declared",
    "decode",
    "encode_frame",
    "jpeg_quality",
    "request_for",
    "stored_frames",
]

# Format name (as sniff.py names it) -> the module whose decode_arrays() reads it.
ARRAY_FORMATS = {"dicom": "transforms.images.dicom"}

# zlib level of the stored PNGs: zlib's default, as transcode.py's Pillow re-encodes use.
_PNG_COMPRESSION = 6
# PNG holds 8- and 16-bit samples in 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA) channels.
_PNG_DTYPES = (np.uint8, np.uint16)
_PNG_MAX_CHANNELS = 4


@dataclasses.dataclass(frozen=True)
class ArrayRequest:
    """What the converter asks a format module for (from CheckOptions)."""

    bit_depth: int = 8  # 8: as a viewer shows it (uint8); 16: the full range (uint16)
    frames: str = "first"  # "first" or "all"
    max_pixels: int = 89_478_485  # per frame, checked before pixels are decoded


@dataclasses.dataclass
class ArrayImage:
    """What a format module's decode_arrays returns.

    frames: each H x W x C (C >= 1, every frame the same shape and dtype): uint8 (bit_depth 8),
        uint16 (bit_depth 16), or any other numeric dtype / band count (stored raw).
    num_frames: frames the file holds (>= len(frames): 1 decoded under --frames first).
    features: optional Example features every record of this file gets ({key of
        core.schema.OPTIONAL_FEATURES: value}; e.g. dicom/Modality).
    value_scale, value_offset: stored * scale + offset = the source's values in its units
        (DICOM: the modality LUT; recorded with --bit_depth 16 and for raw records).
    """

    frames: list[np.ndarray]
    num_frames: int
    features: dict[str, Any] = dataclasses.field(default_factory=dict)
    value_scale: float = 1.0
    value_offset: float = 0.0


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
    return ArrayRequest(bit_depth=opts.bit_depth, frames=opts.frames, max_pixels=opts.max_pixels)


def check_declared(width: int, height: int, request: ArrayRequest, what: str) -> None:
    """Refuse a frame whose declared sides exceed --max_pixels, before its pixels are decoded
    (format modules call it on their header's sides)."""
    check_dims(width, height, CheckOptions(max_pixels=request.max_pixels), what)


def decode(fmt: str, data: bytes, opts: CheckOptions) -> ArrayImage:
    """`data` of array format `fmt` decoded in a decoder subprocess, its frames checked.

    Raises:
        Rejected: the module's own reasons, decoder_error if its process died, corrupt if it
            returned no frames or frames of differing shapes.
    """
    from transforms.images import decode_worker

    image = decode_worker.arrays(fmt, data, request_for(opts))
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
    return image


def encode_frame(frame: np.ndarray, jpeg_quality: int = 0) -> StoredFrame:
    """One H x W x C frame as stored: PNG (uint8/uint16, 1-4 channels; what tf.io.decode_image
    reads), else raw little-endian samples in H x W x C order. `jpeg_quality` (--transcode jpeg)
    stores a uint8 frame as a gray or RGB JPEG instead."""
    height, width, channels = frame.shape
    dtype = frame.dtype.name
    if jpeg_quality and frame.dtype == np.uint8:
        return _jpeg(frame, jpeg_quality)
    if frame.dtype.type in _PNG_DTYPES and channels <= _PNG_MAX_CHANNELS:
        import tensorflow as tf

        # TensorFlow's PNG encoder writes 16-bit samples in every channel count (Pillow only
        # for gray); same pixels, same bytes.
        data = tf.io.encode_png(np.ascontiguousarray(frame), compression=_PNG_COMPRESSION)
        return StoredFrame(data.numpy(), "png", height, width, channels, dtype)
    raw = np.ascontiguousarray(frame, dtype=frame.dtype.newbyteorder("<"))
    return StoredFrame(raw.tobytes(), schema.RAW_FORMAT, height, width, channels, dtype)


def _jpeg(frame: np.ndarray, quality: int) -> StoredFrame:
    """A uint8 frame as a JPEG: gray stays gray, other band counts become RGB (alpha dropped)."""
    import io

    from PIL import Image

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


def stored_frames(image: ArrayImage, request: ArrayRequest, quality: int = 0):
    """Yield (StoredFrame, the record's optional features) for each decoded frame."""
    for index, frame in enumerate(image.frames):
        stored = encode_frame(frame, quality)
        features = dict(image.features)
        features[schema.FRAME] = index
        features[schema.DTYPE] = stored.dtype
        if request.bit_depth == 16 or stored.format == schema.RAW_FORMAT:
            features[schema.VALUE_SCALE] = image.value_scale
            features[schema.VALUE_OFFSET] = image.value_offset
        yield stored, features
