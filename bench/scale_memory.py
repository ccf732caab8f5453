"""Peak memory of one conversion of N tiny files, DirectRunner vs a local Dask cluster.

    PYTHONPATH=. TF_CPP_MIN_LOG_LEVEL=2 .venv/bin/python bench/scale_memory.py --files 10000 20000

Tiny (8x8) unique JPEGs make per-file overhead dominate, as in the README's memory-scaling row.
Peak RSS is polled (psutil, every 100 ms) and summed over each role's process tree: the imgrec
client process (DirectRunner runs everything there with --workers 1), the Dask scheduler, and
the Dask workers (2 processes, 1 thread each). Prints one JSON line per run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_corpus(root: str, n: int) -> str:
    """n distinct 8x8 JPEGs in 10 class folders (cached by n)."""
    from PIL import Image

    d = os.path.join(root, f"tiny-{n}")
    if os.path.isdir(d):
        return d
    tmp = d + ".part"
    for i in range(n):
        folder = os.path.join(tmp, f"c{i % 10}")
        os.makedirs(folder, exist_ok=True)
        img = Image.new("RGB", (8, 8), (i % 256, (i // 256) % 256, (i // 65536) % 256))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90, comment=f"file {i}".encode())  # unique bytes
        with open(os.path.join(folder, f"{i:07d}.jpg"), "wb") as f:
            f.write(buf.getvalue())
    os.rename(tmp, d)
    return d


class Peak:
    """Polls the summed RSS of process trees, keeping each role's peak."""

    def __init__(self, roles: dict[str, int]):
        import psutil

        self.psutil = psutil
        self.roles = roles
        self.peak = {r: 0 for r in roles}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _rss(self, pid: int) -> int:
        try:
            p = self.psutil.Process(pid)
            procs = [p, *p.children(recursive=True)]
        except self.psutil.NoSuchProcess:
            return 0
        total = 0
        for q in procs:
            try:
                total += q.memory_info().rss
            except self.psutil.NoSuchProcess:
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            for role, pid in self.roles.items():
                self.peak[role] = max(self.peak[role], self._rss(pid))
            time.sleep(0.1)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._t.join()
        return {r: round(v / 2**20) for r, v in self.peak.items()}


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def convert(src: str, out: str, extra: list[str], roles: dict[str, int]) -> dict:
    cmd = [sys.executable, "-m", "pipeline", "convert", "--input", f"{src}/*/*.jpg"]
    cmd += ["--output", out, "--no_analyze", "--overwrite", *extra]
    start = time.time()
    job = subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    peak = Peak({"client": job.pid, **roles})
    _, err = job.communicate()
    result = {"wall_s": round(time.time() - start, 1), "rc": job.returncode, "peak_mb": peak.stop()}
    if job.returncode:
        result["error"] = err.decode(errors="replace").strip().splitlines()[-1:]
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, nargs="+", default=[10000])
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "imgrec-scale"))
    ap.add_argument("--runners", default="direct,dask")
    args = ap.parse_args()
    dask_bin = os.path.join(os.path.dirname(sys.executable), "dask")
    for n in args.files:
        src = make_corpus(args.work, n)
        out = os.path.join(args.work, "out")
        if "direct" in args.runners:
            r = convert(src, out, ["--workers", "1"], {})
            print(json.dumps({"runner": "direct", "files": n, **r}), flush=True)
        if "dask" in args.runners:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            addr = f"tcp://127.0.0.1:{port}"
            sched = subprocess.Popen(
                [dask_bin, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                 "--no-dashboard"],
                env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            workers = [
                subprocess.Popen(
                    [
                        dask_bin,
                        "worker",
                        addr,
                        "--nthreads",
                        "1",
                        "--no-dashboard",
                        "--memory-limit",
                        "0",
                    ],
                    env=_env(),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                for _ in range(2)
            ]
            try:
                from distributed import Client

                with Client(addr, timeout=60) as c:
                    c.wait_for_workers(2, timeout=120)
                roles = {"scheduler": sched.pid}
                roles.update({f"worker{i}": w.pid for i, w in enumerate(workers)})
                r = convert(src, out, ["--runner", "DaskRunner", "--dask_client_address", addr],
                            roles)  # fmt: skip
                print(json.dumps({"runner": "dask", "files": n, **r}), flush=True)
            finally:
                for p in [*workers, sched]:
                    p.terminate()
                for p in [*workers, sched]:
                    p.wait()


if __name__ == "__main__":
    main()
