"""The default command, whole process, wall clock: TensorFlow loading Keras 3 and Keras 2 (its
own default once TFT is imported) against Keras 2 only (`pipeline.cli.use_keras_2`, imgrec's
default).

    PYTHONPATH=. .venv/bin/python bench/startup.py --num_images 300 --repeats 5

Each run is `python -m pipeline convert --input DIR/*/*.jpg --output OUT` with default options
(analysis and report on), once as it ships and once with `use_keras_2` made a no-op, so that
`import tensorflow` loads Keras 3 (and matplotlib.pyplot through it) before TFT switches it to
Keras 2. The same pair runs with `--workers 2` (DirectRunner worker processes, which inherit the
environment and import TensorFlow too). The runs alternate, so the machine's load falls on both
alike; medians of wall clock and of CPU (the child and its workers) are printed, then ratios.
Output bytes are compared: the shards must be identical either way.
"""

from __future__ import annotations

import argparse
import filecmp
import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def _run(mode: str, args: list[str], out: str, env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the child and its workers) of one conversion."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, mode, "convert", *args, "--output", out],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu


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

    sys.path.insert(0, REPO)
    from pipeline.demo import build_corpus

    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="imgrec-bench-") as tmp:
        corpus = os.path.join(tmp, "corpus")
        summary = build_corpus(corpus, num_images=args.num_images, seed=7, long_side=(200, 400))
        listed = summary["images"] + len(summary["broken"]) + 2  # + png-as-jpg + duplicate
        base = ["--input", f"{corpus}/*/*.jpg", "--max_bad_fraction", "0.2"]
        cases = {"default options": base, "--workers 2": [*base, "--workers", "2"]}
        _run("imgrec", base, os.path.join(tmp, "warm"), env)  # page cache, matplotlib's fonts
        for case, case_args in cases.items():
            times: dict[str, list[tuple[float, float]]] = {m: [] for m in _MODES}
            for i in range(args.repeats):
                for mode in _MODES:
                    out = os.path.join(tmp, f"out-{mode}")
                    times[mode].append(_run(mode, case_args, out, env))
                    wall, cpu = times[mode][-1]
                    print(f"  {case}, run {i + 1}, {mode:>6}: {wall:6.2f} s wall {cpu:6.2f} s CPU",
                          flush=True)  # fmt: skip
            same = _same_shards(os.path.join(tmp, "out-keras3"), os.path.join(tmp, "out-imgrec"))
            wall = {m: statistics.median(w for w, _ in t) for m, t in times.items()}
            cpu = {m: statistics.median(c for _, c in t) for m, t in times.items()}
            print(
                f"{case}, {listed} files, median of {args.repeats}, whole process: "
                f"Keras 3 + 2 {wall['keras3']:.2f} s wall ({cpu['keras3']:.2f} s CPU), "
                f"Keras 2 only {wall['imgrec']:.2f} s wall ({cpu['imgrec']:.2f} s CPU), "
                f"{wall['keras3'] / wall['imgrec']:.2f}x wall, "
                f"{cpu['keras3'] / cpu['imgrec']:.2f}x CPU; shards identical: {same}",
                flush=True,
            )


if __name__ == "__main__":
    main()
