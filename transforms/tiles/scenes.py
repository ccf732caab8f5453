"""A scene's inspection from its header and a streamed hash, never holding the file whole.

With --tile, a TIFF (a GeoTIFF scene, a slide) is inspected here: its bytes hashed in chunks,
its first page's header read and one pixel decoded through the writer's own window path, in a
decoder process (so what is accepted is what the writer can cut). Without --tile, a file too big to convert whole
is refused from its header (refuse_whole_scene) before any read of its bytes.
"""

from __future__ import annotations

import hashlib
from typing import IO

from apache_beam.io.filesystems import FileSystems

from core import names, storage
from core.rejects import Rejected
from transforms.elements import InspectedImage, ListedFile
from transforms.images import arrays, decoder_pool, tiff
from transforms.images.limits import CheckOptions, check_dims, check_file_size
from transforms.images.stats import _channel_stats

__all__ = [
    "HEADER_FIRST_BYTES",
    "inspect_scene",
    "open_source",
    "read_window",
    "refuse_whole_scene",
]

# Files at least this big are checked from their header before they are read whole: a photo
# never comes near it, and below it the bytes held while decoding stay small beside a worker's
# memory (the decoders refuse oversized pixel buffers from the header themselves).
HEADER_FIRST_BYTES = 64 << 20
# Read size of the streamed hash: large sequential reads, one chunk in memory.
_HASH_CHUNK_BYTES = 8 << 20
# Bytes that say whether a file is a TIFF (its byte order and version).
_SIGNATURE_BYTES = 4


def open_source(path: str) -> IO[bytes]:
    """A seekable binary stream of a local file or a gs:// / s3:// object (read on demand)."""
    return FileSystems.open(names.local_path(path), compression_type="uncompressed")


def read_window(path: str, y: int, x: int, height: int, width: int, request) -> tiff.TiffWindow:
    """One window of the TIFF at `path`: a local file's in a decoder process, as every TIFF is
    decoded (a native crash on a damaged tile costs that chip, not the worker); a bucket
    object's here, from its stream (decoder processes import no Beam)."""
    if storage.is_local(path):
        return decoder_pool.window(path, y, x, height, width, request)
    with open_source(path) as f:
        return tiff.decode_window(f, y, x, height, width, request)


def _is_tiff(f: IO[bytes]) -> bool:
    head = f.read(_SIGNATURE_BYTES)
    f.seek(0)
    return tiff.looks_like_tiff(head)


def _streamed_digest(f: IO[bytes]) -> tuple[int, str]:
    """(size, sha256 hex) of the stream from its start, one chunk in memory at a time."""
    digest, size = hashlib.sha256(), 0
    f.seek(0)
    while chunk := f.read(_HASH_CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
    f.seek(0)
    return size, digest.hexdigest()


def inspect_scene(
    item: ListedFile, opts: CheckOptions, stats_chip: tuple[int, int] | None = None
) -> InspectedImage | None:
    """The InspectedImage of a TIFF scene to cut into chips (--tile), or None for another
    format (inspected whole, as without --tile). `stats_chip`: the chip sides whose first chip
    gives the scene's pixel statistics (a sampled training image), as the reader shows it.

    Raises:
        Rejected: the header or the first window fails as the writer's reads would.
    """
    request = arrays.request_for(opts)
    if item.size >= 0:  # known from the listing: refuse empty/huge files unread
        check_file_size(item.size, opts)
    with open_source(item.path) as f:
        if not _is_tiff(f):
            return None
        size, sha256 = _streamed_digest(f)
    check_file_size(size, opts)
    # Decoded as the writer decodes chips (read_window).
    first = read_window(item.path, 0, 0, 1, 1, request)
    image, (height, width) = first.image, first.sides
    stats = None
    if stats_chip is not None:
        chip = read_window(
            item.path, 0, 0, min(stats_chip[0], height), min(stats_chip[1], width), request
        )
        stats = _photo_stats(chip.image.frames[0])
    if min(height, width) < opts.min_side:
        raise Rejected("too_small", f"{width}x{height}: shorter side < --min_side {opts.min_side}")
    stored = arrays.encode_frame(image.frames[0], arrays.jpeg_quality(opts))
    return InspectedImage.of(
        item,
        size=size,
        sha256=sha256,
        format=stored.format,
        source_format="tiff",
        height=height,
        width=width,
        channels=stored.channels,
        transcode="decoded_pixels",
        stats=stats,
    )


def _photo_stats(frame) -> list:
    """Pixel statistics of a chip as the reader's default output shows it (uint8 RGB)."""
    from core import raw_pixels  # TensorFlow, only where statistics are sampled

    return list(_channel_stats(raw_pixels.as_photo(frame).numpy()))


def refuse_whole_scene(path: str, opts: CheckOptions) -> None:
    """Refuse a TIFF whose first page declares more than --max_pixels from its header alone,
    naming --tile (a file of HEADER_FIRST_BYTES or more, before it is read whole).

    Raises:
        Rejected: too_many_pixels.
    """
    import tifffile

    with open_source(path) as f:
        if not _is_tiff(f):
            return
        try:
            with tifffile.TiffFile(f) as tif:
                page = tif.pages.first
                height, width = int(page.imagelength), int(page.imagewidth)
        except (ValueError, TypeError, IndexError, KeyError):
            return  # a damaged header: the full check reads the file and names what is wrong
    try:
        check_dims(width, height, opts, "TIFF header")
    except Rejected as e:
        if e.reason != "too_many_pixels":
            raise
        raise Rejected(
            e.reason,
            f"{e.detail}; it was not read: cut it into chips with --tile 1024 (docs/tiles.md), "
            "or raise --max_pixels to convert it whole",
        ) from None
