"""The pHash's median step: np.sort (phash._bits) against np.partition at the two middle ranks
(what it used before), on the DCT terms of real decodes, whole pHash included.

    python bench/ablations/phash_median.py --images 1500

The images: bench/near_duplicates.py's cost corpus (generated photos), decoded at the 1/8 DCT
scale the job's inspection hashes them at. Both ways must give the same bits (checked on every
image); the time is one thread's CPU per image, median of `--repeats` passes, one process.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

import numpy as np

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1500, help="at most 2,970 (its JPEGs)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    root = build_cost_corpus(3000)  # the cost benchmark's default size: often already made
    paths = sorted(glob.glob(os.path.join(root, "*", "*.jpg")))[: args.images]
    pixels = []
    for path in paths:
        with open(path, "rb") as f:
            pixels.append(np.asarray(tf_decode("jpeg", f.read(), ratio=8)))
    sort_bits = ph._bits

    def whole(bits):
        def run(p):
            ph._bits = bits
            try:
                return ph.phashes(p)
            finally:
                ph._bits = sort_bits

        return run

    assert all(whole(partition_bits)(p) == ph.phashes(p) for p in pixels), "bits differ"
    rows = {"np.sort (default)": sort_bits, "np.partition": partition_bits}
    for name, bits in rows.items():
        hashes = statistics.median(_cpu_us(whole(bits), pixels) for _ in range(args.repeats))
        print(f"{name:18s} pHash with its windows {hashes:5.1f} us an image")
    print(f"{len(pixels)} images, same bits both ways")


if __name__ == "__main__":
    main()
