"""Where the reader's time goes: make_dataset vs the same pipeline with one stage swapped at a time.

    python bench/ablations/read_ablation.py --num_images 12000

Uses the shards bench/read.py (or bench/convert.py) converted into bench/_work/out-w2-N.
Each row changes one thing relative to the previous reference, same process, round-robin,
median of --repeats passes (eval mode, 224², batch 64, all cores):
  plain      TFRecordDataset(files) -> map(parse, full decode_jpeg, resize) -> batch -> prefetch
  +decode    plain reading, but the reader's own _decode_example (crop window, fused decode)
  +count     the reader's _read_shard (ignore_errors + scan/Assert count check) + _decode_example
  reader     make_dataset(training=False) as shipped
  reader nd  make_dataset with options.deterministic = False
  (and: no intra-op cap, training=True, eval with crop_fraction=1)
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench._common import WORK, eval_config, load_average, median, print_table  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data_dir", default="")
    args = ap.parse_args(argv)

    import tensorflow as tf

    from core import schema
    from pipeline.reader import dataset as reader
    from pipeline.reader import decode as reader_decode

    data_dir = args.data_dir or os.path.join(WORK, f"out-w2-{args.num_images}")
    if not os.path.exists(os.path.join(data_dir, "dataset_info.json")):
        raise SystemExit(f"{data_dir}: run bench/read.py --num_images {args.num_images} first")
    _, shards = reader.split_files(data_dir, "train")
    paths = [s.path for s in shards]
    size, batch, AUTO = (224, 224), 64, tf.data.AUTOTUNE
    ds0 = reader.make_dataset(data_dir, "train", batch, training=False, image_size=size)
    config = eval_config(shards, size, batch)
    spec = schema.feature_spec(keys=(schema.ENCODED, schema.LABEL))

    def plain_decode(r):
        f = tf.io.parse_single_example(r, spec)
        img = tf.image.resize(tf.io.decode_jpeg(f[schema.ENCODED], channels=3), size)
        return tf.saturate_cast(tf.round(img), tf.uint8), f[schema.LABEL]

    def finish(ds):
        o = tf.data.Options()
        o.threading.max_intra_op_parallelism = 1
        return ds.batch(batch).prefetch(AUTO).with_options(o)

    expected = {s.path: s.num_examples for s in shards}
    files3 = tf.data.Dataset.from_tensor_slices(
        (paths, [""] * len(paths), tf.constant([expected[p] for p in paths], tf.int64))
    )

    def nd(ds):
        o = tf.data.Options()
        o.deterministic = False
        return ds.with_options(o)

    def _intra(ds):
        o = tf.data.Options()
        o.threading.max_intra_op_parallelism = 0
        return ds.with_options(o)

    variants = {
        "plain TFRecordDataset + full decode": lambda: finish(
            tf.data.TFRecordDataset(paths, buffer_size=8 << 20).map(plain_decode, AUTO)
        ),
        "+ reader _decode_example": lambda: finish(
            tf.data.TFRecordDataset(paths, buffer_size=8 << 20).map(
                lambda r: reader_decode.decode_example(config, r, None), AUTO
            )
        ),
        "+ reader _read_shard (count check)": lambda: finish(
            files3.interleave(
                lambda p, c, e: reader._read_shard(p, c, e, True),
                cycle_length=min(16, len(paths)),
                num_parallel_calls=AUTO,
            ).map(lambda r: reader_decode.decode_example(config, r, None), AUTO)
        ),
        "_read_shard without count check": lambda: finish(
            files3.interleave(
                lambda p, c, e: reader._read_shard(p, c, e, False),
                cycle_length=min(16, len(paths)),
                num_parallel_calls=AUTO,
            ).map(lambda r: reader_decode.decode_example(config, r, None), AUTO)
        ),
        "make_dataset(training=False)": lambda: reader.make_dataset(
            data_dir, "train", batch, training=False, image_size=size
        ),
        "make_dataset, deterministic=False": lambda: nd(
            reader.make_dataset(data_dir, "train", batch, training=False, image_size=size)
        ),
        "make_dataset without max_intra_op=1": lambda: _intra(
            reader.make_dataset(data_dir, "train", batch, training=False, image_size=size)
        ),
        "make_dataset(training=True, repeat=False)": lambda: reader.make_dataset(
            data_dir, "train", batch, training=True, image_size=size, repeat=False
        ),
        "make_dataset(training=False, deterministic=True, crop_fraction=1)": lambda: (
            reader.make_dataset(
                data_dir, "train", batch, training=False, image_size=size, crop_fraction=1.0
            )
        ),
    }
    del ds0

    cpu = {}

    def one_pass(ds):
        it = iter(ds)  # deleted outside the clock (TF's iterator teardown can block ~2 s)
        t0, c0, n = time.perf_counter(), time.process_time(), 0
        for b in it:
            n += int(b[0].shape[0])
        cpu.setdefault(id(ds), []).append((time.process_time() - c0) / n * 1e6)
        secs = time.perf_counter() - t0
        del it
        return n, secs

    built = {k: v() for k, v in variants.items()}
    for ds in built.values():
        one_pass(ds)
    times = {k: [] for k in built}
    counts = {}
    for _ in range(args.repeats):
        for k, ds in built.items():
            counts[k], t = one_pass(ds)
            times[k].append(t)
    ips = {k: counts[k] / median(v) for k, v in times.items()}
    ref = ips["plain TFRecordDataset + full decode"]
    print_table(
        f"Reader ablation, {len(paths)} shard(s), {counts[next(iter(counts))]} images; "
        f"median of {args.repeats}; {load_average()}",
        ["variant", "img/s", "× plain", "CPU µs/img"],
        [
            [k, f"{v:.0f}", f"{v / ref:.2f}", f"{median(cpu[id(built[k])][1:]):.0f}"]
            for k, v in ips.items()
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
