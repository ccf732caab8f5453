"""The default command, whole process, wall clock: with Beam's construction-time type inference
(IMGREC_BEAM_TYPE_INFERENCE=1) against without it (imgrec's default, core/beam_compat.py).

    PYTHONPATH=. .venv/bin/python bench/ablations/type_inference.py --repeats 5
    PYTHONPATH=. .venv/bin/python bench/ablations/type_inference.py --sizes 1 --workers 2

For each corpus size (bench/_common.corpus, cached under bench/_work/), `python -m pipeline
convert --input DIR/*/*.jpg --output OUT` with default options, the two modes alternating so
the machine's load falls on both alike; `--workers N` adds that option (2: two worker
processes, whose pipelines are built again from the launcher's). Prints each run, then per size
the medians and the ratio. Also checks that both modes wrote the same shards, rejects,
duplicates and dataset_info.json (bench/_common.output_snapshot: provenance times left out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from bench._common import alternate, corpus, load_average, output_snapshot, timed_run  # noqa: E402
from core.beam_compat import TYPE_INFERENCE_ENV  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,300", help="comma-separated corpus sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0, help="0: the default (not passed)")
    args = parser.parse_args()
    base_env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    base_env.pop(TYPE_INFERENCE_ENV, None)
    envs = {"Beam's": dict(base_env, **{TYPE_INFERENCE_ENV: "1"}), "none": base_env}
    print(load_average())
    results = []
    with tempfile.TemporaryDirectory(prefix="imgrec-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            images, _ = corpus(size, broken=size > 1)
            extra = ["--workers", str(args.workers)] if args.workers else []

            def run(mode: str, images=images, extra=extra, size=size) -> tuple[float, float]:
                out = os.path.join(tmp, f"out-{mode[0]}")
                shutil.rmtree(out, ignore_errors=True)
                argv = [sys.executable, "-m", "pipeline", "convert", "--input",
                        f"{images}/*/*.jpg", "--output", out, "--max_bad_fraction", "0.2", *extra]  # fmt: skip
                return timed_run(argv, envs[mode], f"{mode} type inference, {size} files")

            run("none")  # page cache
            medians = alternate(tuple(envs), args.repeats, run, label=f"{size} files, ")
            same = output_snapshot(os.path.join(tmp, "out-B")) == output_snapshot(
                os.path.join(tmp, "out-n")
            )
            results.append((size, medians, same))
    workers = f" --workers {args.workers}" if args.workers else ""
    for size, medians, same in results:
        (w1, c1), (w0, c0) = medians["Beam's"], medians["none"]
        print(
            f"{size} files, default command{workers}, "
            f"median of {args.repeats}: Beam's type inference {w1:.2f} s wall ({c1:.2f} s CPU), "
            f"none {w0:.2f} s wall ({c0:.2f} s CPU): {w1 / w0:.2f}x wall, {c1 / c0:.2f}x CPU; "
            f"same shards, rejects, duplicates and dataset_info: {same}"
        )


if __name__ == "__main__":
    main()
