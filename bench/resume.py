"""Resuming mid-epoch: time to the first batch at step 0 and at 90 % of an epoch, and the
training order's shuffle quality against a uniformly random permutation.

    python bench/resume.py                 # both parts
    python bench/resume.py --only quality  # the order only (no TensorFlow pipeline)

Seek: `make_dataset(..., training=True, start_step=N)` on shards written here (`--shards`
shards of `--records` small JPEGs each, local disk), first batch timed from the call in a
fresh iterator, `--repeats` rounds alternating step 0 and 90 %, median.

Quality, over one epoch of an ImageNet-like layout (1024 shards of 1251 records, 1000
classes, global batch 256, windows of 2,384 records: 256 MB of 110 KB photos), for two ways records sit in shards:
  imgrec's shards   a record's shard is a hash of its key (classes mixed in every shard)
  worst case        each shard holds one class (a dataset sorted by class, then cut)
and these orders: the reader's epoch order (pipeline/reader/epoch_order.py) with its
default 32 shards at once, with 16 or 64, with a 4x window; the reader before it (16 shards
interleaved record by record, then a shuffle buffer of the same records, simulated); a
uniform random permutation. Figures: distinct classes per global
batch (mean), and how far each shard's records spread over the epoch (the standard deviation
of their positions / epoch length, mean over shards: 0.289 for a uniform spread).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The ImageNet-like layout of the quality figures (see the docstring).
_SHARDS, _PER_SHARD, _CLASSES, _BATCH, _LANES, _WINDOW = 1024, 1251, 1000, 256, 16, 2384


def _write_split(root: str, shards: int, records: int) -> str:
    """`shards` shards of `records` 64x64 JPEGs and their dataset_info.json."""
    import tensorflow as tf
    from PIL import Image

    from core import schema

    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "train"), exist_ok=True)
    listed, index = [], 0
    for s in range(shards):
        rel = schema.shard_name("train", s, shards, "")
        with tf.io.TFRecordWriter(os.path.join(root, rel)) as writer:
            for _ in range(records):
                out = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (64, 64, 3), np.uint8)).save(out, "JPEG")
                writer.write(
                    schema.make_example(
                        encoded=out.getvalue(), image_format="jpeg", height=64, width=64,
                        channels=3, label=index % 10, label_text=str(index % 10),
                        filename=f"mem://{index}", sha256="",
                    )
                )  # fmt: skip
                index += 1
        size = os.path.getsize(os.path.join(root, rel))
        listed.append({"file": rel, "num_examples": records, "num_bytes": size, "sha256": ""})
    info = {
        "schema_version": schema.SCHEMA_VERSION,
        "label_names": [str(i) for i in range(10)],
        "splits": {"train": {"num_examples": index, "shards": listed,
                             "num_bytes": sum(x["num_bytes"] for x in listed)}},
    }  # fmt: skip
    with open(os.path.join(root, schema.DATASET_INFO), "w") as f:
        json.dump(info, f)
    return root


def seek_times(shards: int, records: int, repeats: int, batch: int) -> dict:
    """Median seconds from make_dataset to the first batch, at step 0 and at 90 %."""
    from pipeline.reader import make_dataset, steps_per_epoch

    root = _write_split(tempfile.mkdtemp(prefix="imgrec-bench-resume-"), shards, records)
    late = int(0.9 * steps_per_epoch(root, "train", batch))
    times: dict[str, list[float]] = {"step 0": [], f"step {late} (90 %)": []}
    for _ in range(repeats):
        for name, step in zip(times, (0, late), strict=True):
            t0 = time.perf_counter()
            ds = make_dataset(root, "train", batch, training=True, image_size=64, seed=1,
                              start_step=step)  # fmt: skip
            next(iter(ds))
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def _old_reader_order(counts: list[int], rng: np.random.Generator, window: int) -> np.ndarray:
    """The reader before the epoch order: shards in a random order, 16 interleaved record by
    record (a finished shard's slot takes the next shard), then a shuffle buffer."""
    firsts = np.cumsum([0, *counts[:-1]])
    order = list(rng.permutation(len(counts)))
    slots = [[s, 0] for s in order[:_LANES]]
    queue = order[_LANES:]
    merged = []
    while slots:
        for slot in list(slots):
            shard, taken = slot
            merged.append(firsts[shard] + taken)
            slot[1] += 1
            if slot[1] == counts[shard]:
                if queue:
                    slot[:] = [queue.pop(0), 0]
                else:
                    slots.remove(slot)
    buffer, out = [], []
    for record in merged:  # tf.data's shuffle: a full buffer hands out a random slot's record
        if len(buffer) < window:
            buffer.append(record)
            continue
        slot = int(rng.integers(window))
        out.append(buffer[slot])
        buffer[slot] = record
    rng.shuffle(buffer)
    return np.array(out + buffer)


def _figures(order: np.ndarray, labels: np.ndarray, shard_of: np.ndarray) -> tuple[float, float]:
    """(distinct classes per global batch, mean spread of a shard's records)."""
    steps = len(order) // _BATCH
    batches = labels[order[: steps * _BATCH]].reshape(steps, _BATCH)
    classes = float(np.mean([len(np.unique(b)) for b in batches]))
    position = np.empty(len(order))
    position[order] = np.arange(len(order)) / len(order)
    spread = float(np.mean([position[shard_of == s].std() for s in range(_SHARDS)]))
    return classes, spread


def quality() -> list[list]:
    from pipeline.reader.epoch_order import EpochOrder

    counts = [_PER_SHARD] * _SHARDS
    n = sum(counts)
    shard_of = np.repeat(np.arange(_SHARDS), counts)
    rng = np.random.default_rng(0)
    layouts = {
        "imgrec's shards": rng.integers(0, _CLASSES, n),
        "worst case": shard_of * _CLASSES // _SHARDS,
    }
    orders = {
        "new (32 at once)": np.array(
            EpochOrder(tuple(counts), seed=1, lanes=32, window=_WINDOW).epoch_records(0)
        ),
        "reader before": _old_reader_order(counts, rng, _WINDOW),
        # What buys more: shards read at once (shards_at_once=), a larger window
        # (shuffle_buffer_mb=).
        "new, 16 at once": np.array(
            EpochOrder(tuple(counts), seed=1, lanes=16, window=_WINDOW).epoch_records(0)
        ),
        "new, 64 at once": np.array(
            EpochOrder(tuple(counts), seed=1, lanes=64, window=_WINDOW).epoch_records(0)
        ),
        "new, 4x window": np.array(
            EpochOrder(tuple(counts), seed=1, lanes=32, window=4 * _WINDOW).epoch_records(0)
        ),
        "uniform permutation": rng.permutation(n),
    }
    rows = []
    for layout, labels in layouts.items():
        for name, order in orders.items():
            classes, spread = _figures(order, labels, shard_of)
            rows.append([layout, name, f"{classes:.1f}", f"{spread:.3f}"])
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", choices=["seek", "quality"], default=None)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if args.only != "quality":
        for name, secs in seek_times(args.shards, args.records, args.repeats, args.batch).items():
            print(f"first batch at {name}: {secs:.2f} s")
    if args.only != "seek":
        print(f"{'shards':16} {'order':20} {'classes/batch':>13} {'shard spread':>12}")
        for row in quality():
            print(f"{row[0]:16} {row[1]:20} {row[2]:>13} {row[3]:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
