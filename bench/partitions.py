"""Training on N workers: the bytes each worker's input pipeline reads in one epoch, against
the split's bytes, with the epoch order in partitions (the default) and in one partition
(`Order(partitions=1)`: the reader before partitions, every worker reading every record).

    python bench/partitions.py                       # N = 1, 2, 4; 64 shards of 300 records
    python bench/partitions.py --workers 1 2 --repeats 4      # the orders alternated

Each worker is a fresh process that builds worker w of N's input pipeline
(`make_dataset(..., strategy=tf.distribute.InputContext(N, w, N), training=True)`, what each
host of a MultiWorkerMirroredStrategy cluster builds) and reads one epoch of it
(`Order(repeat=False)`); the workers run one after the other on this machine, reading local
disk. Bytes: `rchar` of /proc/self/io (bytes the process asked the kernel for, page cache hits
included) from the first batch's request to the epoch's end; the split's shards are JPEGs of
random pixels written here (bench/resume.py's, with the converter's shard markers). Printed: the
most any worker read, and by how many shards' bytes that exceeds 1/N of the split; the median
worker's seconds from its iterator's creation to its first batch, and its records per second
after that (its own records), medians over `--repeats` rounds (the orders alternated).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def _worker(data_dir: str, workers: int, worker: int, batch: int, partitions: int | None) -> dict:
    """One worker's epoch: bytes read, records, seconds."""
    import tensorflow as tf

    from pipeline.reader import Order, make_dataset

    context = tf.distribute.InputContext(workers, worker, workers)
    ds = make_dataset(data_dir, "train", batch, strategy=context, training=True, image_size=64,
                      seed=1, order=Order(repeat=False, partitions=partitions))  # fmt: skip
    before, t0 = _rchar(), time.perf_counter()
    batches = iter(ds)
    records = int(next(batches)[1].shape[0])
    t1 = time.perf_counter()
    for _, labels in batches:
        records += int(labels.shape[0])
    seconds = time.perf_counter() - t1
    return {"bytes": _rchar() - before, "records": records, "seconds": seconds, "first": t1 - t0}


def _run_worker(data_dir: str, workers: int, worker: int, batch: int, partitions) -> dict:
    args = [data_dir, str(workers), str(worker), str(batch), json.dumps(partitions)]
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument(
        "--batch", type=int, default=96, help="global batch (96: partitions cut shards)"
    )
    ap.add_argument("--repeats", type=int, default=1, help="rounds, the orders alternated")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        data_dir, workers, worker, batch, partitions = args.worker
        print(json.dumps(_worker(data_dir, int(workers), int(worker), int(batch),
                                 json.loads(partitions))))  # fmt: skip
        return 0
    from bench.resume import _write_split

    root = _write_split(tempfile.mkdtemp(prefix="imgrec-bench-partitions-"), args.shards,
                        args.records)  # fmt: skip
    with open(os.path.join(root, "dataset_info.json")) as f:
        split = json.load(f)["splits"]["train"]
    split_bytes = split["num_bytes"]
    shard_bytes = split_bytes / args.shards
    print(f"split: {split['num_examples']} records, {split_bytes / 2**20:.1f} MB in "
          f"{args.shards} shards; global batch {args.batch}")  # fmt: skip
    print(f"{'order':24} {'N':>2} {'bytes read / split bytes':>24} {'1/N':>5} "
          f"{'more than 1/N, in shards':>24} {'first batch s':>13} "
          f"{'records/s per worker':>21}")  # fmt: skip
    orders = {"partitions (default)": None, "one partition (before)": 1}
    for workers in args.workers:
        runs: dict[str, list[list[dict]]] = {name: [] for name in orders}
        for round_ in range(args.repeats):  # A B, then B A: neither order always goes first
            for name in list(orders)[:: -1 if round_ % 2 else 1]:
                part = orders[name]
                runs[name].append([_run_worker(root, workers, w, args.batch, part)
                                   for w in range(workers)])  # fmt: skip
        for name, rounds in runs.items():
            most = max(r["bytes"] for r in rounds[0])
            extra = (most - split_bytes / workers) / shard_bytes
            rate = statistics.median(r["records"] / r["seconds"] for rs in rounds for r in rs)
            first = statistics.median(r["first"] for rs in rounds for r in rs)
            print(f"{name:24} {workers:>2} {most / split_bytes:>24.3f} {1 / workers:>5.3f} "
                  f"{extra:>24.1f} {first:>13.2f} {rate:>21.0f}")  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
