"""A statistics-sampled JPEG's perceptual hash: decoded again at 1/8 DCT scale (the default, so a
record's hash never depends on the sample) against hashed from the full decode the statistics
already made, averaged over the 8x8 blocks the 1/8 decode returns one pixel for.

    python bench/ablations/sampled_hash.py --sizes 3000 --repeats 11 --photos 800
    python bench/ablations/sampled_hash.py --corpus megapixel --sizes 1000 --repeats 5

agreement: on `--photos` JPEGs of each corpus (the cost corpus of bench/near_duplicates.py and
the headline's), how often the full decode's block hash equals the 1/8 decode's, and how many
bits apart the others are (the default threshold is 6). cost: the default command, whole
process, `report` with either hash for the sampled JPEGs and `off`, alternating on the cost
corpus; the alternative runs with `check._phashes` replaced in the job's processes (the workers
are forked after it is set, as bench/near_duplicates.py's stand-in).
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import shutil
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench._common import (  # noqa: E402
    REPO,
    WORK,
    alternate,
    corpus,
    load_average,
    patched_argv,
    timed_run,
)
from bench.near_duplicates import CORPUS_SIDES, build_cost_corpus  # noqa: E402
from transforms.images import phash as ph  # noqa: E402


def block_hashes(pixels: np.ndarray, block: int = 8) -> tuple[int, tuple[int, ...]]:
    """phashes of RGB pixels as if their `block`x`block` means were the pixels: the sides
    padded to whole blocks with copies of the last row and column (as a JPEG encoder pads
    them), then Pillow's Image.reduce."""
    height, width = pixels.shape[:2]
    pad = ((0, -height % block), (0, -width % block), (0, 0))
    image = Image.fromarray(np.pad(pixels, pad, mode="edge") if any(map(any, pad)) else pixels)
    return ph.phashes(np.asarray(image.reduce(block)))


# A sampled JPEG (decoded at full size) hashed from that decode (patched_argv).
_FROM_FULL = r"""
import numpy as np
import transforms.images.check as check
from bench.ablations.sampled_hash import block_hashes
default = check._phashes
def from_full(decoded, jpeg, h):
    wanted = check.reduction(h.height, h.width)
    if wanted == 8 and tuple(decoded.shape[:2]) == (h.height, h.width):
        return block_hashes(np.asarray(decoded))
    return default(decoded, jpeg, h)
check._phashes = from_full
"""


def agreement(pattern: str, photos: int) -> str:
    import tensorflow as tf

    random.seed(0)
    files = sorted(f for f in glob.glob(pattern) if f.endswith(".jpg"))
    bits = []
    for path in random.sample(files, min(photos, len(files))):
        with open(path, "rb") as f:
            data = f.read()
        try:
            full = np.asarray(tf.io.decode_jpeg(data, channels=3))
            eighth = np.asarray(tf.io.decode_jpeg(data, channels=3, ratio=8))
        except tf.errors.InvalidArgumentError:
            continue  # the headline corpus's broken files
        if min(full.shape[:2]) >= 128:
            bits.append(ph.to_unsigned(block_hashes(full)[0] ^ ph.phash(eighth)).bit_count())
    counts = np.bincount(bits)
    apart = ", ".join(f"{b} bits {n}" for b, n in enumerate(counts) if b and n)
    return f"{len(bits)} photos: {counts[0] / len(bits):.1%} the same hash; {apart}"


def cost(size: int, repeats: int, side) -> None:
    images = build_cost_corpus(size, side)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    modes = ("report", "from-full", "off")

    def run(mode: str):
        out = os.path.join(WORK, f"sampled-hash-{mode}")
        shutil.rmtree(out, ignore_errors=True)
        program = (
            patched_argv(_FROM_FULL) if mode == "from-full" else [sys.executable, "-m", "pipeline"]
        )
        argv = [*program, "convert", "--input", f"{images}/*/*", "--output",
                out, "--near_duplicates", "off" if mode == "off" else "report"]  # fmt: skip
        return timed_run(argv, env, f"{mode}, {size} files")

    run("off")  # page cache
    medians = alternate(modes, repeats, run, label=f"{size} files, ")
    w0, c0 = medians["off"]
    print(f"{size} files, median of {repeats}, of off: " + "; ".join(
        f"{m} {w / w0:.3f}x wall ({c / c0:.3f}x CPU)" for m, (w, c) in medians.items() if m != "off"
    ))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="3000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--photos", type=int, default=800)
    parser.add_argument("--corpus", choices=tuple(CORPUS_SIDES), default="generated")
    args = parser.parse_args()
    print(load_average())
    sizes = [int(s) for s in args.sizes.split(",")]
    generated = build_cost_corpus(sizes[0], CORPUS_SIDES[args.corpus])
    print("cost corpus, " + agreement(f"{generated}/*/*", args.photos))
    print("headline corpus, " + agreement(f"{corpus(3000)[0]}/*/*", args.photos))
    for size in sizes:
        cost(size, args.repeats, CORPUS_SIDES[args.corpus])


if __name__ == "__main__":
    main()
