"""Converter benchmark: `imgrec convert` vs the plain loop a user would write vs the decode ceiling.

    python bench/convert.py                       # smoke: 300 images (+ 30 for start-up)
    python bench/convert.py --num_images 12000 --repeats 3    # the real run (docs/benchmarks.md)
    python bench/convert.py --fixed_cost 1,12000,48000 --repeats 2  # fixed cost (README table)

HEADLINE (what a user waits for): whole process, wall clock, default options, round-robin,
median of --repeats, each command a fresh process from interpreter start to exit:
  loop          the plain script (read -> tf.io.decode_image -> Example -> TFRecordWriter)
  no-validate   a converter that decodes nothing (read -> Example -> TFRecordWriter): it writes
                truncated and non-image files too; the floor any validating converter is held to
  imgrec ...    `python -m pipeline convert` with DEFAULT options (analysis on), and with
                --workers 1 / --workers 2 / --no_analyze (--headline_variants)

DIAGNOSTICS follow. In one run, on the same cached corpus (bench/_work/, git-ignored):
  loop      read -> full decode -> tf.train.Example -> tf.io.TFRecordWriter, one core, in a child
            process (timed inside the loop, so without interpreter/TF start-up)
  ceiling   full decode only, bytes already in memory, one core (eager tf.io.decode_image)
  cli:*     `python -m pipeline convert --no_analyze --workers K` as a subprocess; wall time
            includes start-up. "steady" throughput excludes the fixed start-up by differencing
            two corpus sizes: (N - n) / (T(N) - T(n)) with n = --small (default N/10).
Every child's peak RSS (wait4's per-process peak, the polled tree sum), at N and at N/10.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _fixed_cost  # noqa: E402
from bench._common import (  # noqa: E402
    WORK,
    corpus,
    healthy_files,
    load_average,
    median,
    print_table,
    run_child,
)

PY = sys.executable


def _child_loop(corpus_dir: str, output: str) -> dict:
    """The plain loop a user would write; prints JSON timings (imports excluded)."""
    import tensorflow as tf

    labels = sorted(d for d in os.listdir(corpus_dir) if os.path.isdir(os.path.join(corpus_dir, d)))
    paths = [
        (os.path.join(corpus_dir, lab, n), i)
        for i, lab in enumerate(labels)
        for n in sorted(os.listdir(os.path.join(corpus_dir, lab)))
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    written = failed = 0
    with tf.io.TFRecordWriter(output) as w:
        for path, label in paths:
            with open(path, "rb") as f:
                data = f.read()
            try:
                img = tf.io.decode_image(data, channels=3, expand_animations=False)
            except tf.errors.OpError:  # truncated/empty/text files: skip, as a user loop would
                failed += 1
                continue
            h, wd = int(img.shape[0]), int(img.shape[1])
            feat = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[h])),
                "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[wd])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                "image/filename": tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[path.encode()])
                ),
            }
            w.write(tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString())
            written += 1
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "written": written,
        "failed": failed,
        "bytes": os.path.getsize(output),
    }


def _child_novalidate(corpus_dir: str, output: str) -> dict:
    """A converter that validates nothing: every file's bytes go into an Example as they are."""
    import tensorflow as tf

    labels = sorted(d for d in os.listdir(corpus_dir) if os.path.isdir(os.path.join(corpus_dir, d)))
    written = 0
    with tf.io.TFRecordWriter(output) as w:
        for i, lab in enumerate(labels):
            for n in sorted(os.listdir(os.path.join(corpus_dir, lab))):
                path = os.path.join(corpus_dir, lab, n)
                with open(path, "rb") as f:
                    data = f.read()
                feat = {
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                    "image/filename": tf.train.Feature(
                        bytes_list=tf.train.BytesList(value=[path.encode()])
                    ),
                }
                w.write(
                    tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString()
                )
                written += 1
    return {"written": written}


