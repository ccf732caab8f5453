"""The crop windows' shape: how far each window is cut, how many spans an axis has, and how many
bits fewer than the threshold a window match needs (hamming.CROP_MARGIN), against the copies
found and the distinct images merged.

    python bench/ablations/crop_windows.py --seeds 10

Every file of bench/near_duplicates.py's real corpus (scikit-image's images and their edited
copies) and quality corpus (generated photos, their copies, and hard distinct images: texture
crops, video frames, document scans) is decoded as the job's inspection decodes it, then hashed
with each variant's windows. found: a copy linked directly to its original (no chain through
other copies); merged: a distinct image linked to another. The default is marked *.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.near_duplicates import (  # noqa: E402
    HARD,
    LISTED_EDITS,
    _identity,
    build_quality_corpus,
    build_real_corpus,
    linked,
)
from transforms.hamming import CROP_MARGIN, DEFAULT_THRESHOLD  # noqa: E402
from transforms.images import check  # noqa: E402
from transforms.images import phash as ph  # noqa: E402
from transforms.images.limits import CheckOptions  # noqa: E402


def _spans(cut: float, middle: bool) -> tuple:
    """The whole axis, then `cut` off one end, (half off each end,) off the other end."""
    crop = ((0.0, 1 - cut), *([(cut / 2, 1 - cut / 2)] if middle else []), (cut, 1.0))
    return ((0.0, 1.0), *crop)


VARIANTS = {  # name: (spans, margin)
    "whole image only": (ph.SPANS[:1], 0),
    **{
        f"cut {cut:.1%}, {2 + middle} spans, margin {margin}": (_spans(cut, middle), margin)
        for cut in (0.03, 0.035, 0.05)
        for middle in (False, True)
        for margin in (0, 2)
    },
}


def _pixels(paths: list[str]) -> dict[str, np.ndarray]:
    """path -> the pixels the job's inspection hashes (its own decode, captured)."""
    seen = {}
    hashed = check.phashes

    def capture(pixels):
        seen["pixels"] = np.array(pixels)
        return hashed(pixels)

    check.phashes = capture
    try:
        out = {}
        for path in paths:
            with open(path, "rb") as f:
                check.check_image(f.read(), CheckOptions())
            out[path] = seen.pop("pixels")
        return out
    finally:
        check.phashes = hashed


def _found(pixels: dict, hashes: dict, margin: int) -> tuple[float, float]:
    """(found of the listed edits' copies, found of the crops), each copy against its original."""
    originals = {_identity(p)[1]: p for p in pixels if _identity(p)[0] == "photo"}
    results = {e: [] for e in LISTED_EDITS}
    for path in pixels:
        kind, stem = _identity(path)
        if kind in results:
            results[kind].append(linked(hashes[path], hashes[originals[stem]], margin))
    listed = [r for rs in results.values() for r in rs]
    return float(np.mean(listed)), float(np.mean(results["crop"]))


def _merged(pixels: dict, hashes: dict, margin: int) -> float:
    """The fraction of distinct images (photos and the hard cases) linked to another."""
    distinct = [p for p in pixels if _identity(p)[0] in ("photo", *HARD)]
    whole = np.array([hashes[p][0] for p in distinct], dtype=np.int64).view(np.uint64)
    close = np.bitwise_count(whole[:, None] ^ whole[None, :]) <= DEFAULT_THRESHOLD
    if len(hashes[distinct[0]][1]):  # [n, windows]
        windows = np.array([hashes[p][1] for p in distinct], dtype=np.int64).view(np.uint64)
        near = np.bitwise_count(whole[:, None, None] ^ windows[None, :, :]).min(axis=2)
        close |= near <= DEFAULT_THRESHOLD - margin
        close |= close.T
    np.fill_diagonal(close, False)
    return float(close.any(axis=1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="real corpus: copies by each edit")
    args = parser.parse_args()
    real = _pixels(sorted(glob.glob(f"{build_real_corpus(args.seeds)}/*/*")))
    quality = _pixels(sorted(glob.glob(f"{build_quality_corpus(600, 200)}/*/*")))
    print(f"threshold {DEFAULT_THRESHOLD}; real: {len(real)} files, quality: {len(quality)} files")
    print("variant | real found (listed edits, crop) | generated found | distinct merged")
    for name, (spans, margin) in VARIANTS.items():
        r = {path: ph.phashes(p, spans) for path, p in real.items()}
        q = {path: ph.phashes(p, spans) for path, p in quality.items()}
        (real_listed, real_crop), (gen_listed, _) = (
            _found(real, r, margin),
            _found(quality, q, margin),
        )
        default = "*" if spans == ph.SPANS and margin == CROP_MARGIN else " "
        print(f"{default}{name:33} | {real_listed:6.1%}, {real_crop:6.1%} | {gen_listed:6.1%} | "
              f"{_merged(quality, q, margin):.2%}")  # fmt: skip


if __name__ == "__main__":
    main()
