"""Per-image CPU cost of each reader stage, one tf.data thread, on converted shards.

    python bench/ablations/read_stages.py --num_images 12000               # shards of bench/_work/out-w2-N
    python bench/ablations/read_stages.py --data_dir bench/_work/out-maxside256-12000

Each row adds one stage to the previous one (cumulative), so differences are stage costs:
read records -> parse -> decode (full) -> resize 224 bilinear (float32) -> round+cast uint8 ->
batch 64. Also: the same with resize done in uint8-friendly 'area'/'nearest' methods and with
antialias off, to show what the float resize costs when the stored image is already small.
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
    ap.add_argument("--data_dir", default="")
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import tensorflow as tf

    from core import schema
    from pipeline.reader import dataset as reader
    from pipeline.reader import decode as reader_decode

    data_dir = args.data_dir or os.path.join(WORK, f"out-w2-{args.num_images}")
    _, shards = reader.split_files(data_dir, "train")
    spec = schema.feature_spec(keys=(schema.ENCODED, schema.LABEL))
    size = (224, 224)
    # Records in memory first, so file reads do not blur the per-stage costs.
    records = list(tf.data.TFRecordDataset([s.path for s in shards]).take(args.records))
    base = tf.data.Dataset.from_tensor_slices(tf.stack(records))

    def parse(r):
        return tf.io.parse_single_example(r, spec)[schema.ENCODED]

    stages = {
        "records in memory": lambda d: d,
        "+ parse": lambda d: d.map(parse),
        "+ decode_jpeg": lambda d: d.map(lambda r: tf.io.decode_jpeg(parse(r), channels=3)),
        "+ resize 224 bilinear (float32)": lambda d: d.map(
            lambda r: tf.image.resize(tf.io.decode_jpeg(parse(r), channels=3), size)
        ),
        "+ round + saturate_cast uint8": lambda d: d.map(
            lambda r: tf.saturate_cast(
                tf.round(tf.image.resize(tf.io.decode_jpeg(parse(r), channels=3), size)), tf.uint8
            )
        ),
        "+ batch 64": lambda d: d.map(
            lambda r: tf.saturate_cast(
                tf.round(tf.image.resize(tf.io.decode_jpeg(parse(r), channels=3), size)), tf.uint8
            )
        ).batch(64),
        "alt: resize nearest (uint8 in, uint8 out)": lambda d: d.map(
            lambda r: tf.image.resize(
                tf.io.decode_jpeg(parse(r), channels=3), size, method="nearest"
            )
        ).batch(64),
        "alt: reader's _decode_batch (eval, what make_dataset runs)": lambda d: d.batch(64).map(
            lambda r: reader_decode.decode_batch(eval_config(shards, size), r)[0]
        ),
        "alt: reader's _decode_example (eval)": lambda d: d.map(
            lambda r: reader_decode.decode_example(
                eval_config(shards, size),
                r,
                None,
            )
        ).batch(64),
    }
    opts = tf.data.Options()
    opts.threading.private_threadpool_size = 1
    opts.threading.max_intra_op_parallelism = 1
    opts.autotune.enabled = False
    rows, prev = [], 0.0
    for name, fn in stages.items():
        ds = fn(base).with_options(opts)
        for _ in ds:
            pass
        cpus = []
        for _ in range(args.repeats):
            c0 = time.process_time()
            for _ in ds:
                pass
            cpus.append((time.process_time() - c0) / len(records) * 1e6)
        us = median(cpus)
        delta = f"{us - prev:+.0f}" if not name.startswith("alt") else ""
        rows.append([name, f"{us:.0f}", delta])
        if not name.startswith("alt"):
            prev = us
    print_table(
        f"Reader stage costs, {len(records)} records of {os.path.basename(data_dir)}, "
        f"one thread, CPU µs/image (cumulative; {load_average()})",
        ["stages", "CPU µs/img", "Δ"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
