"""Where a small conversion's wall clock goes: the command and the analysis process, by timestamps.

    python bench/ablations/critical_path.py --repeats 3                # 1 file (the fixed cost)
    python bench/ablations/critical_path.py --input 'DIR/*/*' --repeats 1
    python bench/ablations/critical_path.py --input 'DIR/*/*' --repeats 1 --stages
    python bench/ablations/critical_path.py --input 'DIR/*/*' -- --near_duplicates off

Runs the default `imgrec convert` (whole process, fresh each time) with a few functions wrapped
to write a timestamp (seconds since the command started) and, in the analysis process, its own
CPU seconds: the fork (`AnalysisProcess.start` returns once Beam and TensorFlow are imported),
the request the job writes, the analysis process's answer and the end. Prints one
line per run and the medians. Wall clock on a shared host is noisy: compare variants run
interleaved, and read the analysis process's CPU until its answer (its chain is the 1-file
critical path, docs/benchmarks.md). --stages also times every Beam stage (each bundle FnApiRunner
runs, from its start to its end, in the command and in the analysis process) and the report,
and prints those over 0.1 s after each run.
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
from pipeline.launch import program
from pipeline.launch.switches import read_switches
program.start(read_switches())  # as the program starts, before the imports below
T0 = float(os.environ["CP_T0"])
LOG = os.environ["CP_LOG"]

def mark(what):
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    with open(LOG, "a") as f:
        f.write(f"{time.time() - T0:.3f} {os.getpid()} {what} {cpu.ru_utime + cpu.ru_stime:.3f}\n")

import pipeline.launch.analysis_process as ap
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

for module, name in ((ap.AnalysisProcess, "start"), (ap, "_answer"),
                     (aside, "write_json_atomic"), (launcher, "convert")):
    wrap(module, name)

if os.environ.get("CP_STAGES"):
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    import pipeline.report.page as page

    def timed_bundle(inner):
        def run(self, context, manager, data):
            name = "stage:" + manager.stage.name.replace(" ", "_")
            mark(name + ">")
            try:
                return inner(self, context, manager, data)
            finally:
                mark(name + "<")
        return run

    fn_runner.FnApiRunner._execute_bundle = timed_bundle(fn_runner.FnApiRunner._execute_bundle)
    build_report = page.build_report

    def timed_report(*args, **kwargs):
        mark("stage:report>")
        try:
            return build_report(*args, **kwargs)
        finally:
            mark("stage:report<")

    page.build_report = timed_report
program.run()
"""


def _stage_lines(log_lines: list[str], at_least: float = 0.1) -> list[str]:
    """One line per timed stage bundle of `at_least` seconds: start, end, length, process, name."""
    opened, lines = {}, []
    for line in log_lines:
        at, pid, what, _ = line.split()
        if what.startswith("stage:") and what.endswith(">"):
            opened[(pid, what[6:-1])] = float(at)
        elif what.startswith("stage:") and what.endswith("<"):
            start = opened.pop((pid, what[6:-1]), None)
            if start is not None and float(at) - start >= at_least:
                lines.append(
                    (
                        start,
                        f"  {start:6.2f} {float(at):6.2f} {float(at) - start:5.2f}"
                        f"  pid {pid:>7}  {what[6:-1][:90]}",
                    )
                )
    return [text for _, text in sorted(lines)]


def one(input_glob: str, out: str, stages: bool = False, extra: tuple = ()) -> dict:
    fd, log = tempfile.mkstemp(prefix="imgrec-cp-")
    os.close(fd)
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, CP_T0=repr(time.time()), CP_LOG=log, PYTHONPATH=ROOT)
    if stages:
        env["CP_STAGES"] = "1"
    start = time.time()
    subprocess.run(
        [sys.executable, "-c", _CHILD, "convert", "--input", input_glob, "--output", out, *extra],
        cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wall = time.time() - start
    with open(log) as f:
        log_lines = f.readlines()
    marks = {}
    for line in log_lines:
        at, _, what, cpu = line.split()
        marks.setdefault(what, (float(at), float(cpu)))  # the first of each (the request)
    if stages:
        print("  start    end  secs  process    stage (bundles of 0.1 s or more)")
        print("\n".join(_stage_lines(log_lines)))
    os.remove(log)
    fork = marks["start"][0]
    return {
        "fork": fork,
        "request": marks["write_json_atomic"][0] - fork,
        "answer": marks["_answer"][0] - fork,
        "analysis_cpu": marks["_answer"][1],
        "after_answer": marks["convert"][0] - marks["_answer"][0],
        "end": marks["convert"][0],
        "wall": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", default=os.path.join(ROOT, "bench/_work/corpus-1-s0-clean/*/*.jpg"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stages", action="store_true", help="also time every Beam stage")
    ap.add_argument("convert_flags", nargs=argparse.REMAINDER, help="after --: more convert flags")
    args = ap.parse_args()
    if args.input.endswith("corpus-1-s0-clean/*/*.jpg") and not os.path.isdir(
        os.path.dirname(os.path.dirname(args.input))
    ):
        from pipeline.demo import build_corpus

        build_corpus(os.path.dirname(os.path.dirname(args.input)), num_images=1, broken=False)
    out = tempfile.mkdtemp(prefix="imgrec-cp-out-")
    rows = []
    extra = [f for f in args.convert_flags if f != "--"]
    for i in range(args.repeats):
        row = one(args.input, os.path.join(out, "ds"), args.stages, extra)
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
