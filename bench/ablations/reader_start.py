"""A training job's start: a fresh process to its first batch, with and without AutoGraph.

    python bench/ablations/reader_start.py --repeats 5

Converts a small demo corpus once (`imgrec convert --no_analyze`, under bench/_work), then starts
fresh processes alternately that import the reader, call `make_dataset(..., training=True)` and
take one batch, printing wall and CPU seconds per phase and their medians. `autograph` runs the
same reader with `tf.autograph.experimental.do_not_convert` made an identity before the reader
is imported, so tf.data converts the reader's functions with AutoGraph, its default
(pipeline/reader/shares.py `traced_as_written`). `plain tf.data` is the script a user would write
instead (TFRecordDataset on the shards, shuffle, decode_jpeg, resize, batch; on all cores, as
tf.data runs), from the same import to its first batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from bench._common import WORK, corpus  # noqa: E402

_CHILD = r"""
import json, os, sys, time
t0, c0 = time.time(), time.process_time()
import tensorflow as tf
if sys.argv[2] == "autograph":
    tf.autograph.experimental.do_not_convert = lambda f=None: f
if sys.argv[2] == "plain tf.data":
    # The script a user writes instead: the shards, a shuffle, decode_jpeg, resize, batch.
    t1, c1 = time.time(), time.process_time()
    def parse(record):
        image = tf.io.parse_single_example(
            record, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})["image/encoded"]
        image = tf.image.resize(tf.io.decode_jpeg(image, channels=3), (224, 224))
        return tf.cast(image, tf.uint8)
    files = tf.io.gfile.glob(os.path.join(sys.argv[1], "train", "*.tfrecord"))
    ds = (tf.data.TFRecordDataset(files).shuffle(1024, seed=1)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(32).prefetch(tf.data.AUTOTUNE))
else:
    from pipeline.reader import make_dataset
    t1, c1 = time.time(), time.process_time()
    ds = make_dataset(sys.argv[1], "train", 32, training=True, image_size=(224, 224), seed=1)
t2, c2 = time.time(), time.process_time()
next(iter(ds))
t3, c3 = time.time(), time.process_time()
print(json.dumps({"import": [t1 - t0, c1 - c0], "make_dataset": [t2 - t1, c2 - c1],
                  "first_batch": [t3 - t2, c3 - c2], "total": [t3 - t0, c3 - c0]}))
"""


def _dataset() -> str:
    out = os.path.join(WORK, "reader-start-300")
    if os.path.exists(os.path.join(out, "dataset_info.json")):
        return out
    photos, _ = corpus(300, broken=False)  # bench/_common.py: built once, cached
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-m", "pipeline", "convert", "--input", f"{photos}/*/*",
                    "--output", out, "--no_analyze", "--no_report"],
                   check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data_dir = _dataset()
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    runs: dict[str, list[dict]] = {"as written": [], "autograph": [], "plain tf.data": []}
    for _ in range(args.repeats):
        for mode in runs:
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, data_dir, mode],
                cwd=ROOT, env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            times = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mode].append(times)
            print(mode, {k: f"{w:.2f}s/{c:.2f}cpu" for k, (w, c) in times.items()}, flush=True)
    print("\nmedians (wall s / CPU s):")
    for mode, rows in runs.items():
        cells = []
        for phase in ("import", "make_dataset", "first_batch", "total"):
            wall = statistics.median(r[phase][0] for r in rows)
            cpu = statistics.median(r[phase][1] for r in rows)
            cells.append(f"{phase} {wall:.2f}/{cpu:.2f}")
        print(f"  {mode:13s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
