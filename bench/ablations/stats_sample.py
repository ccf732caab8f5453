"""How close sampled pixel statistics are to the exact ones (the --stats_max_images default).

    python bench/ablations/stats_sample.py --num_images 12000 --samples 1000,2000,4000,8000

Converts the cached bench corpus once with every training image feeding the statistics
(--stats_max_images 0) and once per sample size, and prints each sampled per-channel mean and
std's relative error against the exact figures, with the wall time of each run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench._common import WORK, corpus, print_table, run_child  # noqa: E402

PY = sys.executable


def _stats(corpus_dir: str, n: int, cap: int) -> tuple[dict, float]:
    out = os.path.join(WORK, f"out-stats-{n}-{cap}")
    argv = [PY, "-m", "pipeline", "convert", "--input", f"{corpus_dir}/*/*.jpg", "--output", out,
            "--overwrite", "--max_bad_fraction", "0.5", "--stats_max_images", str(cap)]  # fmt: skip
    r = run_child(argv)
    if r["rc"] != 0:
        raise SystemExit(f"convert failed: {r['stderr'][-2000:]}")
    with open(os.path.join(out, "dataset_info.json")) as f:
        return json.load(f)["statistics"], r["wall_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=12000)
    ap.add_argument("--samples", default="1000,2000,4000,8000")
    args = ap.parse_args()
    corpus_dir, _ = corpus(args.num_images)
    exact, wall = _stats(corpus_dir, args.num_images, 0)
    rows = [["all", exact["num_stats_images"], "0", "0", f"{wall:.1f}"]]
    for cap in (int(s) for s in args.samples.split(",")):
        got, wall = _stats(corpus_dir, args.num_images, cap)
        err = {
            key: max(abs(g - e) / e for g, e in zip(got[key], exact[key], strict=True)) * 100
            for key in ("pixel_mean", "pixel_std")
        }
        rows.append([f"{cap}", got["num_stats_images"], f"{err['pixel_mean']:.2f}",
                     f"{err['pixel_std']:.2f}", f"{wall:.1f}"])  # fmt: skip
    print_table(
        f"Sampled pixel statistics vs exact, {args.num_images}-image corpus "
        f"(exact mean {[round(v, 2) for v in exact['pixel_mean']]}, "
        f"std {[round(v, 2) for v in exact['pixel_std']]})",
        ["--stats_max_images", "images sampled", "max mean error %", "max std error %", "wall s"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
