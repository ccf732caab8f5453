"""What a format module decoded to arrays (dicom.py, tiff.py, png16.py) is asked and returns.

A format module implements `decode_arrays(data: bytes, request: ArrayRequest) -> ArrayImage` and
raises `Rejected`; arrays.py runs it (in a decoder process unless it decodes in process) and
stores what comes back. This module sits below the format modules, so that sniff.py can ask
each of them what its files look like while arrays.py, above them, decodes and stores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from transforms.images.limits import CheckOptions, check_dims

__all__ = ["ArrayImage", "ArrayRequest", "check_declared", "scaled_to_8bit"]

# The top of uint8: what the high end of a window or range maps to.
_MAX_8BIT = 255


@dataclasses.dataclass(frozen=True)
class ArrayRequest:
    """What the converter asks a format module for (from CheckOptions)."""

    bit_depth: int = 8  # 8: as a viewer shows it (uint8); 16: the full range (uint16)
    frames: str = "first"  # "first" or "all"
    max_pixels: int = 89_478_485  # per frame, checked before pixels are decoded
    apply_exif_orientation: bool = True  # turn pixels upright by their EXIF Orientation


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
    reasons: what was done to the pixels besides decoding them (keys of
        transcode.TRANSCODE_REASONS in their order: exif_orientation, max_side).
    """

    frames: list[np.ndarray]
    num_frames: int
    features: dict[str, Any] = dataclasses.field(default_factory=dict)
    value_scale: float = 1.0
    value_offset: float = 0.0
    reasons: list[str] = dataclasses.field(default_factory=list)


def check_declared(width: int, height: int, request: ArrayRequest, what: str) -> None:
    """Refuse a frame whose declared sides exceed --max_pixels, before its pixels are decoded
    (format modules call it on their header's sides)."""
    check_dims(width, height, CheckOptions(max_pixels=request.max_pixels), what)


def scaled_to_8bit(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """`values` mapped linearly from [low, high] to uint8 0..255, rounded and clipped, H x W x C
    (a 2-D array gains its channel axis): DICOM's windows and ranges, 16-bit PNG's 0..65535."""
    span = high - low if high > low else 1.0
    scaled = np.rint((values.astype(np.float64) - low) * (_MAX_8BIT / span))
    out = np.clip(scaled, 0, _MAX_8BIT).astype(np.uint8)
    return out[:, :, None] if out.ndim == 2 else out
