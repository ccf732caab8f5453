"""Resuming mid-epoch: time to the first batch at step 0 and at 90 % of an epoch, and the
training order's shuffle quality against a uniformly random permutation.

    python bench/resume.py                 # both parts
    python bench/resume.py --only quality  # the order only (no TensorFlow pipeline)
    python bench/resume.py --only seek --store both  # the seek on local disk and on a bucket

Seek: `make_dataset(..., training=True, start_step=N)` on shards written here (`--shards`
shards of `--records` small JPEGs each), first batch timed from the call in a fresh iterator,
`--repeats` rounds alternating step 0 and 90 %, median. `--store gcs` puts the same shards in
a bucket of the tests' GCS emulator (tests/servers.py: its relay, and the HTTPS front that
TensorFlow's GCS filesystem reads through, with TensorFlow's default read buffer) and times
two ways to read them: TensorFlow reading gs:// itself (make_dataset's default), and through
a fresh shard cache each start (`cache_dir=`). Each start also says what it fetched by its
first batch: the requests the emulator saw (with the cache: shards and bytes in the cache).

Quality, over one epoch of an ImageNet-like layout (1024 shards of 1251 records, 1000
classes, global batch 256), for two ways records sit in shards:
  imgrec's shards   a record's shard is a hash of its key (classes mixed in every shard)
  worst case        each shard holds one class (a dataset sorted by class, then cut)
and these orders: the reader's default (the epoch order in 32 partitions,
pipeline/reader/partitions.py: each global batch 8 records of each, one shard of each read at
once), and in 64 (`shards_at_once=64`); the epoch order in one partition (pipeline/reader/epoch_order.py: 32 shards at once,
a global batch the merge's next records, the default before partitions), with 16 or 64 at
once, with a window of 2,384 records (`shuffle_buffer_mb=256` of 110 KB photos) or 4x that; the reader
before it (16 shards interleaved record by record, then a 2,384-record shuffle buffer,
simulated); a uniform random permutation. Figures: distinct classes per global
batch (mean), and how far each shard's records spread over the epoch (the standard deviation
of their positions / epoch length, mean over shards: 0.289 for a uniform spread).

Then a small split, read in pieces (pipeline/reader/pieces.py): 60,000 records of 110 KB in 8
shards, 100 classes, classes mixed (imgrec's) or sorted, global batch 256; orders: the default
(pieces in 32 partitions), pieces in one partition (8 read at once), whole shards with the
2,384-record window (a split with no shard markers), the reader before, uniform. One more figure: of the record pairs sharing a
global batch in epoch 0, the share that share one again in epoch 1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The ImageNet-like layout of the quality figures (see the docstring).
_SHARDS, _PER_SHARD, _CLASSES, _BATCH, _LANES, _WINDOW = 1024, 1251, 1000, 256, 16, 2384
# The small split's layout: records, classes, shards (fewer than the 32 read at once).
_SMALL, _SMALL_CLASSES, _SMALL_SHARDS = 60_000, 100, 8
_RECORD_BYTES = 110_000  # the layouts' photos: 2,384 of them make the 256 MB window


def _write_split(root: str, shards: int, records: int) -> str:
    """`shards` shards of `records` 64x64 JPEGs, their markers and dataset_info.json."""
    import tensorflow as tf
    from PIL import Image

    from core import schema
    from core.dali_index import RECORD_OVERHEAD

    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "train"), exist_ok=True)
    listed, index = [], 0
    for s in range(shards):
        rel = schema.shard_name("train", s, shards, "")
        offsets = [0]
        with tf.io.TFRecordWriter(os.path.join(root, rel)) as writer:
            for _ in range(records):
                out = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (64, 64, 3), np.uint8)).save(out, "JPEG")
                example = schema.make_example(
                    encoded=out.getvalue(), image_format="jpeg", height=64, width=64,
                    channels=3, label=index % 10, label_text=str(index % 10),
                    filename=f"mem://{index}", sha256="",
                )  # fmt: skip
                writer.write(example)
                offsets.append(offsets[-1] + len(example) + RECORD_OVERHEAD)
                index += 1
        shard = {"file": rel, "num_examples": records, "num_bytes": offsets[-1], "sha256": ""}
        listed.append(shard)
        _write_marker(root, shard, s, shards, offsets[:-1])
    info = {
        "schema_version": schema.SCHEMA_VERSION,
        "label_names": [str(i) for i in range(10)],
        "splits": {"train": {"num_examples": index, "shards": listed,
                             "num_bytes": sum(x["num_bytes"] for x in listed)}},
    }  # fmt: skip
    with open(os.path.join(root, schema.DATASET_INFO), "w") as f:
        json.dump(info, f)
    return root


def _write_marker(root: str, shard: dict, index: int, shards: int, offsets: list[int]) -> None:
    """The shard's marker as the converter writes it: the reader seeks with its offsets."""
    from core import shard_markers

    rows = [shard_markers.RecordLocation("", "", "", "", 0, o, 0, "jpeg", "") for o in offsets]
    path = os.path.join(root, shard_markers.marker_name("train", index, shards))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({shard_markers.SHARD_KEY: shard, shard_markers.RECORDS_KEY: rows}, f)


