"""Shared bench helpers: cached corpora under bench/_work/, child-process timing with peak RSS, tables."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time

__all__ = [
    "REPO",
    "WORK",
    "corpus",
    "clean_view",
    "run_child",
    "ChildResult",
    "median",
    "print_table",
    "load_average",
    "imgrec_argv",
    "with_patches_off",
    "timed_run",
    "alternate",
    "output_snapshot",
    "default_command_ab",
]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(REPO, "bench", "_work")  # git-ignored cache of corpora and outputs


def imgrec_argv(settings: dict[str, str] | None = None) -> list[str]:
    """The command that runs the `imgrec` program (`python -m pipeline`), to append ARGS to.
    With `settings`, each name of `core.beam_clients` is first set to its Python expression (e.g.
    a feature's set of schemes emptied): A/B runs of what no IMGREC_PATCHES_OFF name switches."""
    if not settings:
        return [sys.executable, "-m", "pipeline"]
    assignments = "".join(f"clients.{name} = {value}\n" for name, value in settings.items())
    source = "import core.beam_clients as clients\n" + assignments
    return [sys.executable, "-c", source + "from pipeline.launch.program import run\nrun()\n"]


def patched_argv(patch: str) -> list[str]:
    """The `imgrec` program with `patch` (Python source) run once the program has started and
    before it runs: the job's workers are forked from that process, so they run patched too."""
    source = (
        "from pipeline.launch import program\n"
        "from pipeline.launch.switches import read_switches\n"
        "program.start(read_switches())\n" + patch + "\nprogram.run()\n"
    )
    return [sys.executable, "-c", source]


def with_patches_off(env: dict, *names: str) -> dict:
    """`env` with the named patches of pipeline/launch/patches.py switched off (Beam's own
    behaviour) in the command and every process it starts; no names: none off."""
    from pipeline.launch.switches import ENV

    return dict(env, **{ENV["patches_off"]: ",".join(names)})


def timed_run(argv: list[str], env: dict, what: str) -> tuple[float, float]:
    """Run `argv` from the repo root: (wall s, CPU s of the child and the children it waited
    for, e.g. DirectRunner workers). Exits naming `what` and the stderr tail if it fails."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{what}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def alternate(modes, repeats: int, run_one, label: str = "") -> dict[str, tuple[float, float]]:
    """`run_one(mode) -> (wall s, CPU s)` for each of `modes` in turn, `repeats` rounds, so the
    machine's load falls on every mode alike; prints each run, returns {mode: (median wall,
    median CPU)}.

    Every other round runs the modes in reverse order (A B, B A, ...), and the page cache's dirty
    pages are written out (`os.sync`) before each run: otherwise the run after one that wrote
    hundreds of MB pays for that write-back."""
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    for i in range(repeats):
        for mode in modes if i % 2 == 0 else tuple(reversed(modes)):
            os.sync()
            wall, cpu = run_one(mode)
            times[mode].append((wall, cpu))
            print(f"  {label}run {i + 1}, {mode:>8}: {wall:6.2f} s wall {cpu:6.2f} s CPU",
                  flush=True)  # fmt: skip
    return {
        m: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
        for m, t in times.items()
    }


def load_average() -> str:
    """`uptime`'s 1/5/15-minute load: the bench machine is shared, so every table records it."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def corpus(num_images: int, seed: int = 0, broken: bool = True) -> tuple[str, dict]:
    """Build (once) and return (dir, summary) of a real-photo corpus of `num_images` JPEGs.

    The summary (pipeline.demo.build_corpus's return value) is cached next to the images, so a
    second call with the same arguments costs nothing.
    """
    name = f"corpus-{num_images}-s{seed}{'' if broken else '-clean'}"
    out = os.path.join(WORK, name)
    done = os.path.join(WORK, name + ".json")
    if os.path.exists(done):
        with open(done) as f:
            return out, json.load(f)
    from pipeline.demo import build_corpus

    t0 = time.perf_counter()
    print(f"[bench] building {name} ({num_images} images) ...", file=sys.stderr, flush=True)
    summary = build_corpus(out, num_images=num_images, seed=seed, broken=broken)
    print(f"[bench] built {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    with open(done, "w") as f:
        json.dump(summary, f)
    return out, summary


def clean_view(corpus_dir: str, summary: dict) -> str:
    """A hard-linked copy of a corpus without its broken/odd files (for readers that crash on them).

    image_dataset_from_directory raises on the truncated/text/empty files; this view holds the
    healthy JPEGs only (same bytes, no copy).
    """
    out = corpus_dir.rstrip("/") + "-healthy"
    done = out + ".done"
    if os.path.exists(done):
        return out
    odd = set(summary.get("broken", {})) | {summary.get("png_as_jpg"), summary.get("duplicate")}
    for label in sorted(os.listdir(corpus_dir)):
        src_dir = os.path.join(corpus_dir, label)
        if not os.path.isdir(src_dir):
            continue
        os.makedirs(os.path.join(out, label), exist_ok=True)
        for name in os.listdir(src_dir):
            if f"{label}/{name}" in odd:
                continue
            dst = os.path.join(out, label, name)
            if not os.path.exists(dst):
                os.link(os.path.join(src_dir, name), dst)
    open(done, "w").close()
    return out


def healthy_files(corpus_dir: str, summary: dict) -> list[str]:
    """Paths of the corpus's healthy images (sorted), the ones every reader can decode."""
    odd = set(summary.get("broken", {})) | {summary.get("png_as_jpg"), summary.get("duplicate")}
    paths = []
    for label in sorted(os.listdir(corpus_dir)):
        d = os.path.join(corpus_dir, label)
        if os.path.isdir(d):
            paths += [
                os.path.join(d, n) for n in sorted(os.listdir(d)) if f"{label}/{n}" not in odd
            ]
    return paths


class ChildResult(dict):
    """{"wall_s", "rc", "cpu_s" (user+sys of the child and its waited-for descendants),
    "maxrss_mb" (largest single process, kernel), "tree_rss_mb" (polled sum), "stdout", "stderr"}.

    cpu_s is the noise-robust number on a shared machine: other people's load stretches wall
    time but barely changes the CPU seconds a run needs.
    """


def _tree_rss_kb(root: int) -> int:
    """Sum of VmRSS over `root` and its descendants, read from /proc (no psutil needed)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            with open(f"/proc/{pid}/statm") as f:
                rss[pid] = int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total


def run_child(argv: list[str], env: dict | None = None, poll_s: float = 0.05) -> ChildResult:
    """Run `argv`, returning wall time (incl. interpreter start-up) and peak memory.

    Peak memory two ways: `maxrss_mb` from os.wait4's rusage (the kernel's peak RSS of the largest
    single process among the child and its waited-for descendants: exact, but not a sum), and
    `tree_rss_mb`, the largest sum of RSS over the whole process tree seen by polling /proc every
    `poll_s` (catches DirectRunner multi_processing workers; may miss a very short spike).
    """
    full_env = dict(os.environ)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    full_env["PYTHONPATH"] = REPO + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    out_path = os.path.join(WORK, f".child-{os.getpid()}.out")
    err_path = os.path.join(WORK, f".child-{os.getpid()}.err")
    os.makedirs(WORK, exist_ok=True)
    peak = [0]
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=full_env, cwd=REPO)
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
                stop.wait(poll_s)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        stop.set()
        poller.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    with open(out_path, errors="replace") as f:
        stdout = f.read()
    with open(err_path, errors="replace") as f:
        stderr = f.read()
    return ChildResult(
        wall_s=wall,
        rc=proc.returncode,
        maxrss_mb=usage.ru_maxrss / 1024,
        cpu_s=usage.ru_utime + usage.ru_stime,
        tree_rss_mb=peak[0] / 1024,
        stdout=stdout,
        stderr=stderr,
    )


def median(values):
    return statistics.median(values) if values else float("nan")


def print_table(title: str, header: list[str], rows: list[list], file=None) -> str:
    """Print a GitHub-markdown table (also returned) so it pastes straight into the README."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [f"### {title}", ""]
    for n, r in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    text = "\n".join(lines) + "\n"
    print(text, file=file or sys.stdout, flush=True)
    return text


