"""The fixed-cost rows of bench/convert.py (`--fixed_cost 1,12000,48000`), issue 33.

Whole process, wall clock, DEFAULT options (nothing but --input/--output; the output folder is
removed before each run, outside the timing), page cache warm (an untimed pass over the inputs
before every run: this VM's kernel pages out file pages idle for 60 s, a DAMON scheme, so a
command that followed a pause re-read them; docs/benchmarks.md), best of --repeats, interleaved
per size: imgrec, the plain loop, the loop on both cores, then again; beside the best-of ratio,
the median of each round's own ratio and the ratio of median CPU seconds. Commands:
  plain loop          read -> tf.io.decode_image -> Example -> TFRecordWriter, one process
  loop on both cores  the same loop in a multiprocessing.Pool(2), each process its own half of
                      the files and its own TFRecord file (the parent imports no TensorFlow)
  imgrec              `python -m pipeline convert --input ... --output ...`
  --aside adds: imgrec with IMGREC_ANALYSIS_PROCESS=0 (TFT in the job's stages, the old path)
                and, above 1 file, imgrec with IMGREC_FORKED_WORKERS=0 (Beam's own worker
                processes, from 20,000 files; in-process below)
Size 1 is one photo (a corpus of 1 healthy image, no odd files).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys

from bench._common import WORK, corpus, load_average, print_table, run_child

PY = sys.executable
_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "convert.py")


def child_loop2(corpus_dir: str, output: str) -> dict:
    """The plain loop on both cores: multiprocessing.Pool(2), one half and one file each."""
    import multiprocessing

    labels = sorted(d for d in os.listdir(corpus_dir) if os.path.isdir(os.path.join(corpus_dir, d)))
    paths = [
        (os.path.join(corpus_dir, lab, n), i)
        for i, lab in enumerate(labels)
        for n in sorted(os.listdir(os.path.join(corpus_dir, lab)))
    ]
    halves = [(paths[k::2], f"{output}-{k}") for k in range(2)]
    with multiprocessing.Pool(2) as pool:
        counts = pool.map(_loop_part, halves)
    return {"written": sum(c[0] for c in counts), "failed": sum(c[1] for c in counts)}


def _loop_part(args) -> tuple[int, int]:
    paths, output = args
    import tensorflow as tf

    written = failed = 0
    with tf.io.TFRecordWriter(output) as w:
        for path, label in paths:
            with open(path, "rb") as f:
                data = f.read()
            try:
                img = tf.io.decode_image(data, channels=3, expand_animations=False)
            except tf.errors.OpError:
                failed += 1
                continue
            feat = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "image/height": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[img.shape[0]])
                ),
                "image/width": tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[img.shape[1]])
                ),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                "image/filename": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[path.encode()])
                ),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString())
            written += 1
    return written, failed


def _input(size: int, seed: int) -> str:
    if size == 1:
        return corpus(1, seed, broken=False)[0]
    return corpus(size, seed)[0]


def _warm(corpus_dir: str) -> None:
    """Read every file once, so every command finds the page cache warm."""
    for folder, _, files in os.walk(corpus_dir):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                while f.read(1 << 20):
                    pass


def _commands(corpus_dir: str, size: int, aside: bool) -> list[tuple[str, list[str], dict]]:
    out = os.path.join(WORK, f"fixed-{size}")
    imgrec = [PY, "-m", "pipeline", "convert", "--input", f"{corpus_dir}/*/*.jpg", "--output"]
    rows = [
        ("imgrec (default options)", imgrec + [out + "-imgrec"], {}),
        ("plain loop", [PY, _BENCH, "--_child", "loop", corpus_dir, out + "-loop"], {}),
        ("loop on both cores", [PY, _BENCH, "--_child", "loop2", corpus_dir, out + "-loop2"], {}),
    ]
    if aside and size > 1:  # the default before forked workers: in-process below 20,000 files
        rows.append(
            (
                "imgrec, Beam's own worker processes (before)",
                imgrec + [out + "-beamw"],
                {"IMGREC_FORKED_WORKERS": "0"},
            )
        )
        # What the pixel statistics' sample costs: the default beside a smaller sample.
        stats = ["--stats_max_images", "1000"]
        rows.append(("imgrec --stats_max_images 1000", imgrec + [out + "-stats"] + stats, {}))
    if aside:
        rows.append(
            (
                "imgrec, TFT in the job (old path)",
                imgrec + [out + "-old"],
                {"IMGREC_ANALYSIS_PROCESS": "0"},
            )
        )
    return rows


def _clean(argv: list[str]) -> None:
    if "--output" in argv:
        shutil.rmtree(argv[argv.index("--output") + 1], ignore_errors=True)


def run(sizes: list[int], repeats: int, seed: int, aside: bool) -> tuple[str, dict]:
    """Best-of-`repeats` wall seconds per (size, command); prints and returns the table."""
    results: dict[str, dict[str, list[float]]] = {}
    rows = []
    for size in sizes:
        corpus_dir = _input(size, seed)
        commands = _commands(corpus_dir, size, aside)
        walls: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in commands}
        for i in range(repeats):
            # The previous runs' output written out first: a run right after one that wrote
            # hundreds of MB pays for their write-back (`alternate` in bench/_common.py). The
            # rotation only varies which command opens a round.
            for name, argv, env in commands[i % len(commands) :] + commands[: i % len(commands)]:
                _clean(argv)
                os.sync()
                _warm(corpus_dir)
                r = run_child(argv, env=env)
                if r["rc"] != 0:
                    raise SystemExit(f"{name} failed ({r['rc']}):\n{r['stderr'][-3000:]}")
                walls[name].append(r["wall_s"])
                cpus[name].append(r["cpu_s"])
                print(
                    f"  {size} files, {name}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                    f"peak RSS {r['tree_rss_mb']:.0f} MB; {load_average()}",
                    flush=True,
                )
        results[str(size)] = {"wall_s": walls, "cpu_s": cpus}
        best = {name: min(w) for name, w in walls.items()}
        loop, loop2 = best["plain loop"], best["loop on both cores"]
        for name, _, _ in commands:
            # One round's ratio is noisy on a shared host (0.84-1.82 seen at 1 file): the median
            # of the rounds' own ratios, and the CPU ratio, say whether a best-of ratio moved.
            rounds = [w / p for w, p in zip(walls[name], walls["plain loop"], strict=True)]
            cpu = statistics.median(cpus[name]) / statistics.median(cpus["plain loop"])
            rows.append(
                [
                    f"{size:,} {'file' if size == 1 else 'photos'}",
                    name,
                    f"{best[name]:.1f}",
                    " ".join(f"{w:.1f}" for w in walls[name]),
                    f"{min(cpus[name]):.1f}",
                    f"{best[name] / loop:.2f}",
                    f"{statistics.median(rounds):.2f}",
                    f"{cpu:.2f}",
                    f"{best[name] / loop2:.2f}",
                ]
            )
    table = print_table(
        f"Fixed cost: whole process, wall clock, default options, best of {repeats} "
        f"(interleaved; {load_average()})",
        [
            "input",
            "command",
            "best wall s",
            "runs",
            "CPU s",
            "÷ plain loop",
            "÷ plain loop, median of rounds",
            "CPU ÷ plain loop (medians)",
            "÷ loop on both cores",
        ],
        rows,
    )
    return table, results