def _first_batch(data_dir: str, batch: int, step: int, cache_dir: str | None, **options) -> float:
    """Seconds from make_dataset to the first batch of a fresh iterator."""
    from pipeline.reader import make_dataset

    t0 = time.perf_counter()
    ds = make_dataset(data_dir, "train", batch, training=True, image_size=64, seed=1,
                      start_step=step, cache_dir=cache_dir, **options)  # fmt: skip
    next(iter(ds))
    return time.perf_counter() - t0


def seek_times(
    data_dir: str,
    repeats: int,
    batch: int,
    cached: bool = False,
    fetched: Callable[[str | None], str] | None = None,
    settle: Callable[[], None] | None = None,
    **options,
) -> dict[str, tuple[float, str]]:
    """Median seconds from make_dataset to the first batch, at step 0 and at 90 %, each with
    what the last start fetched (`fetched(cache_dir)`, read at its first batch).

    `cached`: each start gets a fresh, empty `cache_dir`. `settle()` runs before each start,
    so reads left running behind the last first batch do not land in this one. `options` go
    to make_dataset.
    """
    from pipeline.reader import steps_per_epoch

    late = int(0.9 * steps_per_epoch(data_dir, "train", batch))
    times: dict[str, list[float]] = {"step 0": [], f"step {late} (90 %)": []}
    notes = dict.fromkeys(times, "")
    for _ in range(repeats):
        for name, step in zip(times, (0, late), strict=True):
            if settle is not None:
                settle()
            cache_dir = tempfile.mkdtemp(prefix="imgrec-bench-cache-") if cached else None
            times[name].append(_first_batch(data_dir, batch, step, cache_dir, **options))
            notes[name] = fetched(cache_dir) if fetched else ""
            if cache_dir is not None:
                shutil.rmtree(cache_dir, ignore_errors=True)
    return {name: (statistics.median(v), notes[name]) for name, v in times.items()}


@contextlib.contextmanager
def _bucket(root: str) -> Iterator[tuple[str, object]]:
    """The shards under `root` in a bucket of the tests' GCS emulator, TensorFlow's GCS
    filesystem pointed at it; yields (the dataset's gs:// URI, the emulator's relay)."""
    from bench.gcs_convert import _server
    from tests.servers import GoogleApisFront, put_corpus, tensorflow_gcs_env

    with (
        tempfile.TemporaryDirectory(prefix="imgrec-bench-gcs-") as tmp,
        _server(Path(tmp)) as store,
    ):
        front = GoogleApisFront(store.relay.port, Path(tmp))
        try:
            env = tensorflow_gcs_env.__wrapped__(front)  # the fixture's body, outside pytest
            # A user's reader has TensorFlow's default read buffer; the tests shrink it.
            env.pop("GCS_READ_CACHE_BLOCK_SIZE_MB", None)
            os.environ.update(env)  # before TensorFlow's first gs:// call reads them
            bucket = store.new_bucket("resume")
            put_corpus(store, bucket, root, "seek/")
            yield store.uri(bucket, "seek"), store.relay
        finally:
            front.close()


