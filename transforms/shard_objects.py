"""The writer's part for annotated runs: each record's object and mask features, and their counts.

The geometry lives in transforms/annotations/features.py; this module gives it what the writer
knows of one file (its displayed size, EXIF orientation and stored size), reads its --masks file,
and keeps the shard's tally of objects for dataset_info.json.
"""

from __future__ import annotations

import io

from PIL import Image

from core import schema, storage
from core.rejects import Rejected
from transforms.annotations.features import (
    MaskError,
    ObjectChange,
    ObjectTally,
    record_objects,
    semantic_mask,
)
from transforms.annotations.objects import ImageAnnotations
from transforms.annotations.options import AnnotationOptions, mask_path
from transforms.elements import WriterEntry
from transforms.images import headers
from transforms.images.store_modes import StoredImage

__all__ = ["ShardObjects", "source_orientation"]

_EXIF_ORIENTATION_TAG = 0x0112


def source_orientation(entry: WriterEntry, data: bytes) -> int:
    """The EXIF orientation imgrec turned the file upright by (1: none was applied)."""
    if "exif_orientation" not in entry.transcode.split(","):
        return 1
    if entry.source_format == "jpeg":
        return headers.probe_jpeg(data).orientation
    if entry.source_format == "png":
        return headers.probe_png(data).orientation
    with Image.open(io.BytesIO(data)) as image:
        value = image.getexif().get(_EXIF_ORIENTATION_TAG, 1)
    return value if value in headers.ORIENTATION_TRANSPOSE else 1


class ShardObjects:
    """One shard's object features, record by record, and the tally of what was written."""

    def __init__(self, options: AnnotationOptions):
        self._options = options
        self.tally = ObjectTally()

    def features(
        self, entry: WriterEntry, data: bytes, stored: StoredImage
    ) -> tuple[dict, tuple[ObjectChange, ...]]:
        """(extra Example features, objects changed) of `entry` stored as `stored`.

        Raises:
            Rejected: its --masks file is missing, unreadable or of another size.
        """
        extra: dict = {}
        changes: tuple[ObjectChange, ...] = ()
        orientation = source_orientation(entry, data)
        if entry.objects is not None:
            annotations = entry.objects.unpack()
            found = record_objects(
                annotations,
                path=entry.path,
                source_id=_source_id(entry, annotations),
                image_width=entry.width,
                image_height=entry.height,
                orientation=orientation,
                stored_width=stored.width,
                stored_height=stored.height,
                instance_masks=self._options.instance_masks,
            )
            extra.update(found.features)
            changes = found.changes
            self.tally.merge(found.tally)
        if self._options.masks:
            extra[schema.SEGMENTATION] = self._mask(entry, orientation, stored)
            extra[schema.SEGMENTATION_FORMAT] = "png"
        return extra, changes

    def _mask(self, entry: WriterEntry, orientation: int, stored: StoredImage) -> bytes:
        chip = entry.chip
        path = mask_path(self._options.masks, chip.source_key if chip else entry.key)
        try:
            data = storage.read_bytes(path)
        except storage.ReadError as e:
            raise Rejected(
                "mask_missing", f"{path}: {e}; fix: put the mask there or correct --masks"
            ) from e
        # A chip's (--tile): the source's label map at the source's size, then its window.
        width, height = (
            (chip.source_width, chip.source_height) if chip else (entry.width, entry.height)
        )
        try:
            mask = semantic_mask(
                data,
                path=path,
                image_width=width,
                image_height=height,
                orientation=orientation,
                stored_width=stored.width if chip is None else width,
                stored_height=stored.height if chip is None else height,
            )
        except MaskError as e:
            raise Rejected(e.reason, e.detail) from e
        return mask if chip is None else _window_png(mask, chip)


def _window_png(mask: bytes, chip) -> bytes:
    """The chip's window of a label-map PNG, as a PNG."""
    with Image.open(io.BytesIO(mask)) as image:
        window = image.crop((chip.x, chip.y, chip.x + chip.width, chip.y + chip.height))
    out = io.BytesIO()
    window.save(out, "PNG")
    return out.getvalue()


def _source_id(entry: WriterEntry, annotations: ImageAnnotations) -> str:
    """image/source_id: the COCO image id where the file gives one (COCO evaluation matches on
    it), else the image's key."""
    return str(annotations.image_id) if annotations.image_id is not None else entry.key
