"""A TIFF page's samples in one window, decoding only the tiles or strips the window touches.

tifffile's own segment reader and decoder do the work (`FileHandle.read_segments`,
`TiffPage.decode`); this module picks the segments and places them, so a chip of a scene of
any size costs one window's memory and its segments' reads.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["segment_indices", "window_samples"]

# Compressions whose segments tifffile decodes with the page's JPEG tables (TIFF 6 JPEG flavours).
_JPEG_COMPRESSIONS = (6, 7, 33007, 34892)


def _segment_grid(page) -> tuple[int, int, int, int]:
    """(segment height, segment width, segments down, segments across) of a tiled or striped
    page (strips span the width)."""
    length, width = int(page.imagelength), int(page.imagewidth)
    if page.is_tiled:
        seg_h, seg_w = int(page.tilelength), int(page.tilewidth)
    else:
        seg_h, seg_w = min(int(page.rowsperstrip) or length, length), width
    return seg_h, seg_w, math.ceil(length / seg_h), math.ceil(width / seg_w)


def segment_indices(page, y: int, x: int, height: int, width: int) -> list[int]:
    """Indices (into the page's offsets and byte counts) of the segments the window touches,
    every separate sample plane's."""
    seg_h, seg_w, down, across = _segment_grid(page)
    planes = int(page.samplesperpixel) if int(page.planarconfig) == 2 else 1
    rows = range(y // seg_h, (y + height - 1) // seg_h + 1)
    cols = range(x // seg_w, (x + width - 1) // seg_w + 1)
    return [(p * down + r) * across + c for p in range(planes) for r in rows for c in cols]


def window_samples(page, y: int, x: int, height: int, width: int) -> np.ndarray:
    """The page's samples in rows y..y+height, columns x..x+width, as [height, width, samples]
    in the stored type (native byte order); empty (sparse) segments read as 0.

    Raises:
        ValueError: the window leaves the page; tifffile's and imagecodecs' errors otherwise.
    """
    length, page_width = int(page.imagelength), int(page.imagewidth)
    if y < 0 or x < 0 or height < 1 or width < 1 or y + height > length or x + width > page_width:
        raise ValueError(
            f"window {width}x{height} at ({x}, {y}) leaves the {page_width}x{length} page"
        )
    planes, _, _, _, contig = page.shaped
    dtype = np.dtype(page.dtype).newbyteorder("=")
    out = np.zeros((planes, height, width, contig), dtype)
    indices = segment_indices(page, y, x, height, width)
    offsets, counts = page.dataoffsets, page.databytecounts
    keyframe = page.keyframe
    decodeargs = {"_fullsize": bool(keyframe.is_tiled)}
    if keyframe.compression in _JPEG_COMPRESSIONS:
        decodeargs["jpegtables"] = page.jpegtables
        decodeargs["jpegheader"] = keyframe.jpegheader
    fh = page.parent.filehandle
    segments = fh.read_segments(
        [offsets[i] for i in indices],
        [counts[i] for i in indices],
        indices=indices,
        sort=True,
        flat=True,
    )
    for data, index in segments:
        segment, (plane, _, top, left, _), _ = keyframe.decode(data, index, **decodeargs)
        if segment is None:  # a sparse segment: no bytes in the file
            continue
        segment = segment.reshape(segment.shape[-3:])  # (rows, columns, contiguous samples)
        r0, r1 = max(y, top), min(y + height, top + segment.shape[0])
        c0, c1 = max(x, left), min(x + width, left + segment.shape[1])
        if r0 < r1 and c0 < c1:
            out[plane, r0 - y : r1 - y, c0 - x : c1 - x] = segment[
                r0 - top : r1 - top, c0 - left : c1 - left
            ]
    # [planes, H, W, contig] -> [H, W, samples]: one of the two is 1.
    return np.moveaxis(out, 0, 2).reshape(height, width, planes * contig)
