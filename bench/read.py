"""Reader benchmark: pipeline.reader.make_dataset on converted shards vs image_dataset_from_directory.

    python bench/read.py                       # smoke: 300 images
    python bench/read.py --num_images 12000    # the real run (README table)

In one process, same corpus, image size 224, batch 64, every pipeline on TF's default thread
pools (all cores; `--threads K` pins every tf.data pipeline to K private threads instead):
  reader eval / train     make_dataset(training=False|True, repeat=False) on the 'train' split
                          of shards converted by `imgrec convert --no_analyze`
  idfd                    tf.keras.utils.image_dataset_from_directory on the original (healthy)
                          files, shuffle=False, + prefetch: what a user would write instead
  ceiling:*               the JPEG bytes already in memory, batched, one tf.map_fn decode per
                          batch (the cheapest formulation measured), AUTOTUNE: full
                          decode+resize; crop-decode+resize (the reader's eval ops); DCT
                          1/2-scale decode+resize
  reader @max_side 256    the reader on shards converted with --max_side 256 (or "pending" when
                          the converter stores images larger than 256)
  reader * pixels         the reader on shards converted with --store pixels --max_side 256:
                          raw uint8 RGB records, no decoder (docs/storage_modes.md)
  reader train* @64 shards  the two trainings on shards converted with --min_shards 64: more
                          shards than training reads at once (read whole, not in pieces:
                          pipeline/reader/pieces.py)
Pipelines are timed round-robin, `--repeats` rounds, the median reported; each pass reads every
image once. A warm-up pass per pipeline is not timed.

    python bench/read.py --reader_tree /tmp/before   # the same, another commit's reader

`--reader_tree DIR` imports the reader (pipeline/, core/) from DIR, e.g. a `git worktree` of an
earlier commit, while the shards stay this checkout's conversions: run it alternately with a
run without, and compare each run's `× idfd` (idfd is the same code in both: it absorbs the
host's load).

    python bench/read.py --multiworker         # images/s per worker, clusters of 1 and 2

`--multiworker` instead starts MultiWorkerMirroredStrategy clusters of 1 and 2 worker processes
on 127.0.0.1 (one TF_CONFIG each, CPU collectives), each worker iterating
`make_dataset(..., strategy=..., training=True)` of the same shards: after `--warmup_steps`,
`--steps` global batches are timed per worker. Prints images/s per worker and for the cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (  # noqa: E402
    WORK,
    clean_view,
    corpus,
    healthy_files,
    load_average,
    median,
    print_table,
    run_child,
)

PY = sys.executable


def _converted(corpus_dir: str, n: int, extra: list[str], name: str) -> str:
    """Output dir of `imgrec convert` on the corpus (reused when already converted)."""
    out = os.path.join(WORK, f"out-{name}-{n}")
    if os.path.exists(os.path.join(out, "dataset_info.json")):
        return out
    argv = [
        PY,
        "-m",
        "pipeline",
        "convert",
        "--input",
        f"{corpus_dir}/*/*.jpg",
        "--output",
        out,
        "--overwrite",
        "--no_analyze",
        "--max_bad_fraction",
        "0.5",
    ] + extra
    r = run_child(argv)
    if r["rc"] != 0:
        raise SystemExit(f"convert failed: {' '.join(argv)}\n{r['stderr'][-2000:]}")
    return out


def _largest_side(data_dir: str, split: str, limit: int = 200) -> int:
    import tensorflow as tf

    from core import schema
    from pipeline.reader.dataset import split_files

    _, shards = split_files(data_dir, split)
    spec = schema.feature_spec(keys=(schema.HEIGHT, schema.WIDTH))
    ds = tf.data.TFRecordDataset([s.path for s in shards]).take(limit)
    return max(
        max(int(f[schema.HEIGHT]), int(f[schema.WIDTH]))
        for f in (tf.io.parse_single_example(r, spec) for r in ds)
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="private tf.data threads for every pipeline (0: TF defaults, all cores)",
    )
    ap.add_argument("--only", default="", help="comma-separated pipeline names to run")
    ap.add_argument(
        "--multiworker",
        action="store_true",
        help="images/s per worker of MultiWorkerMirroredStrategy clusters of 1 and 2 workers",
    )
    ap.add_argument("--steps", type=int, default=20, help="--multiworker: timed global batches")
    ap.add_argument("--warmup_steps", type=int, default=5, help="--multiworker: untimed")
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--reader_tree",
        default="",
        help="a checkout (git worktree) whose reader to time instead of this one's",
    )
    args = ap.parse_args(argv)
    if args.reader_tree:  # before the first import of pipeline/core in this process
        sys.path.insert(0, os.path.abspath(args.reader_tree))

    n = args.num_images
    cdir, summary = corpus(n, args.seed)
    data_dir = _converted(cdir, n, ["--workers", "2"], "w2")
    if args.multiworker:
        return _multiworker(args, data_dir)

    import tensorflow as tf

    from pipeline.reader import make_dataset

    healthy_dir = clean_view(cdir, summary)
    small_dir = _converted(cdir, n, ["--workers", "2", "--max_side", "256"], "maxside256")
    small_side = _largest_side(small_dir, "train")
    pixels_dir = _converted(
        cdir, n, ["--workers", "2", "--store", "pixels", "--max_side", "256"], "pixels256"
    )
    many_dir = _converted(cdir, n, ["--workers", "2", "--min_shards", "64"], "shards64")
    many_pixels_dir = _converted(
        cdir,
        n,
        ["--workers", "2", "--store", "pixels", "--max_side", "256", "--min_shards", "64"],
        "pixels256-shards64",
    )
    size = (args.size, args.size)
    blobs = [open(p, "rb").read() for p in healthy_files(cdir, summary)]
    AUTO = tf.data.AUTOTUNE

    def pinned(ds):
        if not args.threads:
            return ds
        o = tf.data.Options()
        o.threading.private_threadpool_size = args.threads
        return ds.with_options(o)

    def reader(d, training):
        return lambda: pinned(
            make_dataset(
                d, "train", args.batch, training=training, image_size=size, repeat=False, seed=1
            )
        )

    def idfd():
        ds = tf.keras.utils.image_dataset_from_directory(
            healthy_dir, image_size=size, batch_size=args.batch, shuffle=False, verbose=False
        )
        return pinned(ds.prefetch(AUTO))

    def ceiling(kind):
        def decode(b):
            if kind == "full":
                img = tf.io.decode_jpeg(b, channels=3)
            elif kind == "dct2":
                img = tf.io.decode_jpeg(b, channels=3, ratio=2)
            else:  # the reader's eval path: centre crop window, fused crop+decode
                s = tf.io.extract_jpeg_shape(b)
                ch = tf.cast(tf.cast(tf.minimum(s[0], s[1]), tf.float32) * 0.875, tf.int32)
                img = tf.io.decode_and_crop_jpeg(
                    b, tf.stack([(s[0] - ch) // 2, (s[1] - ch) // 2, ch, ch]), channels=3
                )
            img = tf.image.resize(tf.cast(img, tf.float32), size, method="bilinear")
            return tf.cast(img + 0.5, tf.uint8)

        def build():
            # The cheapest formulation measured (the reader's own): batch the encoded bytes,
            # decode a batch per tf.data call, resize float32 pixels.
            o = tf.data.Options()
            o.threading.max_intra_op_parallelism = 1
            ds = tf.data.Dataset.from_tensor_slices(blobs).batch(args.batch)
            ds = ds.map(
                lambda b: tf.map_fn(
                    decode,
                    b,
                    fn_output_signature=tf.TensorSpec((*size, 3), tf.uint8),
                    parallel_iterations=4,
                ),
                num_parallel_calls=AUTO,
            )
            return pinned(ds.prefetch(AUTO).with_options(o))

        return build

    pipelines = {
        "reader eval": reader(data_dir, False),
        "reader train": reader(data_dir, True),
        "reader eval pixels": reader(pixels_dir, False),
        "reader train pixels": reader(pixels_dir, True),
        "reader train @64 shards": reader(many_dir, True),
        "reader train pixels @64 shards": reader(many_pixels_dir, True),
        "idfd": idfd,
        "ceiling full decode+resize": ceiling("full"),
        "ceiling crop-decode+resize": ceiling("crop"),
        "ceiling DCT-1/2 decode+resize": ceiling("dct2"),
    }
    if small_side <= 256:
        pipelines["reader eval @max_side 256"] = reader(small_dir, False)
        pipelines["reader train @max_side 256"] = reader(small_dir, True)
    if args.only:
        keep = {k.strip() for k in args.only.split(",")}
        pipelines = {k: v for k, v in pipelines.items() if k in keep or k == "idfd"}

    def one_pass(ds) -> tuple[int, float]:
        # Timed to the last batch; the iterator is deleted outside the clock: in TF 2.21 that
        # teardown sometimes blocks ~2 s (seen for every pipeline here, idfd included), which
        # would dominate a 3 s pass.
        it = iter(ds)
        t0, c0 = time.perf_counter(), time.process_time()
        count = 0
        for batch in it:
            images = batch[0] if isinstance(batch, tuple) else batch
            count += int(images.shape[0])
        cpu[0] = time.process_time() - c0  # all threads of this process: load-robust cost
        secs = time.perf_counter() - t0
        del it
        return count, secs

    cpu = [0.0]

    import pipeline

    tree = os.path.dirname(os.path.dirname(os.path.abspath(pipeline.__file__)))
    print(f"corpus {n} images; reader from {tree}; {load_average()}", flush=True)
    built = {}
    for name, make in pipelines.items():  # build + warm-up pass (not timed)
        built[name] = make()
        one_pass(built[name])
    times: dict[str, list[float]] = {k: [] for k in built}
    cpus: dict[str, list[float]] = {k: [] for k in built}
    counts = {}
    for r in range(args.repeats):
        for name, ds in built.items():
            count, secs = one_pass(ds)
            counts[name] = count
            times[name].append(secs)
            cpus[name].append(cpu[0] / count * 1e6)
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {counts[k] / times[k][-1]:.0f}" for k in built)
            + f"; {load_average()}",
            flush=True,
        )
    ips = {k: counts[k] / median(v) for k, v in times.items()}
    ref = ips["idfd"]
    full = ips.get("ceiling full decode+resize", float("nan"))
    crop = ips.get("ceiling crop-decode+resize", float("nan"))
    rows = [
        [
            k,
            counts[k],
            f"{ips[k]:.0f}",
            f"{ips[k] / ref:.2f}",
            f"{ips[k] / full:.2f}",
            f"{ips[k] / crop:.2f}",
            f"{median(cpus[k]):.0f}",
        ]
        for k in built
    ]
    if small_side > 256:
        rows.append(
            [
                "reader @max_side 256",
                "-",
                "pending",
                "-",
                "-",
                f"(converter stored sides up to {small_side}: --max_side not applied yet)",
                "-",
            ]
        )
    table = print_table(
        f"Read, {n}-image corpus, {args.size}², batch {args.batch}, "
        f"{'threads ' + str(args.threads) if args.threads else 'all cores'}; median of "
        f"{args.repeats} ({load_average()})"
        + (f"; reader of {args.reader_tree}" if args.reader_tree else ""),
        [
            "pipeline",
            "images/pass",
            "img/s",
            "× idfd",
            "× full ceiling",
            "× crop ceiling",
            "CPU µs/img",
        ],
        rows,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "ips": ips,
                    "times": times,
                    "cpu_us_per_image": cpus,
                    "counts": counts,
                    "table": table,
                    "max_side_256_stored": small_side,
                },
                f,
                indent=1,
            )
    return 0


# One worker of a cluster: (images this worker delivered, seconds) for `steps` global batches.
_WORKER = """
import json, sys, time
import tensorflow as tf
from pipeline.reader import make_dataset
data_dir, batch, size, warmup, steps = sys.argv[1], *map(int, sys.argv[2:6])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
ds = make_dataset(data_dir, "train", batch, strategy=strategy, training=True,
                  image_size=(size, size), seed=1)
