"""Whole process, wall clock: imgrec's two start-up choices, each against the same run without it,
for the default command and the cases it changes.

    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix gc --num_images 300 --repeats 7
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix keras --num_images 300 --repeats 7
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix keras3 --num_images 300 --repeats 7
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix report --num_images 300 --repeats 7
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix prism --num_images 300 --repeats 7
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix crops --num_images 300 --repeats 5
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix forward_refs --repeats 9
    PYTHONPATH=. .venv/bin/python bench/ablations/startup.py --fix roomy_stack --num_images 40 --repeats 7

`--fix` picks what the "off" runs leave out; the "imgrec" runs are as imgrec ships:
  - `keras3`: `pipeline.cli.use_keras_2` and `startup.defer_keras` made no-ops (in the workers
    too), so that `import tensorflow` loads Keras 3 (and matplotlib.pyplot through it, where it is
    installed) unless TFT's import has set TF_USE_LEGACY_KERAS first;
  - `keras`: `startup.defer_keras` made a no-op (in the workers too), so that `import tensorflow`
    loads Keras 2 (TF_USE_LEGACY_KERAS=1), as imgrec did before it deferred Keras;
  - `gc`: the imports with the garbage collector on (core/startup.py): `startup.begin`
    a no-op in the program, and the workers' start-up plugin (pipeline/runners/worker_start.py) replaced
    by a module that imports nothing, so the first bundle imports the stages as before;
  - `report`: the report's four plots drawn with matplotlib as before pipeline/report/charts.py
    (bench/ablations/_matplotlib_report.py; needs `pip install matplotlib`, no longer a dependency);
  - `crops`: the report's eval crops decoded by `tf.map_fn` run eagerly, as before
    `reader_decode.decode_batch_eagerly` (AutoGraph converts and runs each image's decode);
  - `forward_refs`: typing's compile left as the builtin during the start-up imports
    (`startup._memoize_forward_refs` a no-op in the program; the workers' start-up plugin keeps
    the memo), so each of TensorFlow's 18,160 ForwardRef strings is compiled on its own;
  - `roomy_stack`: the program's `main` called directly (`startup.on_a_roomy_stack` a plain
    call in the program; the workers' start-up plugin keeps it), so its frames map and unmap a
    16 KB stack chunk at each crossing of a chunk's end, as CPython does by default;
  - `prism`: Beam's own DirectRunner (`SwitchingDirectRunner`), which tries to download and run
    Prism first and falls back to the FnApiRunner when that fails (offline here, so it fails);
    imgrec runs the FnApiRunner directly (`core.beam_compat.DirectRunner`).
The cases:
  - `convert` with default options (analysis and report on): the headline;
  - `convert --no_analyze --workers 2`: two DirectRunner worker processes (which import
    TensorFlow without TF_USE_LEGACY_KERAS unless imgrec sets it);
  - `convert --workers 2` (only with `--fix keras`): worker processes that analyse, so load
    Keras 2 with TFT after their start-up;
  - `verify` of the result: TensorFlow without TFT or the report (not with `--fix report`);
  - `preview` of the result (only with `--fix report` or `--fix crops`): the report alone.
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

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import alternate, timed_run  # noqa: E402

# argv: MODE ARGS...; MODE "keras3" / "gc_on" leaves that choice out, "imgrec" is as shipped.
_RUN = """
import sys
mode = sys.argv.pop(1)
if mode in ("keras3", "keras2"):
    import pipeline.cli
    import core.startup
    import pipeline.runners.choose
    core.startup.defer_keras = lambda: None
    pipeline.runners.choose.WORKER_START_PLUGIN = "bench.ablations._worker_start_keras"
    if mode == "keras3":
        pipeline.cli.use_keras_2 = lambda: None
elif mode == "gc_on":
    import core.startup
    import pipeline.runners.choose
    core.startup.begin = lambda: None
    pipeline.runners.choose.WORKER_START_PLUGIN = "core"  # a package that imports nothing
elif mode == "compile_each":
    import core.startup
    core.startup._memoize_forward_refs = lambda: None
elif mode == "tight_stack":
    import core.startup
    core.startup.on_a_roomy_stack = lambda fn, *args, **kwargs: fn(*args, **kwargs)
elif mode == "beam_direct":
    import core.beam_compat
    core.beam_compat.DirectRunner = lambda: None  # beam.Pipeline(runner=None): Beam's
elif mode == "map_fn_crops":
    import pipeline.reader
    pipeline.reader.dataset._decode_batch_eagerly = pipeline.reader.dataset._decode_batch
elif mode == "mpl_report":
    import bench.ablations._matplotlib_report
    bench.ablations._matplotlib_report.install()
sys.argv[0] = "imgrec"
from pipeline.cli import run
run()
"""
# --fix: (the "off" mode, its label, the shipped mode's label)
_FIXES = {
    "keras3": ("keras3", "Keras 3 + 2", "no Keras at start-up"),
    "keras": ("keras2", "Keras 2 at start-up", "no Keras at start-up"),
    "gc": ("gc_on", "imports with GC", "imports without GC"),
    "report": ("mpl_report", "matplotlib plots", "SVG plots"),
    "forward_refs": ("compile_each", "ForwardRefs compiled each", "memoized"),
    "prism": ("beam_direct", "Beam's DirectRunner", "imgrec's DirectRunner"),
    "roomy_stack": ("tight_stack", "16 KB stack chunks", "one roomy chunk"),
    "crops": ("map_fn_crops", "eager tf.map_fn crops", "one-by-one crops"),
}


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
    parser.add_argument("--fix", choices=sorted(_FIXES), default="gc")
    parser.add_argument("--case", action="append", help="only this case (repeatable)")
    args = parser.parse_args()
    off, off_label, on_label = _FIXES[args.fix]
    modes = (off, "imgrec")

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
        }
        if args.fix == "keras":  # worker processes that load Keras 2 with TFT, after start-up
            cases["convert --workers 2"] = ["convert", *base, "--workers", "2"]
        if args.fix in ("report", "crops"):
            cases["preview"] = ["preview", verified, "--out", os.path.join(tmp, "r.html")]
        else:
            cases["verify"] = ["verify", verified]
        for case, case_args in cases.items():
            if args.case and case not in args.case:
                continue

            def run_one(mode: str, case_args=case_args) -> tuple[float, float]:
                run_args = [*case_args]
                if case_args[0] == "convert":
                    run_args += ["--output", os.path.join(tmp, f"out-{mode}")]
                return _run(mode, run_args, env)

            medians = alternate(modes, args.repeats, run_one, label=f"{case}, ")
            same = ""
            if case_args[0] == "convert":
                ok = _same_shards(os.path.join(tmp, f"out-{off}"), os.path.join(tmp, "out-imgrec"))
                same = f"; shards identical: {ok}"
            wall = {m: w for m, (w, _) in medians.items()}
            cpu = {m: c for m, (_, c) in medians.items()}
            print(
                f"{case}, {listed} files, median of {args.repeats}, whole process: "
                f"{off_label} {wall[off]:.2f} s wall ({cpu[off]:.2f} s CPU), "
                f"{on_label} {wall['imgrec']:.2f} s wall ({cpu['imgrec']:.2f} s CPU), "
                f"{wall[off] / wall['imgrec']:.2f}x wall, "
                f"{cpu[off] / cpu['imgrec']:.2f}x CPU{same}",
                flush=True,
            )


if __name__ == "__main__":
    main()
