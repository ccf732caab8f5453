"""The reader's detection task against its classification task on the same shards.

    python bench/read_detection.py                           # smoke: 300 photos
    python bench/read_detection.py --num_images 3000 --repeats 3

Converts the corpus with a generated COCO file (bench/annotations.py's, train2017's shape), then
times training passes of `make_dataset` (224², global batch 64, one process) with the default
task and with `task="detection"`, alternating, and prints images per second and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import WORK, corpus, imgrec_argv, load_average  # noqa: E402
from bench.annotations import coco_for  # noqa: E402


def _converted(num_images: int) -> str:
    corpus_dir, _ = corpus(num_images, broken=False)
    out = os.path.join(WORK, f"detection-{num_images}")
    if not os.path.exists(os.path.join(out, "dataset_info.json")):
        pattern = os.path.join(corpus_dir, "*", "*.jpg")
        argv = ["convert", "--input", pattern, "--annotations", coco_for(corpus_dir)]
        argv += ["--output", out, "--overwrite", "--no_report", "--splits", "train=1.0"]
        subprocess.run(imgrec_argv() + argv, check=True, capture_output=True)
    return out


def _rate(out: str, task: str) -> float:
    from pipeline.reader import Order, make_dataset

    ds = make_dataset(out, "train", 64, training=True, image_size=224, seed=1, task=task,
                      order=Order(repeat=False))  # fmt: skip
    images, start = 0, time.perf_counter()
    for batch, _ in ds:
        images += int(batch.shape[0])
    return images / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = _converted(args.num_images)
    rates: dict[str, list[float]] = {"classification": [], "detection": []}
    for i in range(args.repeats):
        order = list(rates) if i % 2 == 0 else list(reversed(rates))
        for task in order:
            rates[task].append(_rate(out, task))
            print(f"  run {i + 1}, {task:>14}: {rates[task][-1]:7.0f} img/s", flush=True)
    medians = {task: statistics.median(r) for task, r in rates.items()}
    ratio = medians["detection"] / medians["classification"]
    print(f"{args.num_images} photos ({load_average()}): classification "
          f"{medians['classification']:.0f} img/s, detection {medians['detection']:.0f} img/s, "
          f"{ratio:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