def _child_ceiling(corpus_dir: str, summary_json: str) -> dict:
    """Pure decode of the healthy images, bytes in memory, one core."""
    import tensorflow as tf

    with open(summary_json) as f:
        summary = json.load(f)
    blobs = []
    for p in healthy_files(corpus_dir, summary):
        with open(p, "rb") as f:
            blobs.append(f.read())
    for b in blobs[:20]:  # warm the kernels
        tf.io.decode_image(b, channels=3, expand_animations=False)
    t0, c0 = time.perf_counter(), time.process_time()
    for b in blobs:
        tf.io.decode_image(b, channels=3, expand_animations=False)
    eager, eager_cpu = time.perf_counter() - t0, time.process_time() - c0
    # Same decode without eager dispatch: one tf.data pipeline, one thread (the op cost alone).
    ds = tf.data.Dataset.from_tensor_slices(blobs).map(
        lambda b: tf.shape(tf.io.decode_jpeg(b, channels=3))
    )
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 1
    opts.autotune.enabled = False
    ds = ds.with_options(opts)
    t0 = time.perf_counter()
    for _ in ds:
        pass
    graph = time.perf_counter() - t0
    return {
        "seconds": eager,
        "cpu_seconds": eager_cpu,
        "graph_seconds": graph,
        "images": len(blobs),
    }


def _child_components(corpus_dir: str, summary_json: str, limit: int) -> dict:
    """Per-image cost (µs) of each step the converter does per file, on `limit` healthy files."""
    import hashlib
    import io

    import numpy as np
    import tensorflow as tf
    from apache_beam.io.filesystems import FileSystems
    from PIL import Image

    from core import schema, storage
    from core.tfrecord import write_record

    with open(summary_json) as f:
        summary = json.load(f)
    paths = healthy_files(corpus_dir, summary)[:limit]
    blobs = [open(p, "rb").read() for p in paths]
    n = len(blobs)
    out = {}

    def timed(name, fn, items):
        fn(items[0])
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        out[name] = (time.perf_counter() - t0) / len(items) * 1e6

    timed("read (open().read)", lambda p: open(p, "rb").read(), paths)
    timed("read (storage.read_bytes)", storage.read_bytes, paths)

    def fs_open(p):
        with FileSystems.open(p, compression_type="uncompressed") as f:
            return f.read()

    timed("read (FileSystems.open)", fs_open, paths)
    timed("sha256", lambda b: hashlib.sha256(b).hexdigest(), blobs)
    timed(
        "decode tf.io.decode_image eager",
        lambda b: tf.io.decode_image(b, channels=3, expand_animations=False),
        blobs,
    )
    timed(
        "decode + .numpy()",
        lambda b: tf.io.decode_image(b, channels=3, expand_animations=False).numpy(),
        blobs,
    )
    timed("decode tf.io.decode_jpeg eager", lambda b: tf.io.decode_jpeg(b, channels=3), blobs)
    timed("eager op floor (tf.io.extract_jpeg_shape)", lambda b: tf.io.extract_jpeg_shape(b), blobs)
    timed("decode PIL Image.open().load()", lambda b: Image.open(io.BytesIO(b)).load(), blobs)
    timed("PIL header only (Image.open().mode)", lambda b: Image.open(io.BytesIO(b)).mode, blobs)

    def verify(b):  # PIL's structural check, no pixel decode
        Image.open(io.BytesIO(b)).verify()

    timed("PIL Image.verify()", verify, blobs)
    from transforms.images.check import check_image
    from transforms.images.limits import CheckOptions

    opts = CheckOptions()
    timed("check_image (converter's inspect)", lambda b: check_image(b, opts), blobs)
    timed("check_image + stats", lambda b: check_image(b, opts, compute_stats=True), blobs)
    # Alternatives for transforms/images/check.py:_channel_stats (same sums, exact in int64).
    from transforms.images.stats import _channel_stats

    pixels = [tf.io.decode_jpeg(b, channels=3).numpy() for b in blobs[:200]]
    timed("_channel_stats as shipped (float64 einsum)", _channel_stats, pixels)

    def stats_bincount(px):
        # Per-channel 256-bin histograms: sum = h @ v, sum of squares = h @ v², exact integers.
        flat = px.reshape(-1, 3)
        v = np.arange(256, dtype=np.int64)
        hs = [np.bincount(flat[:, c], minlength=256) for c in range(3)]
        return ([int(h @ v) for h in hs], [int(h @ (v * v)) for h in hs], flat.shape[0])

    timed("stats alt: uint8 bincount histograms", stats_bincount, pixels)

    def stats_int(px):
        flat = px.reshape(-1, 3)
        s1 = flat.sum(axis=0, dtype=np.int64)
        f = flat.astype(np.int32)
        return s1, np.einsum("ij,ij->j", f, f, dtype=np.int64), flat.shape[0]

    timed("stats alt: int32 einsum", stats_int, pixels)
    timed(
        "schema.make_example",
        lambda b: schema.make_example(
            encoded=b,
            image_format="jpeg",
            height=400,
            width=450,
            channels=3,
            label=1,
            label_text="cat",
            filename="/x/cat/cat_000001.jpg",
            sha256="0" * 64,
        ),
        blobs,
    )
    ex = [
        schema.make_example(
            encoded=b,
            image_format="jpeg",
            height=1,
            width=1,
            channels=3,
            label=1,
            label_text="cat",
            filename="x",
            sha256="0" * 64,
        )
        for b in blobs
    ]

    class _Null:
        def write(self, d):
            pass

    sink = _Null()
    timed("tfrecord.write_record (crc32c)", lambda e: write_record(sink, e), ex)
    from transforms.keys import int_hash

    timed("keys.int_hash", lambda p: int_hash("order", 0, p), paths)
    return {"us_per_image": out, "images": n}