def _bucket_seek(
    root: str, repeats: int, batch: int, **options
) -> dict[str, dict[str, tuple[float, str]]]:
    """seek_times on the bucket: TensorFlow reading gs:// itself, and through the shard cache."""
    with _bucket(root) as (data_dir, relay):
        seen = [0]

        def requests(cache_dir: str | None) -> str:
            new, seen[0] = relay.requests[seen[0] :], len(relay.requests)
            # TensorFlow reads an object's bytes at /BUCKET/OBJECT, metadata at /storage/v1/.
            reads = sum(not target.startswith("/storage/") for _, target in new)
            note = f"{len(new)} requests ({reads} object reads)"
            if cache_dir is not None:
                shards = [p for p in Path(cache_dir).rglob("*.verified")]
                size = sum(p.with_suffix("").stat().st_size for p in shards)
                note += f", {len(shards)} shards / {size / 1e6:.1f} MB in the cache"
            return note

        def settle() -> None:
            # Quiet for a second: the last start's background reads have ended.
            while True:
                before = len(relay.requests)
                time.sleep(1.0)
                if len(relay.requests) == before:
                    seen[0] = before
                    return

        common = dict(repeats=repeats, batch=batch, fetched=requests, settle=settle, **options)
        return {
            "gs:// (TensorFlow reads)": seek_times(data_dir, **common),
            "gs:// via cache_dir": seek_times(data_dir, cached=True, **common),
        }


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
    position = np.full(len(labels), np.nan)  # an order may leave the last partial batch out
    position[order] = np.arange(len(order)) / len(order)
    spread = float(np.mean([np.nanstd(position[shard_of == s]) for s in np.unique(shard_of)]))
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

    def new(lanes: int, window: int) -> np.ndarray:
        return np.array(
            EpochOrder(
                tuple(counts), seed=1, lanes=lanes, window=window, permute=window > _BATCH
            ).epoch_records(0)
        )

    orders = {
        "new (32 at once)": new(32, _BATCH),
        "32 partitions (default)": _partitioned(counts, 32, _BATCH),
        "64 partitions (shards_at_once=64)": _partitioned(counts, 64, _BATCH, at_once=64),
        "reader before": _old_reader_order(counts, rng, _WINDOW),
        # What buys more: shards read at once (shards_at_once=), a larger window
        # (shuffle_buffer_mb=).
        "new, 16 at once": new(16, _BATCH),
        "new, 64 at once": new(64, _BATCH),
        "new, 2,384-record window": new(32, _WINDOW),
        "new, 4x that window": new(32, 4 * _WINDOW),
        "uniform permutation": rng.permutation(n),
    }
    rows = []
    for layout, labels in layouts.items():
        for name, order in orders.items():
            classes, spread = _figures(order, labels, shard_of)
            rows.append([layout, name, f"{classes:.1f}", f"{spread:.3f}"])
    return rows


