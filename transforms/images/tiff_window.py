"""A TIFF page's samples in one window, decoding only the tiles or strips the window touches.

tifffile's own segment reader and decoder do the work (`FileHandle.read_segments`,
`TiffPage.decode`); this module picks the segments and places them, so a chip of a scene of
any size costs one window's memory and its segments' reads.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["mask_page", "segment_indices", "shifted_transform", "valid_fraction", "window_samples"]

# SubfileType bit of a transparency mask page (GDAL's internal mask: GDAL_TIFF_INTERNAL_MASK).
_MASK = 4
# ExtraSamples values of alpha: associated (premultiplied) and unassociated.
_ALPHAS = (1, 2)

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


def shifted_transform(transform: list[float], y: int, x: int) -> list[float]:
    """GDAL's geotransform of the window whose top-left pixel is (row y, column x)."""
    t0, t1, t2, t3, t4, t5 = transform
    return [t0 + x * t1 + y * t2, t1, t2, t3 + x * t4 + y * t5, t4, t5]


def mask_page(tif, page):
    """The internal transparency mask of `page` (the next page, of SubfileType mask and the
    same sides), or None."""
    pages = tif.pages
    index = pages.index(page) if hasattr(pages, "index") else 0
    if index + 1 >= len(pages):
        return None
    candidate = pages[index + 1]
    if not int(candidate.subfiletype) & _MASK:
        return None
    if candidate.imagelength != page.imagelength or candidate.imagewidth != page.imagewidth:
        return None
    return candidate


def valid_fraction(page, mask, samples: np.ndarray, nodata: str | None, window) -> float:
    """The window's fraction of valid pixels as GDAL's dataset mask says: the internal mask
    where there is one; else a pixel is invalid when every band holds the nodata value (NaN
    included); else when its alpha is 0; else every pixel is valid.

    `samples`: the window's stored samples [H, W, S]; `window`: (y, x, height, width).
    """
    if mask is not None:
        return float(np.count_nonzero(window_samples(mask, *window))) / samples[..., 0].size
    if nodata is not None:
        value = float(nodata)
        same = np.isnan(samples) if np.isnan(value) else samples == value
        return 1.0 - float(np.count_nonzero(same.all(axis=2))) / same[..., 0].size
    extras = [int(e) for e in page.extrasamples]
    if extras and extras[0] in _ALPHAS:
        alpha = samples[..., samples.shape[2] - len(extras)]
        return float(np.count_nonzero(alpha)) / alpha.size
    return 1.0
