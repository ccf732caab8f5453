"""What each process of a local Dask cluster costs, by start-up preload (docs/runners.md).

Starts a scheduler and two `dask worker` processes on 127.0.0.1 (as run_dask.sh does), runs one
default `imgrec convert` on them, then reads every cluster process's CPU and resident memory
from /proc: the nannies (the processes `dask worker` starts as, which run no task), the worker
processes and the scheduler. Variants alternate, `--repeats` rounds; medians are printed, with
the conversion's wall clock (whole process).

    PYTHONPATH=. .venv/bin/python bench/ablations/dask_preload.py --num_images 50 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASK = os.path.join(os.path.dirname(sys.executable), "dask")
PRELOAD = "pipeline.launch.dask_preload"
VARIANTS = {
    "worker_start": ("pipeline.launch.worker_start", None),  # the preload run_dask.sh had
    "dask_preload": (PRELOAD, PRELOAD),  # run_dask.sh now
}


def _proc(pid: int) -> tuple[float, float]:
    """(CPU seconds, resident MB) of a live process."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    cpu = (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) / 1024
    return cpu, rss


def _children(pid: int) -> list[int]:
    """Child processes of any of `pid`'s threads (the nanny starts its worker from a thread)."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(p) for p in f.read().split()]
    return found


def _is_resource_tracker(pid: int) -> bool:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return b"multiprocessing.resource_tracker" in f.read()


def one_run(corpus: str, worker_preload: str, scheduler_preload: str | None, tmp: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    log = open(os.path.join(tmp, "cluster.log"), "ab")
    sched_cmd = [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]
    if scheduler_preload:
        sched_cmd += ["--preload", scheduler_preload]
    procs = [subprocess.Popen(sched_cmd, env=env, stdout=log, stderr=log)]
    for i in range(2):
        cmd = [DASK, "worker", address, "--nthreads", "1", "--no-dashboard", "--name", f"w{i}"]
        procs.append(subprocess.Popen([*cmd, "--preload", worker_preload], env=env,
                                      stdout=log, stderr=log))  # fmt: skip
    try:
        from distributed import Client

        with Client(address, timeout=60) as c:
            c.wait_for_workers(2, timeout=120)
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pipeline", "convert", "--input", f"{corpus}/*/*.jpg",
             "--output", os.path.join(tmp, "ds"), "--overwrite", "--max_bad_fraction", "0.5",
             "--runner", "DaskRunner", "--dask_client_address", address],
            env=env, check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        scheduler, nannies = procs[0], procs[1:]
        # A nanny's children: its worker process and multiprocessing's resource tracker.
        workers = [c for n in nannies for c in _children(n.pid) if not _is_resource_tracker(c)]
        return {
            "conversion wall s": wall,
            "scheduler CPU s": _proc(scheduler.pid)[0],
            "nanny CPU s": statistics.mean(_proc(n.pid)[0] for n in nannies),
            "nanny RSS MB": statistics.mean(_proc(n.pid)[1] for n in nannies),
            "worker CPU s": statistics.mean(_proc(w)[0] for w in workers),
            "worker RSS MB": statistics.mean(_proc(w)[1] for w in workers),
        }
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num_images", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from pipeline.demo import build_corpus

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus")
        build_corpus(corpus, num_images=args.num_images, seed=1, long_side=(96, 160))
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for _ in range(args.repeats):
            for name, (worker, scheduler) in VARIANTS.items():
                runs[name].append(one_run(corpus, worker, scheduler, tmp))
    keys = list(runs["worker_start"][0])
    print(f"{'median of ' + str(args.repeats):<20}" + "".join(f"{v:>16}" for v in VARIANTS)
          + f"{'ratio':>10}")  # fmt: skip
    for k in keys:
        old, new = (statistics.median(r[k] for r in runs[v]) for v in VARIANTS)
        print(f"{k:<20}{old:>16.2f}{new:>16.2f}{old / new:>9.2f}x")


if __name__ == "__main__":
    main()
