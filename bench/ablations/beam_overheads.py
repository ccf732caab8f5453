"""The default command on a local corpus, whole process, wall clock: with Beam's own per-call
overheads against imgrec's memoized ones (pipeline/launch/patches.py, on by default).

    PYTHONPATH=. .venv/bin/python bench/ablations/beam_overheads.py --num_images 300 --repeats 5

Each run is `python -m pipeline convert --input DIR/*/*.jpg --output OUT` with default options
(analysis and report on; a corpus this size runs in the launcher's process). The "Beam's own"
runs switch off what the patches add over Beam's per-call work: DoFn state specs, option
views and function signatures recomputed on every call (IMGREC_PATCHES_OFF=memoize_dofn_specs,
memoize_option_views,memoize_function_arguments). The runs alternate, so the
machine's load falls on both alike; medians are printed, then the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import alternate, imgrec_argv, timed_run, with_patches_off  # noqa: E402

_MEMOS = ("memoize_dofn_specs", "memoize_option_views", "memoize_function_arguments")


def _run(mode: str, corpus: str, out: str, env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one conversion."""
    shutil.rmtree(out, ignore_errors=True)
    return timed_run(
        [*imgrec_argv(), "convert", "--input", f"{corpus}/*/*.jpg", "--output", out,
         "--max_bad_fraction", "0.2"],
        with_patches_off(env, *(_MEMOS if mode == "off" else ())), mode,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from pipeline.demo import build_corpus

    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="imgrec-bench-") as tmp:
        corpus = os.path.join(tmp, "corpus")
        summary = build_corpus(corpus, num_images=args.num_images, seed=7, long_side=(200, 400))
        listed = summary["images"] + len(summary["broken"]) + 2  # + png-as-jpg + duplicate
        _run("on", corpus, os.path.join(tmp, "warm"), env)  # page cache, matplotlib's font cache
        medians = alternate(
            ("off", "on"),
            args.repeats,
            lambda mode: _run(mode, corpus, os.path.join(tmp, f"out-{mode}"), env),
        )
    wall = {m: w for m, (w, _) in medians.items()}
    cpu = {m: c for m, (_, c) in medians.items()}
    print(
        f"default command, {listed} files, median of {args.repeats}, whole process: "
        f"Beam's own overheads {wall['off']:.2f} s wall ({cpu['off']:.2f} s CPU), "
        f"memoized {wall['on']:.2f} s wall ({cpu['on']:.2f} s CPU), "
        f"{wall['off'] / wall['on']:.2f}x wall, {cpu['off'] / cpu['on']:.2f}x CPU"
    )


if __name__ == "__main__":
    main()
