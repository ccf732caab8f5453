"""16-bit PNG: its pixels 8-bit as a viewer shows them (default) or kept 16-bit (--bit_depth 16).

A PNG whose IHDR says 16 bits per sample goes through the array path (arrays.py) when its pixels
change: always under --bit_depth 8, under --bit_depth 16 only when a photo would be transcoded
(--max_side, EXIF orientation, an animation's first frame). Otherwise its own bytes are stored,
as every other PNG's; under --transcode jpeg (8 bits only) it is re-encoded as any PNG is.
TensorFlow's libpng decodes it at full depth, in process like every PNG.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from transforms.images.array_contract import (
    ArrayImage,
    ArrayRequest,
    check_declared,
    scaled_to_8bit,
)
from transforms.images.decode import decode_failure, load_tf
from transforms.images.headers import ORIENTATION_TRANSPOSE, Header, probe_png
from transforms.images.limits import CheckOptions
from transforms.images.transcode import transcode_reasons

__all__ = ["FORMAT", "decode_arrays", "decoded_to_arrays"]

# Its name among arrays.ARRAY_FORMATS (and in image/transcoded_from).
FORMAT = "png16"
# PNG's samples span 0..2**depth - 1 whatever an sBIT chunk says (the encoder scales them up).
_MAX_16BIT = 65535


def decoded_to_arrays(h: Header, opts: CheckOptions) -> bool:
    """Whether a PNG with header `h` is stored from its decoded pixels (arrays.py) rather than as
    it is: a 16-bit one under --bit_depth 8, or whose pixels a photo's rules would change."""
    if h.bit_depth != 16 or opts.transcode == "jpeg":
        return False  # a JPEG re-encode makes 8-bit pixels on the PNG path (png_to_jpeg)
    return opts.bit_depth == 8 or bool(transcode_reasons("png", h, opts))


def decode_arrays(data: bytes, request: ArrayRequest) -> ArrayImage:
    """The PNG's (first) frame, H x W x C as TensorFlow decodes it (channels=0: 1 to 4), upright
    by its EXIF orientation; uint8 rounded from 0..65535 (--bit_depth 8), else uint16 as is.

    Raises:
        Rejected: too_many_pixels (header), truncated or corrupt (decode.decode_failure).
    """
    h = probe_png(data)
    check_declared(h.width, h.height, request, "PNG header")
    tf = load_tf()
    try:
        pixels = tf.io.decode_png(data, channels=0, dtype=tf.uint16).numpy()
    except tf.errors.InvalidArgumentError as e:
        raise decode_failure("png", data, h, e) from e
    reasons = []
    if h.orientation != 1 and request.apply_exif_orientation:
        pixels = _upright(pixels, ORIENTATION_TRANSPOSE[h.orientation])
        reasons.append("exif_orientation")
    if request.bit_depth == 8:
        pixels = scaled_to_8bit(pixels, 0.0, _MAX_16BIT)
    return ArrayImage([pixels], h.frames, reasons=reasons)


def _upright(pixels: np.ndarray, transpose: str) -> np.ndarray:
    """`pixels` through Pillow's `transpose` (headers.ORIENTATION_TRANSPOSE), band by band:
    Pillow holds 16-bit samples in one band only."""
    method = getattr(Image.Transpose, transpose)
    bands = [Image.fromarray(pixels[:, :, b]).transpose(method) for b in range(pixels.shape[2])]
    return np.stack([np.asarray(band) for band in bands], axis=2)
