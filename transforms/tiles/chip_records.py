"""The record of one chip (--tile): its window's pixels, the chip's keys and georeference.

A TIFF chip is read by window from the source (transforms/images/tiff.py decode_window: only
the tiles or strips under it); any other image is decoded whole and cut, as training would see
it (EXIF orientation applied). Pixels are stored as arrays.py stores decoded frames: PNG for
8/16-bit images of up to 4 bands, raw samples of their dtype otherwise.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
from PIL import Image, ImageOps

from core import schema
from core.rejects import Rejected
from transforms.elements import Chip, WriterEntry
from transforms.images import arrays
from transforms.images.array_contract import ArrayImage
from transforms.images.limits import CheckOptions
from transforms.images.store_modes import StoredImage
from transforms.tiles.scenes import read_window

__all__ = ["TILE_REASON", "chip_record", "reads_by_window"]

# image/transcode_reason of a chip (after the source's own reasons).
TILE_REASON = "tile"
# Pillow modes stored as they are; others are converted to RGB(A) first.
_KEPT_MODES = ("L", "LA", "RGB", "RGBA")


def reads_by_window(entry: WriterEntry) -> bool:
    """Whether the writer leaves this entry's bytes unread: a TIFF chip reads its window."""
    return entry.chip is not None and entry.source_format == "tiff"


def tile_features(chip: Chip) -> dict:
    return {
        schema.TILE_X: chip.x,
        schema.TILE_Y: chip.y,
        schema.TILE_SOURCE_HEIGHT: chip.source_height,
        schema.TILE_SOURCE_WIDTH: chip.source_width,
    }


def chip_record(
    entry: WriterEntry, data: bytes | None, opts: CheckOptions, min_valid: float = 0.0
) -> StoredImage | None:
    """The stored chip of `entry` (its window `entry.chip`), or None for a chip whose fraction
    of valid pixels is below `min_valid` (--tile_min_valid); `data`: the source's bytes, None
    for a chip read by window.

    Raises:
        Rejected: the source changed since inspection, or its window no longer decodes.
    """
    chip = entry.chip
    if data is None:
        image, valid = _tiff_window(entry, opts)
    else:
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise Rejected(
                "changed_during_run",
                "the file's bytes no longer match the sha256 seen at inspection",
            )
        image = _cut(_decoded_whole(entry, data, opts), chip)
        valid = _alpha_valid(image.frames[0])
    if valid < min_valid:
        return None
    frame = image.frames[0]
    stored, features, _ = next(
        arrays.stored_frames(image, arrays.request_for(opts), arrays.jpeg_quality(opts))
    )
    features.pop(schema.FRAME, None)  # one record per chip: no frame index
    features.update(tile_features(chip))
    if frame.shape[:2] != (chip.height, chip.width):
        raise Rejected(
            "changed_during_run",
            f"the chip decoded to {frame.shape[1]}x{frame.shape[0]}, its window is "
            f"{chip.width}x{chip.height}",
        )
    return StoredImage(
        stored.data, stored.format, stored.height, stored.width, stored.channels, False, features
    )


def _tiff_window(entry: WriterEntry, opts: CheckOptions) -> tuple[ArrayImage, float]:
    """(the chip's pixels, its valid fraction) read by window."""
    chip = entry.chip
    window = read_window(
        entry.path, chip.y, chip.x, chip.height, chip.width, arrays.request_for(opts)
    )
    sides = window.sides
    if sides != (chip.source_height, chip.source_width):
        raise Rejected(
            "changed_during_run",
            f"the TIFF is now {sides[1]}x{sides[0]}; inspection saw "
            f"{chip.source_width}x{chip.source_height}",
        )
    return window.image, window.valid


def _alpha_valid(frame: np.ndarray) -> float:
    """A photo chip's valid fraction: its pixels of alpha > 0 (gray + alpha, RGBA), else 1."""
    if frame.shape[2] not in (2, 4):
        return 1.0
    return float(np.count_nonzero(frame[..., -1])) / (frame.shape[0] * frame.shape[1])


def _decoded_whole(entry: WriterEntry, data: bytes, opts: CheckOptions) -> ArrayImage:
    """Any other image's pixels, whole: arrays.py's decode for its formats, else Pillow's,
    upright by EXIF as the record of the whole image would be."""
    if entry.source_format in arrays.ARRAY_FORMATS:
        return arrays.decode(entry.source_format, data, opts)
    with Image.open(io.BytesIO(data)) as image:
        if opts.apply_exif_orientation:
            image = ImageOps.exif_transpose(image)
        if image.mode not in _KEPT_MODES:
            has_alpha = "A" in image.getbands() or "transparency" in image.info
            image = image.convert("RGBA" if has_alpha else "RGB")
        pixels = np.asarray(image)
    return ArrayImage([pixels[:, :, None] if pixels.ndim == 2 else pixels], 1)


def _cut(image: ArrayImage, chip: Chip) -> ArrayImage:
    frame = image.frames[0]
    if frame.shape[:2] != (chip.source_height, chip.source_width):
        raise Rejected(
            "changed_during_run",
            f"the image decodes to {frame.shape[1]}x{frame.shape[0]}; inspection saw "
            f"{chip.source_width}x{chip.source_height}",
        )
    window = frame[chip.y : chip.y + chip.height, chip.x : chip.x + chip.width]
    return ArrayImage(
        [np.ascontiguousarray(window)], 1, dict(image.features), image.value_scale,
        image.value_offset, list(image.reasons),
    )  # fmt: skip
