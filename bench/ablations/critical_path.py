"""Where a small conversion's wall clock goes: the command and the analysis process, by timestamps.

    python bench/ablations/critical_path.py --repeats 3                # 1 file (the fixed cost)
    python bench/ablations/critical_path.py --input 'DIR/*/*' --repeats 1

Runs the default `imgrec convert` (whole process, fresh each time) with a few functions wrapped
to write a timestamp (seconds since the command started) and, in the analysis process, its own
CPU seconds: the fork (`analysis_process.start` returns once Beam and TensorFlow are imported),
the request the job writes, the analysis process's answer and the end. Prints one
line per run and the medians. Wall clock on a shared host is noisy: compare variants run
interleaved, and read the analysis process's CPU until its answer (its chain is the 1-file
critical path, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

# Run in the child: wrap the functions that mark the phases, then run the `imgrec` program.
_CHILD = r"""
import os, resource, sys, time
T0 = float(os.environ["CP_T0"])
LOG = os.environ["CP_LOG"]

def mark(what):
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    with open(LOG, "a") as f:
        f.write(f"{time.time() - T0:.3f} {os.getpid()} {what} {cpu.ru_utime + cpu.ru_stime:.3f}\n")

import pipeline.analysis_process as ap
import pipeline.launcher as launcher
import transforms.analyze_aside as aside

def wrap(module, name):
    inner = getattr(module, name)
    def wrapped(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        finally:
            mark(name)
    setattr(module, name, wrapped)

for module, name in ((ap, "start"), (ap, "_answer"), (aside, "write_json_atomic"),
                     (launcher, "run_convert")):
    wrap(module, name)
sys.argv = ["imgrec", *sys.argv[1:]]
from pipeline.cli import run
run()
"""


def one(input_glob: str, out: str) -> dict:
    fd, log = tempfile.mkstemp(prefix="imgrec-cp-")
    os.close(fd)
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, CP_T0=repr(time.time()), CP_LOG=log, PYTHONPATH=ROOT)
    start = time.time()
    subprocess.run(
        [sys.executable, "-c", _CHILD, "convert", "--input", input_glob, "--output", out],
        cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wall = time.time() - start
    marks = {}
    with open(log) as f:
        for line in f:
            at, _, what, cpu = line.split()
            marks.setdefault(what, (float(at), float(cpu)))  # the first of each (the request)
    os.remove(log)
    fork = marks["start"][0]
    return {
        "fork": fork,
        "request": marks["write_json_atomic"][0] - fork,
        "answer": marks["_answer"][0] - fork,
        "analysis_cpu": marks["_answer"][1],
        "after_answer": marks["run_convert"][0] - marks["_answer"][0],
        "end": marks["run_convert"][0],
        "wall": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", default=os.path.join(ROOT, "bench/_work/corpus-1-s0-clean/*/*.jpg"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.input.endswith("corpus-1-s0-clean/*/*.jpg") and not os.path.isdir(
        os.path.dirname(os.path.dirname(args.input))
    ):
        from pipeline.demo import build_corpus

        build_corpus(os.path.dirname(os.path.dirname(args.input)), num_images=1, broken=False)
    out = tempfile.mkdtemp(prefix="imgrec-cp-out-")
    rows = []
    for i in range(args.repeats):
        row = one(args.input, os.path.join(out, "ds"))
        rows.append(row)
        print(f"run {i + 1}: " + "  ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    shutil.rmtree(out, ignore_errors=True)
    print(
        "median: " + "  ".join(f"{k} {statistics.median(r[k] for r in rows):.2f}" for k in rows[0])
    )
    print(
        "fork: Beam and TensorFlow imported; request/answer: seconds after the fork; "
        "analysis_cpu: the analysis process's CPU seconds at its answer; after_answer: the export published, "
        "dataset_info.json, the report and the summary; end: the command's work done (its process then exits)"
    )


if __name__ == "__main__":
    main()
