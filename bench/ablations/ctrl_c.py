"""Ctrl-C as a terminal sends it, repeated: does `imgrec convert` always exit 130, quietly?

    python bench/ablations/ctrl_c.py --trials 20                  # --workers 2, SIGINT 1 s in
    python bench/ablations/ctrl_c.py --trials 20 --delay 0 --workers 1

Each trial starts the default command (plus --workers) on a generated corpus in its own process
group and temp dir, waits until the command has its children (the analysis process and, with
--workers 2, the workers' zygote and Beam's two worker commands), waits --delay seconds, then sends SIGINT to the whole
group. It prints the exit status, the seconds to exit and the terminal's last line. A run that
has not exited after --hang_s is reported as a hang with a stack dump (py-spy, when it is on the
PATH) and its children, then killed. Not a test: a run under pytest once hung, which this script
is for finding again.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)


def _children(pid: int) -> list[str]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return found.stdout.split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds after the children")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num_images", type=int, default=600)
    parser.add_argument("--hang_s", type=float, default=60.0)
    args = parser.parse_args()
    from pipeline.demo import build_corpus

    work = tempfile.mkdtemp(prefix="imgrec-ctrl-c-")
    src = os.path.join(work, "src")
    build_corpus(src, num_images=args.num_images, seed=2, long_side=(300, 500), broken=False)
    # The analysis process, and with worker processes the zygote and Beam's worker commands
    # (pipeline/launch/forked_workers.py).
    want = 1 + (1 + args.workers if args.workers > 1 else 0)
    hangs = 0
    try:
        for trial in range(args.trials):
            tmp = tempfile.mkdtemp(dir=work)
            argv = [sys.executable, "-m", "pipeline", "convert", "--input", f"{src}/*/*.jpg"]
            argv += ["--output", os.path.join(tmp, "ds"), "--workers", str(args.workers)]
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=ROOT, TMPDIR=tmp),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            while proc.poll() is None and len(_children(proc.pid)) < want:
                time.sleep(0.1)
            time.sleep(args.delay)
            sent = time.monotonic()
            os.killpg(proc.pid, signal.SIGINT)
            try:
                out, err = proc.communicate(timeout=args.hang_s)
            except subprocess.TimeoutExpired:
                hangs += 1
                print(f"{trial}: HANG {args.hang_s:.0f} s after SIGINT", flush=True)
                if shutil.which("py-spy"):
                    dump = ["py-spy", "dump", "--pid", str(proc.pid)]
                    print(subprocess.run(dump, capture_output=True, text=True).stdout)
                for kid in _children(proc.pid):
                    with open(f"/proc/{kid}/cmdline", encoding="utf-8", errors="replace") as f:
                        print(f"  child {kid}: {f.read().replace(chr(0), ' ')[:160]}")
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                continue
            lines = [ln for ln in (out + err).splitlines() if ln.strip()]
            foreign = [ln for ln in lines if not ln.startswith("imgrec")]
            print(
                f"{trial}: exit {proc.returncode} after {time.monotonic() - sent:.1f} s, "
                f"{len(foreign)} foreign line(s); last: {lines[-1] if lines else ''}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{hangs} hang(s) in {args.trials} trials")
    return 1 if hangs else 0


if __name__ == "__main__":
    sys.exit(main())
