"""Whole process, wall clock: TensorFlow loading Keras 3 and Keras 2 against Keras 2 only
(`pipeline.cli.use_keras_2`, imgrec's default), for the default command and the cases it changes.

    PYTHONPATH=. .venv/bin/python bench/startup.py --num_images 300 --repeats 5

Each case runs once as imgrec ships and once with `use_keras_2` made a no-op, so that `import
tensorflow` loads Keras 3 (and matplotlib.pyplot through it) unless TFT's import has set
TF_USE_LEGACY_KERAS first:
  - `convert` with default options (analysis and report on): the headline;
  - `convert --no_analyze --workers 2`: no TFT import in the launcher, so the two DirectRunner
    worker processes import TensorFlow without the variable unless imgrec sets it;
  - `verify` of the result: TensorFlow without TFT or the report.
The runs alternate, so the machine's load falls on both alike; medians of wall clock and of CPU
(the child and its workers) are printed, then ratios. The conversions' shards are compared.
"""

from __future__ import annotations

import argparse
import filecmp
import glob
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench._common import alternate, timed_run  # noqa: E402

# argv: MODE ARGS...; MODE "keras3" keeps TensorFlow's own Keras choice, "imgrec" is as shipped.
_RUN = """
import sys
if sys.argv.pop(1) == "keras3":
    import pipeline.cli
    pipeline.cli.use_keras_2 = lambda: None
sys.argv[0] = "imgrec"
from pipeline.cli import run
run()
"""
_MODES = ("keras3", "imgrec")


def _run(mode: str, args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the child and its workers) of one `imgrec ARGS`."""
    if args[0] == "convert":
        shutil.rmtree(args[args.index("--output") + 1], ignore_errors=True)
    return timed_run([sys.executable, "-c", _RUN, mode, *args], env, f"{mode} {args[0]}")


def _same_shards(a: str, b: str) -> bool:
    names = sorted(os.path.relpath(p, a) for p in glob.glob(f"{a}/**/*.tfrecord*", recursive=True))
    return bool(names) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from pipeline.demo import build_corpus

    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="imgrec-bench-") as tmp:
        corpus = os.path.join(tmp, "corpus")
        summary = build_corpus(corpus, num_images=args.num_images, seed=7, long_side=(200, 400))
        listed = summary["images"] + len(summary["broken"]) + 2  # + png-as-jpg + duplicate
        base = ["--input", f"{corpus}/*/*.jpg", "--max_bad_fraction", "0.2"]
        verified = os.path.join(tmp, "verified")
        _run("imgrec", ["convert", *base, "--output", verified], env)  # also warms the caches
        cases = {
            "convert, default options": ["convert", *base],
            "convert --no_analyze --workers 2": [
                "convert",
                *base,
                "--no_analyze",
                "--workers",
                "2",
            ],
            "verify": ["verify", verified],
        }
        for case, case_args in cases.items():

            def run_one(mode: str, case_args=case_args) -> tuple[float, float]:
                run_args = [*case_args]
                if case_args[0] == "convert":
                    run_args += ["--output", os.path.join(tmp, f"out-{mode}")]
                return _run(mode, run_args, env)

            medians = alternate(_MODES, args.repeats, run_one, label=f"{case}, ")
            same = ""
            if case_args[0] == "convert":
                ok = _same_shards(os.path.join(tmp, "out-keras3"), os.path.join(tmp, "out-imgrec"))
                same = f"; shards identical: {ok}"
            wall = {m: w for m, (w, _) in medians.items()}
            cpu = {m: c for m, (_, c) in medians.items()}
            print(
                f"{case}, {listed} files, median of {args.repeats}, whole process: "
                f"Keras 3 + 2 {wall['keras3']:.2f} s wall ({cpu['keras3']:.2f} s CPU), "
                f"Keras 2 only {wall['imgrec']:.2f} s wall ({cpu['imgrec']:.2f} s CPU), "
                f"{wall['keras3'] / wall['imgrec']:.2f}x wall, "
                f"{cpu['keras3'] / cpu['imgrec']:.2f}x CPU{same}",
                flush=True,
            )


if __name__ == "__main__":
    main()
