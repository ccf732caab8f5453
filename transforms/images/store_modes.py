"""How one image is stored (--store encoded|pixels|smart). Beam-free: the writer calls it per file.

`encoded` stores the file's bytes (or the verified transcode) as today. `pixels` stores raw
uint8 RGB pixels, height x width x 3, at the --max_side size: no libjpeg at read time, several
times the disk (images decoded to arrays: their 8-bit frames so, arrays.pixels_frame). `smart` stores raw pixels for images small enough that reading their raw bytes
costs less than decoding them (SMART_MAX_RAW_PIXELS), the encoded bytes otherwise.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from PIL import Image

from core import rejects, schema
from transforms.images import arrays, check, decode, headers, limits, transcode

__all__ = [
    "store_records",
    "SMART_MAX_RAW_PIXELS",
    "PIXELS_REASON",
    "StoredImage",
    "store_image",
    "raw_pixels",
    "prefers_raw",
]

# image/transcode_reason of records stored as raw pixels (after the source's own reasons).
PIXELS_REASON = "store_pixels"

# --store smart keeps raw pixels up to this many pixels per image: below it the reader decodes
# raw records with less CPU than JPEGs, above it raw costs more CPU and always more bytes; the
# crossover sits above this value (bench/store_modes.py --cost_model, docs/benchmarks.md).
SMART_MAX_RAW_PIXELS = 32_768


@dataclasses.dataclass(frozen=True)
class StoredImage:
    """What the writer puts in the Example: bytes and the form they are in."""

    data: bytes
    format: str  # "raw" for pixels, else the encoded format
    height: int
    width: int
    channels: int
    raw: bool
    # Optional Example features of this record ({key of core.schema.OPTIONAL_FEATURES: value}):
    # images decoded to arrays carry their frame, dtype, value mapping and format tags.
    features: dict | None = None

    def layout(self) -> str:
        """Its pixel layout, "uint16x13": what the reader's dtype, channels and bands arguments
        work from (dataset_info.json's pixel_layouts)."""
        return schema.pixel_layout((self.features or {}).get(schema.DTYPE, ""), self.channels)


def prefers_raw(height: int, width: int) -> bool:
    """--store smart: whether an image stored at height x width goes in as raw pixels."""
    return height * width <= SMART_MAX_RAW_PIXELS


def raw_pixels(data: bytes, info: check.ImageInfo, opts: limits.CheckOptions) -> np.ndarray:
    """The image as uint8 RGB pixels [H, W, 3], as training would see the stored image.

    An image stored as is is decoded by TensorFlow like the reader does (`channels=3`). A
    transcoded one goes through the same steps as transforms/images/transcode.py (DCT-scaled source
    decode, EXIF orientation, the --max_side resize with --resize_filter), minus the
    re-encode: the pixels skip a lossy JPEG round trip.

    Raises:
        Rejected: the bytes no longer decode (they changed since inspection).
    """
    if not info.transcode:
        tf = decode.load_tf()
        try:
            return decode.tf_decode(info.format, data, channels=3).numpy()
        except tf.errors.InvalidArgumentError as e:
            detail = f"decode for --store pixels: {decode.tf_message(e)}"
            raise rejects.Rejected("corrupt", detail) from e
    # Mirrors transcode.transcode_bytes's pixel steps (kept there untouched: it owns the re-encode).
    fmt, h = check._probe_checked(data, opts)
    reasons = info.transcode.split(",")
    ratio = 1
    if "max_side" in reasons:
        ratio, _ = transcode.max_side_plan(h.width, h.height, opts.max_side, fmt)
    image, _ = transcode.source_pixels(data, fmt, h, ratio)
    if "exif_orientation" in reasons and not h.upright_on_load:
        transpose = headers.ORIENTATION_TRANSPOSE[h.orientation]
        image = image.transpose(getattr(Image.Transpose, transpose))
    if "max_side" in reasons:
        _, size = transcode.max_side_plan(image.width, image.height, opts.max_side, "")
        image = image.resize(size, getattr(Image.Resampling, opts.resize_filter.upper()))
    if image.mode != "RGB":
        # Gray is replicated and alpha dropped, as tf.io.decode_image(channels=3) does.
        image = image.convert("RGB")
    return np.asarray(image, dtype=np.uint8)


def store_image(
    data: bytes, info: check.ImageInfo, opts: limits.CheckOptions, store: str = "encoded"
) -> StoredImage:
    """The bytes to store for one inspected image under `--store`.

    Raises:
        Rejected: the bytes no longer decode or transcode (they changed since inspection).
    """
    raw = store == "pixels" or (store == "smart" and prefers_raw(info.height, info.width))
    if not raw:
        encoded = check.encode_for_storage(data, info, opts)
        features = {schema.DTYPE: "uint16"} if _png_of_16_bits(encoded) else None
        return StoredImage(
            encoded, info.format, info.height, info.width, info.channels, False, features
        )
    pixels = raw_pixels(data, info, opts)
    height, width, channels = pixels.shape
    return StoredImage(pixels.tobytes(), schema.RAW_FORMAT, height, width, channels, True)


def _png_of_16_bits(data: bytes) -> bool:
    """A PNG kept as its own bytes with 16-bit samples (--bit_depth 16): its record says so in
    image/dtype, as arrays' 16-bit PNGs do, so its pixel layout is uint16xC."""
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 24 and data[24] == 16


def store_records(
    data: bytes, info: check.ImageInfo, opts: limits.CheckOptions, store: str = "encoded"
) -> list[StoredImage]:
    """The records one inspected file becomes: one, or one per frame for an image decoded to
    arrays under --frames all (arrays.py: PNG or raw, with its optional features; under
    --store pixels, and smart for a small image, its 8-bit frames as raw RGB like a photo's).

    Raises:
        Rejected: the bytes no longer decode or transcode (they changed since inspection).
    """
    if info.source_format not in arrays.ARRAY_FORMATS:
        return [store_image(data, info, opts, store)]
    image = arrays.decode(info.source_format, data, opts)
    check.array_reasons(image, opts)  # --animated reject, as inspection decided
    height, width = image.frames[0].shape[:2]
    pixels = store == "pixels" or (store == "smart" and prefers_raw(height, width))
    records = []
    for frame, features, raw in arrays.stored_frames(
        image, arrays.request_for(opts), arrays.jpeg_quality(opts), pixels
    ):
        records.append(
            StoredImage(
                frame.data, frame.format, frame.height, frame.width, frame.channels, raw, features
            )
        )
    return records