def small_split_quality() -> list[list]:
    """The small split's rows (see the docstring): as quality(), plus the share of record
    pairs batched together in epoch 0 that are batched together again in epoch 1."""
    from pipeline.reader.epoch_order import EpochOrder
    from pipeline.reader.pieces import cut_shards

    counts = [_SMALL // _SMALL_SHARDS] * _SMALL_SHARDS
    shard_of = np.repeat(np.arange(_SMALL_SHARDS), counts)
    rng = np.random.default_rng(0)
    layouts = {
        "imgrec's shards": rng.integers(0, _SMALL_CLASSES, _SMALL),
        "sorted by class": np.arange(_SMALL) * _SMALL_CLASSES // _SMALL,
    }
    offsets = [[r * _RECORD_BYTES for r in range(c + 1)] for c in counts]
    pieces = cut_shards(counts, offsets, _SMALL * _RECORD_BYTES, _SMALL_SHARDS)

    def epochs(units, window: int) -> list[np.ndarray]:
        order = EpochOrder(
            tuple(units), seed=1, lanes=_SMALL_SHARDS, window=window, permute=window > _BATCH
        )
        return [np.array(order.epoch_records(e)) for e in (0, 1)]

    orders = {
        "pieces, 32 partitions (default)": [
            _partitioned(pieces.count, _SMALL_SHARDS, _BATCH, e) for e in (0, 1)
        ],
        "pieces, one partition": epochs(pieces.count, _BATCH),
        "whole shards, 2,384-record window": epochs(counts, _WINDOW),
        "reader before": [_old_reader_order(counts, rng, _WINDOW) for _ in (0, 1)],
        "uniform permutation": [rng.permutation(_SMALL) for _ in (0, 1)],
    }
    rows = []
    for layout, labels in layouts.items():
        for name, (first, second) in orders.items():
            classes, spread = _figures(first, labels, shard_of)
            again = _pairs_again(first, second)
            rows.append([layout, name, f"{classes:.1f}", f"{spread:.3f}", f"{again:.1%}"])
    return rows


def _partitioned(units, lanes: int, window: int, epoch: int = 0, at_once: int = 32) -> np.ndarray:
    """The reader's default order: `units` (shards or pieces, read `lanes` at once before
    partitions) in the default number of partitions (pipeline/reader/partitions.py)."""
    from pipeline.reader.epoch_order import EpochOrder
    from pipeline.reader.partitions import default_partitions, partition
    from pipeline.reader.pieces import Pieces

    n = len(units)
    template = EpochOrder(tuple(units), seed=1, lanes=lanes, window=window, permute=window > _BATCH)
    pieces = Pieces(tuple(range(n)), (0,) * n, tuple(units), (0,) * n, (0,) * n, lanes, True)
    count = default_partitions(n, _BATCH, at_once)
    plan = partition(template, pieces, _BATCH, count, -(-window // _BATCH))
    return np.array(plan.epoch_records(epoch))


def _pairs_again(first: np.ndarray, second: np.ndarray) -> float:
    """Of the record pairs in one global batch of epoch `first`, the share also in one global
    batch of epoch `second` (a uniform permutation: about batch / records)."""
    n = int(max(first.max(), second.max())) + 1
    batch_of = -1 - np.arange(n)  # a record left out of `first` shares no batch there
    batch_of[first] = np.arange(len(first)) // _BATCH
    steps = len(second) // _BATCH
    again = 0
    for b in batch_of[second[: steps * _BATCH]].reshape(steps, _BATCH):
        k = np.bincount(b[b >= 0])
        again += int((k * (k - 1) // 2).sum())
    return again / (steps * _BATCH * (_BATCH - 1) // 2)


def _print_seek(args: argparse.Namespace) -> None:
    root = _write_split(tempfile.mkdtemp(prefix="imgrec-bench-resume-"), args.shards, args.records)
    options = (
        {} if args.shuffle_buffer_mb is None else {"shuffle_buffer_mb": args.shuffle_buffer_mb}
    )
    results = {}
    if args.store in ("local", "both"):
        results["local disk"] = seek_times(root, args.repeats, args.batch, **options)
    if args.store in ("gcs", "both"):
        results.update(_bucket_seek(root, args.repeats, args.batch, **options))
    for store, rows in results.items():
        (first, _), (late, _) = rows.values()
        print(f"{store} (90 % / step 0: {late / first:.2f}x)")
        for name, (secs, note) in rows.items():
            print(f"  first batch at {name}: {secs:.2f} s" + (f"; {note}" if note else ""))
    shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", choices=["seek", "quality"], default=None)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--records", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--store",
        choices=["local", "gcs", "both"],
        default="local",
        help="seek: where the shards are (gcs: the tests' GCS emulator)",
    )
    ap.add_argument("--shuffle_buffer_mb", type=float, default=None,
                    help="seek: make_dataset's window (default: the reader's, which holds "
                    "the whole split of these small records: both starts read it all)")  # fmt: skip
    args = ap.parse_args(argv)
    if args.only != "quality":
        _print_seek(args)
    if args.only != "seek":
        print(f"{'shards':16} {'order':26} {'classes/batch':>13} {'shard spread':>12}")
        for row in quality():
            print(f"{row[0]:16} {row[1]:26} {row[2]:>13} {row[3]:>12}")
        print(f"\n{'small split':16} {'order':34} {'classes/batch':>13} {'shard spread':>12} "
              f"{'pairs again':>11}")  # fmt: skip
        for row in small_split_quality():
            print(f"{row[0]:16} {row[1]:34} {row[2]:>13} {row[3]:>12} {row[4]:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
