"""JPEG verification modes: CPU per photo, and which damaged photos each mode writes.

    python bench/verify.py                      # 300 photos
    python bench/verify.py --num_images 2000    # README numbers

In one process, on the corpus's healthy photos: `check_image` CPU µs per photo with
--jpeg_verify dct (default), full and strict (median of --repeats rounds). Then each photo is
damaged once, at a random place in its compressed data, one of three ways (200 bytes cut out,
64 bytes zeroed, one bit flipped); for the damaged photos that dct accepts (TensorFlow decodes
them: they would be written), the share that strict rejects.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import corpus, healthy_files, load_average, median, print_table  # noqa: E402

_DAMAGE = ("cut 200 bytes", "zero 64 bytes", "flip 1 bit")


def _damage(data: bytes, kind: str, rng: random.Random) -> bytes | None:
    """`data` damaged once in its compressed data; None if that is too short to damage."""
    out = bytearray(data)
    sos = out.find(b"\xff\xda")
    start = sos + 2 + int.from_bytes(out[sos + 2 : sos + 4], "big")  # first compressed byte
    if sos < 0 or len(out) - 300 <= start:
        return None
    at = rng.randrange(start, len(out) - 300)
    if kind == "cut 200 bytes":
        del out[at : at + 200]
    elif kind == "zero 64 bytes":
        out[at : at + 64] = bytes(64)
    else:
        out[at] ^= 1 << rng.randrange(8)
    return bytes(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from core.rejects import Rejected
    from transforms.images.check import check_image
    from transforms.images.limits import JPEG_VERIFY_MODES, CheckOptions

    corpus_dir, summary = corpus(max(args.num_images, 300))
    blobs = []
    for path in healthy_files(corpus_dir, summary)[: args.num_images]:
        with open(path, "rb") as f:
            blobs.append(f.read())
    modes = {m: CheckOptions(jpeg_verify=m) for m in JPEG_VERIFY_MODES}
    for b in blobs[:20]:  # warm the decoders
        for opts in modes.values():
            check_image(b, opts)
    cost = {m: [] for m in modes}
    healthy_rejects = {m: 0 for m in modes}  # counted in the first round only
    for round_ in range(args.repeats):
        for mode, opts in modes.items():
            c0 = time.process_time()
            for b in blobs:
                try:
                    check_image(b, opts)
                except Rejected:
                    healthy_rejects[mode] += round_ == 0
            cost[mode].append((time.process_time() - c0) / len(blobs) * 1e6)
    base = median(cost["dct"])
    print_table(
        f"check_image per photo, {len(blobs)} photos, median of {args.repeats} ({load_average()})",
        ["--jpeg_verify", "CPU µs/photo", "× dct", "healthy photos rejected"],
        [
            [m, f"{median(cost[m]):.0f}", f"{median(cost[m]) / base:.2f}", healthy_rejects[m]]
            for m in modes
        ],
    )

    rng = random.Random(0)
    written = {k: 0 for k in _DAMAGE}
    caught = {k: 0 for k in _DAMAGE}
    for b in blobs:
        kind = rng.choice(_DAMAGE)
        damaged = _damage(b, kind, rng)
        if damaged is None:
            continue
        try:
            check_image(damaged, modes["dct"])
        except Rejected:
            continue  # TensorFlow refuses it: every mode rejects it
        written[kind] += 1
        try:
            check_image(damaged, modes["strict"])
        except Rejected:
            caught[kind] += 1
    print_table(
        "Damaged photos that dct writes (TensorFlow decodes them), and how many strict rejects",
        ["damage", "written by dct", "rejected by strict", "share"],
        [
            [k, written[k], caught[k], f"{caught[k] / written[k]:.0%}" if written[k] else "-"]
            for k in _DAMAGE
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
