"""The pHash's median step: np.sort (phash._bits) against np.partition at the two middle ranks
(what it used before), on the DCT terms of real decodes, whole pHash included.

    python bench/ablations/phash_median.py --images 1500

The images: bench/near_duplicates.py's cost corpus (generated photos), decoded at the 1/8 DCT
scale the job's inspection hashes them at. Both ways must give the same bits (checked on every
image); the time is one thread's CPU per image, median of `--repeats` alternating passes, one
process, one BLAS thread (as inspection).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

import numpy as np
import threadpoolctl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.near_duplicates import build_cost_corpus  # noqa: E402
from transforms.images import phash as ph  # noqa: E402
from transforms.images.decode import tf_decode  # noqa: E402


def partition_bits(low: np.ndarray) -> np.ndarray:
    """phash._bits with np.partition at ranks 31 and 32 for the middle."""
    middle = np.partition(low, (ph._HALF - 1, ph._HALF), axis=1)
    bits = low > (middle[:, ph._HALF - 1 : ph._HALF] + middle[:, ph._HALF : ph._HALF + 1]) / 2
    return np.packbits(bits, axis=1).view(">i8").ravel()


def _cpu_us(fn, items) -> float:
    start = time.thread_time()
    for item in items:
        fn(item)
    return (time.thread_time() - start) / len(items) * 1e6


def _pixels(count: int) -> list[np.ndarray]:
    """The first `count` JPEGs of the cost corpus, decoded as inspection decodes them to hash."""
    root = build_cost_corpus(3000)  # the cost benchmark's default size: often already made
    pixels = []
    for path in sorted(glob.glob(os.path.join(root, "*", "*.jpg")))[:count]:
        with open(path, "rb") as f:
            pixels.append(np.asarray(tf_decode("jpeg", f.read(), ratio=8)))
    return pixels


def _with_bits(bits):
    """phashes with `bits` as its median step."""
    default = ph._bits

    def run(pixels):
        ph._bits = bits
        try:
            return ph.phashes(pixels)
        finally:
            ph._bits = default

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1500, help="1 to 2,995 (its JPEGs)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not 1 <= args.images <= 2995:
        parser.error(f"--images must be 1 to 2,995, got {args.images}")
    pixels = _pixels(args.images)
    variants = {
        "np.sort (default)": _with_bits(ph._bits),
        "np.partition": _with_bits(partition_bits),
    }
    assert all(variants["np.partition"](p) == ph.phashes(p) for p in pixels), "bits differ"
    times = {name: [] for name in variants}
    # One BLAS thread, as the job's inspection; the variants alternate, reversed every other round.
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        for i in range(args.repeats):
            for name in list(variants)[:: 1 if i % 2 == 0 else -1]:
                times[name].append(_cpu_us(variants[name], pixels))
    for name, runs in times.items():
        print(f"{name:18s} pHash with its windows {statistics.median(runs):5.1f} us an image")
    print(f"{len(pixels)} images, same bits both ways")


if __name__ == "__main__":
    main()