it = iter(ds)
def local_images(step):
    return sum(int(t.shape[0]) for t in strategy.experimental_local_results(step[0]))
for _ in range(warmup):
    local_images(next(it))
t0, c0 = time.perf_counter(), time.process_time()
images = sum(local_images(next(it)) for _ in range(steps))
print("RESULT " + json.dumps({"images": images, "secs": time.perf_counter() - t0,
                               "cpu": time.process_time() - c0}), flush=True)
"""


def _multiworker(args, data_dir: str) -> int:
    """Clusters of 1 and 2 workers on loopback: images/s per worker (a table)."""
    import socket
    import subprocess

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    rows = []
    for workers in (1, 2):
        ports = [free_port() for _ in range(workers)]
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
        procs = []
        for i in range(workers):
            env = dict(
                os.environ,
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                TF_CPP_MIN_LOG_LEVEL="2",
                CUDA_VISIBLE_DEVICES="",
                PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            )
            argv = [PY, "-c", _WORKER, data_dir, str(args.batch), str(args.size)]
            argv += [str(args.warmup_steps), str(args.steps)]
            procs.append(
                subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            )
        results = []
        try:
            for proc in procs:
                out, err = proc.communicate(timeout=900)
                lines = [ln for ln in out.decode().splitlines() if ln.startswith("RESULT ")]
                if proc.returncode or not lines:
                    raise SystemExit(f"worker failed ({proc.returncode}):\n{err.decode()[-2000:]}")
                results.append(json.loads(lines[-1][len("RESULT ") :]))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        per_worker = [r["images"] / r["secs"] for r in results]
        cpu_us = [r["cpu"] / r["images"] * 1e6 for r in results]
        rows.append(
            [
                workers,
                " / ".join(f"{v:.0f}" for v in per_worker),
                f"{sum(per_worker):.0f}",
                " / ".join(f"{v:.0f}" for v in cpu_us),
            ]
        )
        print(f"{workers} worker(s): {rows[-1][1]} img/s per worker; {load_average()}", flush=True)
    table = print_table(
        f"Multi-worker read, {args.num_images}-image corpus, {args.size}², global batch "
        f"{args.batch}, training, {args.steps} timed steps after {args.warmup_steps} "
        f"({load_average()})",
        ["workers", "img/s per worker", "img/s cluster", "CPU µs/img per worker"],
        rows,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "table": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