def eval_config(shards, image_size=(224, 224), batch: int = 64):
    """The reader's evaluation settings for `shards`, for benchmarks that call its stages directly."""
    from pipeline.reader import dataset as reader

    return reader._Config(
        shards=shards,
        num_examples=0,
        num_bytes=0,
        global_batch_size=batch,
        training=False,
        image_size=image_size,
        seed=None,
        repeat=False,
        deterministic=True,
        cache=False,
        shuffle_records=1024,
        crop_fraction=0.875,
        dct_scaling=False,
        extra_features=(),
        postprocess=None,
    )


def output_snapshot(folder: str) -> dict[str, str]:
    """What a conversion wrote, to compare two runs: the sha256 of every shard, rejected.jsonl
    and duplicates.jsonl by path under `folder`, and dataset_info.json without its provenance
    (argv, start and end times)."""
    found = {}
    names = glob.glob(os.path.join(folder, "*", "*.tfrecord*")) + [
        os.path.join(folder, name) for name in ("rejected.jsonl", "duplicates.jsonl")
    ]
    for path in sorted(names):
        with open(path, "rb") as f:
            found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(folder, "dataset_info.json")) as f:
        info = json.load(f)
    info.pop("provenance")
    found["dataset_info.json"] = json.dumps(info, sort_keys=True)
    return found