def _cli(corpus_dir: str, out_dir: str, extra: list[str]) -> dict:
    argv = [
        PY,
        "-m",
        "pipeline",
        "convert",
        "--input",
        f"{corpus_dir}/*/*.jpg",
        "--output",
        out_dir,
        "--overwrite",
        # The 5 odd files are 14 % of a 30-image start-up corpus: let the run finish.
        "--max_bad_fraction",
        "0.5",
    ] + extra
    r = run_child(argv)
    if r["rc"] != 0:
        raise SystemExit(f"convert failed ({r['rc']}): {' '.join(argv)}\n{r['stderr'][-3000:]}")
    info_path = os.path.join(out_dir, "dataset_info.json")
    with open(info_path) as f:
        r["info"] = json.load(f)
    return r


def _child_json(mode: str, *args) -> tuple[dict, dict]:
    r = run_child([PY, os.path.abspath(__file__), "--_child", mode, *map(str, args)])
    if r["rc"] != 0:
        raise SystemExit(f"child {mode} failed:\n{r['stderr'][-3000:]}")
    return json.loads(r["stdout"].strip().splitlines()[-1]), r


def _input_bytes(corpus_dir: str, summary: dict) -> int:
    """Bytes of the files the converter should write: healthy JPEGs + the PNG named .jpg."""
    files = healthy_files(corpus_dir, summary)
    if summary.get("png_as_jpg"):
        files.append(os.path.join(corpus_dir, summary["png_as_jpg"]))
    return sum(os.path.getsize(p) for p in files)


