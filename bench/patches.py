"""What each kept patch of the launch wing buys on the default command (docs/DESIGN.md's table).

Whole process, wall clock, default options, page cache warm; the modes alternate (A B C ... then
reversed) and each row is the median of --repeats. A patch is switched off by name with
IMGREC_PATCHES_OFF (pipeline/launch/patches.py); "all" runs imgrec on plain Beam with the
collector and Keras left as they are.

    python bench/patches.py --num_images 1 --repeats 7
    python bench/patches.py --num_images 12000 --repeats 3 --patches all
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (  # noqa: E402
    WORK,
    alternate,
    corpus,
    load_average,
    print_table,
    timed_run,
    with_patches_off,
)

PATCHES = (
    "gc_freeze",
    "defer_keras",
    "tft_without_keras",
    "pickles_kept_in_process",
    "memoize_dofn_specs",
    "memoize_option_views",
    "memoize_function_arguments",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num_images", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--patches", default=",".join(PATCHES), help="comma-separated names to switch off, or all"
    )
    args = parser.parse_args()
    source = corpus(args.num_images, broken=args.num_images > 1)[0]
    modes = ("on", *args.patches.split(","))
    if "all" not in modes:
        modes = (*modes, "all")
    out = os.path.join(WORK, "patches-out")

    def run_one(mode: str) -> tuple[float, float]:
        shutil.rmtree(out, ignore_errors=True)
        env = with_patches_off(dict(os.environ), *(() if mode == "on" else (mode,)))
        argv = [sys.executable, "-m", "pipeline", "convert", "--input", f"{source}/*/*.jpg"]
        return timed_run([*argv, "--output", out], env, f"imgrec ({mode} off)")

    print(f"default command, {args.num_images} photos, {load_average()}")
    got = alternate(modes, args.repeats, run_one)
    on = got["on"][0]
    rows = [[m, f"{w:.2f}", f"{c:.2f}", f"{w / on:.3f}"] for m, (w, c) in got.items()]
    print_table(
        f"Switched off, {args.num_images} photos (medians of {args.repeats})",
        ["off", "wall s", "CPU s", "wall / all on"],
        rows,
    )


if __name__ == "__main__":
    main()