def default_command_ab(variable: str, modes: dict[str, str | None], what: str) -> None:
    """The default `imgrec convert`, whole process, wall clock, with the environment variable
    `variable` set per mode ({label: value, or None to leave it unset}), the modes alternating
    so the machine's load falls on all alike. Command line: --sizes (corpus sizes, cached under
    bench/_work/), --repeats, --workers (0: not passed). Prints each run, then per size the
    medians, the ratio of the first mode to the second and whether every mode wrote the same
    shards, rejects, duplicates and dataset_info.json (`output_snapshot`)."""
    import argparse
    import shutil
    import tempfile

    parser = argparse.ArgumentParser(description=f"{what}: {variable}, A/B")
    parser.add_argument("--sizes", default="1,300", help="comma-separated corpus sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=0, help="0: the default (not passed)")
    args = parser.parse_args()
    base_env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    base_env.pop(variable, None)
    envs = {
        mode: base_env if value is None else dict(base_env, **{variable: value})
        for mode, value in modes.items()
    }
    print(load_average())
    results = []
    with tempfile.TemporaryDirectory(prefix="imgrec-bench-") as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            images, _ = corpus(size, broken=size > 1)
            extra = ["--workers", str(args.workers)] if args.workers else []
            outs = {mode: os.path.join(tmp, f"out-{i}") for i, mode in enumerate(modes)}

            def run(mode: str, images=images, extra=extra, size=size, outs=outs):
                shutil.rmtree(outs[mode], ignore_errors=True)
                argv = [sys.executable, "-m", "pipeline", "convert", "--input",
                        f"{images}/*/*.jpg", "--output", outs[mode], "--max_bad_fraction", "0.2",
                        *extra]  # fmt: skip
                return timed_run(argv, envs[mode], f"{what}: {mode}, {size} files")

            run(list(modes)[-1])  # page cache
            medians = alternate(tuple(modes), args.repeats, run, label=f"{size} files, ")
            snapshots = [output_snapshot(out) for out in outs.values()]
            same = all(snapshot == snapshots[0] for snapshot in snapshots)
            results.append((size, medians, same))
    workers = f" --workers {args.workers}" if args.workers else ""
    first, second = list(modes)[:2]
    for size, medians, same in results:
        (w1, c1), (w0, c0) = medians[first], medians[second]
        print(
            f"{size} files, default command{workers}, median of {args.repeats}: "
            f"{what} {first} {w1:.2f} s wall ({c1:.2f} s CPU), {second} {w0:.2f} s wall "
            f"({c0:.2f} s CPU): {w1 / w0:.2f}x wall, {c1 / c0:.2f}x CPU; "
            f"same shards, rejects, duplicates and dataset_info: {same}"
        )