def _headline(big_dir: str, n_big: int, repeats: int, spec: str) -> tuple[str, dict]:
    """Whole-process wall clock of each command, round-robin, median of `repeats`."""
    commands = [
        ("plain loop (read, decode, write)", "loop"),
        ("no-validate converter (read, write)", "novalidate"),
    ]
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        name, _, flags = item.partition("=")
        commands.append((f"imgrec convert {flags.strip() or '(default options)'}", flags.split()))
    walls: dict[str, list[float]] = {label: [] for label, _ in commands}
    for _ in range(repeats):
        for label, what in commands:
            if isinstance(what, str):
                out = os.path.join(WORK, f"{what}.tfrecord")
                r = run_child([PY, os.path.abspath(__file__), "--_child", what, big_dir, out])
                if r["rc"] != 0:
                    raise SystemExit(f"child {what} failed:\n{r['stderr'][-3000:]}")
            else:
                r = _cli(big_dir, os.path.join(WORK, f"out-headline-{n_big}"), what)
            walls[label].append(r["wall_s"])
            print(f"  {label}: {r['wall_s']:.1f} s wall; {load_average()}", flush=True)
    loop = median(walls[commands[0][0]])
    novalidate = median(walls[commands[1][0]])
    rows = [
        [
            label,
            f"{median(w):.1f}",
            " ".join(f"{x:.1f}" for x in w),
            f"{loop / median(w):.2f}",
            f"{median(w) / novalidate:.2f}",
        ]
        for label, w in walls.items()
    ]
    table = print_table(
        f"Whole process, wall clock, {n_big} images (median of {repeats}, round-robin; "
        f"{load_average()})",
        ["command", "wall s", "runs", "× plain loop", "÷ no-validate"],
        rows,
    )
    return table, {label: w for label, w in walls.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=300, help="healthy images in the corpus")
    ap.add_argument(
        "--small",
        type=int,
        default=0,
        help="size of the start-up corpus (default num_images/10, at least 30)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1, help="runs per measurement (median)")
    ap.add_argument(
        "--headline_variants",
        default="default=;w1=--workers 1;w2=--workers 2;noanalyze=--no_analyze",
        help="';'-separated name=CLI flags for the whole-process headline ('' = defaults)",
    )
    ap.add_argument(
        "--variants",
        default="w1=--workers 1;w2=--workers 2",
        help="diagnostics: ';'-separated name=extra CLI flags (always with --no_analyze), "
        "steady state by differencing two corpus sizes; '' skips them",
    )
    ap.add_argument(
        "--components", type=int, default=400, help="images for the per-step µs table (0: skip)"
    )
    ap.add_argument("--json", default="", help="also write every measurement here")
    ap.add_argument(
        "--fixed_cost",
        default="",
        help="only the fixed-cost rows (bench/_fixed_cost.py) for these comma-separated sizes: "
        "imgrec default vs plain loop vs loop on both cores, best of --repeats",
    )
    ap.add_argument(
        "--aside",
        action="store_true",
        help="--fixed_cost: also the old TFT path, Beam's own workers, --stats_max_images 1000",
    )
    ap.add_argument("--_child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._child:
        mode, rest = args._child[0], args._child[1:]
        fn = {
            "loop": _child_loop,
            "novalidate": _child_novalidate,
            "ceiling": _child_ceiling,
            "components": _child_components,
            "loop2": _fixed_cost.child_loop2,
        }[mode]
        if mode == "components":
            rest[-1] = int(rest[-1])
        print(json.dumps(fn(*rest)))
        return 0

    if args.fixed_cost:
        sizes = [int(n) for n in args.fixed_cost.split(",")]
        table, walls = _fixed_cost.run(sizes, args.repeats, args.seed, args.aside)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"table": table, "runs": walls}, f, indent=1)
        return 0
    n_big = args.num_images
    n_small = args.small or max(30, n_big // 10)
    big_dir, big_sum = corpus(n_big, args.seed)
    small_dir, _ = corpus(n_small, args.seed)
    big_json = big_dir + ".json"
    in_bytes = _input_bytes(big_dir, big_sum)
    print(
        f"corpus: {n_big} images ({in_bytes / 1e6:.1f} MB written-eligible, "
        f"{in_bytes / n_big / 1e3:.1f} KB/image) + 5 odd files; start-up corpus {n_small}; "
        f"{load_average()}",
        flush=True,
    )
    results = {"num_images": n_big, "small": n_small, "load_before": load_average(), "runs": {}}
    headline = ""
    if args.headline_variants:
        headline, walls = _headline(big_dir, n_big, args.repeats, args.headline_variants)
        results["headline_wall_s"] = walls
        if not args.variants and not args.components:
            results["table"] = headline
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1, default=str)
            return 0

    comp_text = ""
    if args.components:
        comp, _ = _child_json("components", big_dir, big_json, args.components)
        results["components"] = comp
        rows = [[k, f"{v:.0f}"] for k, v in comp["us_per_image"].items()]
        comp_text = print_table(
            f"Per-image cost of each converter step ({comp['images']} images, one core, µs)",
            ["step", "µs/image"],
            rows,
        )

    loops, ceilings = [], []
    for _ in range(args.repeats):
        j, r = _child_json("loop", big_dir, os.path.join(WORK, "loop.tfrecord"))
        loops.append((j, r))
        j2, r2 = _child_json("ceiling", big_dir, big_json)
        ceilings.append((j2, r2))
    loop_s = median([j["seconds"] for j, _ in loops])
    loop_cpu_us = median([j["cpu_seconds"] for j, _ in loops]) / n_big * 1e6
    ceil_cpu_us = median([j["cpu_seconds"] for j, _ in ceilings]) / n_big * 1e6
    loop_ips = n_big / loop_s
    ceil_ips = n_big / median([j["seconds"] for j, _ in ceilings])
    graph_ips = n_big / median([j["graph_seconds"] for j, _ in ceilings])
    results["runs"]["loop"] = [
        dict(j, wall_s=r["wall_s"], maxrss_mb=r["maxrss_mb"]) for j, r in loops
    ]
    results["runs"]["ceiling"] = [dict(j, wall_s=r["wall_s"]) for j, r in ceilings]

    variants = []
    for spec in filter(None, (s.strip() for s in args.variants.split(";"))):
        name, _, flags = spec.partition("=")
        variants.append((name.strip(), flags.split() + ["--no_analyze"]))

    rows = []
    loop_r = loops[len(loops) // 2][1]
    loop_wall = median([r["wall_s"] for _, r in loops])
    rows.append(
        [
            "plain loop (1 core)",
            f"{loop_wall:.1f}",
            f"{n_big / loop_wall:.0f}",
            f"{loop_ips:.0f}",
            "1.00",
            f"{loop_ips / ceil_ips:.2f}",
            f"{loop_cpu_us:.0f}",
            f"{loop_r['maxrss_mb']:.0f}",
            "-",
            "-",
        ]
    )
    rows.append(
        [
            "decode ceiling (eager, 1 core)",
            "-",
            "-",
            f"{ceil_ips:.0f}",
            f"{ceil_ips / loop_ips:.2f}",
            "1.00",
            f"{ceil_cpu_us:.0f}",
            "-",
            "-",
            "-",
        ]
    )
    rows.append(
        [
            "decode op alone (tf.data, 1 thread)",
            "-",
            "-",
            f"{graph_ips:.0f}",
            f"{graph_ips / loop_ips:.2f}",
            f"{graph_ips / ceil_ips:.2f}",
            "-",
            "-",
            "-",
            "-",
        ]
    )
    out_ratio = None
    for name, flags in variants:
        per_size = {}
        for label, d, n in (("small", small_dir, n_small), ("big", big_dir, n_big)):
            runs = [
                _cli(d, os.path.join(WORK, f"out-{name}-{n}"), flags) for _ in range(args.repeats)
            ]
            per_size[label] = runs
            results["runs"][f"cli:{name}:{n}"] = [
                {k: v for k, v in r.items() if k not in ("stdout", "stderr", "info")} for r in runs
            ]
        t_big = median([r["wall_s"] for r in per_size["big"]])
        t_small = median([r["wall_s"] for r in per_size["small"]])
        # Differencing needs T(N) > T(n); on a tiny smoke corpus noise can invert them.
        steady = (n_big - n_small) / (t_big - t_small) if t_big > t_small else float("nan")
        rss_big = max(r["tree_rss_mb"] for r in per_size["big"])
        rss_small = max(r["tree_rss_mb"] for r in per_size["small"])
        cpu_big = median([r["cpu_s"] for r in per_size["big"]])
        cpu_small = median([r["cpu_s"] for r in per_size["small"]])
        cpu_us = (cpu_big - cpu_small) / (n_big - n_small) * 1e6
        info = per_size["big"][0]["info"]
        out_bytes = sum(s["num_bytes"] for s in info["splits"].values())
        out_ratio = out_bytes / in_bytes
        results["runs"][f"cli:{name}"] = {
            "steady_ips": steady,
            "cpu_us_per_image": cpu_us,
            "cpu_s": [cpu_small, cpu_big],
            "startup_s": t_small - n_small / steady,
            "out_bytes": out_bytes,
            "in_bytes": in_bytes,
            "num_written": info["num_written"],
        }
        rows.append(
            [
                f"imgrec convert {' '.join(f for f in flags if f != '--no_analyze')}",
                f"{t_big:.1f}",
                f"{n_big / t_big:.0f}",
                f"{steady:.0f}",
                f"{steady / loop_ips:.2f}",
                f"{steady / ceil_ips:.2f}",
                f"{cpu_us:.0f}",
                f"{rss_big:.0f}",
                f"{rss_small:.0f}",
                f"{rss_big / rss_small:.2f}",
            ]
        )
        print(
            f"[{name}] wall {t_small:.1f} s at {n_small}, {t_big:.1f} s at {n_big}; start-up "
            f"≈ {t_small - n_small / steady:.1f} s; CPU {cpu_small:.1f} s / {cpu_big:.1f} s; output {out_bytes / 1e6:.1f} MB = "
            f"{out_ratio:.3f}× input; {load_average()}",
            flush=True,
        )

    table = print_table(
        f"Convert, {n_big} images (steady = start-up removed by differencing {n_small} and "
        f"{n_big} images; {load_average()})",
        [
            "what",
            "wall s",
            "img/s wall",
            "img/s steady",
            "× loop",
            "× ceiling",
            "CPU µs/img",
            f"peak RSS MB @{n_big}",
            f"@{n_small}",
            "RSS ratio",
        ],
        rows,
    )
    results["table"] = headline + "\n" + table + "\n" + comp_text
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
