"""The reader's crop + resize step alone: TensorFlow's ways to turn a raw crop into 224² uint8.

    python bench/ablations/read_resize.py                 # the table in docs/storage_modes.md
    python bench/ablations/read_resize.py --rounds 3

One thread (intra/inter-op 1), a batch of 64 raw-pixel images of 256x205 (what `--store pixels
--max_side 256` stores for a 500x400 photo), evaluation centre crop (179x179) to 224x224, each
variant inside `tf.map_fn` as the reader runs it; CPU µs per image, median of --rounds. The
pixel difference to the reader's way ("slice + float resize") is shown too (the box-based
variants sample outside the crop at its border, from the neighbouring pixels: random pixels here,
so the border differs a lot; inside it agrees within 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench._common import load_average, median, print_table  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    from pipeline.reader.decode import resize_to_output

    tf.get_logger().setLevel("ERROR")  # one tf.function per variant: retracing is intended
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    height, width, out = 256, 205, 224
    images = tf.constant(rng.integers(0, 256, (64, height, width, 3), dtype=np.uint8))
    side = round(min(height, width) * 0.875)
    top, left = (height - side) // 2, (width - side) // 2
    exact = tf.constant(rng.integers(0, 256, (64, out, out, 3), dtype=np.uint8))

    def crop(x):
        return tf.slice(x, [top, left, 0], [side, side, 3])

    def box():  # crop_and_resize box emulating half-pixel centres
        scale = side / out
        y0, x0 = top + 0.5 * scale - 0.5, left + 0.5 * scale - 0.5
        y1, x1 = y0 + scale * (out - 1), x0 + scale * (out - 1)
        return tf.constant([[y0 / (height - 1), x0 / (width - 1), y1 / (height - 1),
                             x1 / (width - 1)]], tf.float32)  # fmt: skip

    def crop_and_resize(x):
        y = tf.image.crop_and_resize(x[None], box(), [0], (out, out))[0]
        return tf.cast(y + 0.5, tf.uint8)

    def scale_and_translate(x):
        y = tf.raw_ops.ScaleAndTranslate(
            images=x[None],
            size=[out, out],
            scale=tf.constant([out / side, out / side]),
            translation=tf.constant([-top * out / side, -left * out / side]),
            kernel_type="triangle",
            antialias=False,
        )[0]
        return tf.cast(y + 0.5, tf.uint8)

    def uint8_resize(x):
        return tf.cast(tf.image.resize(crop(x), (out, out)) + 0.5, tf.uint8)

    variants = {
        "slice + float resize (the reader)": (
            lambda x: resize_to_output(crop(x), (out, out)),
            images,
        ),
        "crop_and_resize, per image, uint8 in": (crop_and_resize, images),
        "ScaleAndTranslate (crop in the resize)": (scale_and_translate, images),
        "slice + resize of the uint8 crop": (uint8_resize, images),
        "224x224 crop: resize at scale 1": (lambda x: resize_to_output(x, (out, out)), exact),
        "224x224 crop: resize skipped (the reader)": (lambda x: tf.identity(x), exact),
    }
    spec = tf.TensorSpec((out, out, 3), tf.uint8)

    def compile_(fn):
        return tf.function(
            lambda x: tf.map_fn(fn, x, fn_output_signature=spec, parallel_iterations=4)
        )

    built = {k: (compile_(fn), x) for k, (fn, x) in variants.items()}
    outputs = {k: f(x).numpy().astype(int) for k, (f, x) in built.items()}
    cpu = {k: [] for k in built}
    for _ in range(args.rounds):
        for k, (f, x) in built.items():
            c0 = time.process_time()
            for _ in range(5):
                f(x)
            cpu[k].append((time.process_time() - c0) / (5 * 64) * 1e6)
    ref = {True: outputs["slice + float resize (the reader)"],
           False: outputs["224x224 crop: resize at scale 1"]}  # fmt: skip
    rows = []
    for k in built:
        diff = np.abs(outputs[k] - ref["224x224" not in k])
        rows.append([k, f"{median(cpu[k]):.0f}", int(diff.max()), f"{diff.mean():.3f}"])
    print_table(
        f"Crop + resize to {out}², one thread, CPU µs/img, median of {args.rounds} "
        f"({load_average()})",
        ["variant", "CPU µs/img", "max |diff|", "mean |diff|"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
