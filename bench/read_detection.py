"""The reader's detection task against its classification task on the same shards.

    python bench/read_detection.py                           # smoke: 300 photos
    python bench/read_detection.py --num_images 3000 --repeats 3

Converts the corpus with a generated COCO file (bench/annotations.py's, train2017's shape), then
times training epochs of `make_dataset` (224², global batch 64, one process; from the second
batch) with the default task, with `task="detection"` and with instance masks, alternating, and
prints images per second, the process's CPU seconds per image (steadier than the wall clock on a
shared machine) and their ratios to the classification task's; then one batch's bytes with masks.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def _task(name: str):
    from pipeline.reader import Detection

    return Detection(masks=True) if name == "masks" else name


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rate(out: str, task: str) -> tuple[float, float]:
    """(images per second, CPU microseconds per image) of one training epoch, from its second
    batch: a training job's rate, without the pipeline's start (tracing, the first shards)."""
    from pipeline.reader import Order, make_dataset

    ds = make_dataset(out, "train", 64, training=True, image_size=224, seed=1,
                      task=_task(task), order=Order(repeat=False))  # fmt: skip
    batches = iter(ds)
    next(batches)
    images, start, cpu = 0, time.perf_counter(), _cpu_s()
    for batch, _ in batches:
        images += int(batch.shape[0])
    return images / (time.perf_counter() - start), (_cpu_s() - cpu) / images * 1e6


def _batch_bytes(out: str) -> str:
    """One global batch of 64 with masks, as its tensors' bytes."""
    from pipeline.reader import make_dataset

    ds = make_dataset(out, "train", 64, training=True, image_size=224, seed=1, task=_task("masks"))
    images, targets = next(iter(ds))
    masks = targets["masks"]
    total = images.numpy().nbytes + sum(t.numpy().nbytes for t in targets.values())
    return (f"a batch of 64 with masks: {total / 2**20:.0f} MiB, the masks "
            f"{masks.numpy().nbytes / 2**20:.0f} MiB ({'x'.join(map(str, masks.shape))} uint8)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    out = _converted(args.num_images)
    rates: dict[str, list[tuple[float, float]]] = {
        "classification": [],
        "detection": [],
        "masks": [],
    }
    for i in range(args.repeats):
        order = list(rates) if i % 2 == 0 else list(reversed(rates))
        for task in order:
            rates[task].append(_rate(out, task))
            speed, cpu = rates[task][-1]
            print(
                f"  run {i + 1}, {task:>14}: {speed:7.0f} img/s, {cpu:5.0f} us CPU/img", flush=True
            )
    speed = {task: statistics.median(r[0] for r in runs) for task, runs in rates.items()}
    cpu = {task: statistics.median(r[1] for r in runs) for task, runs in rates.items()}
    base = "classification"
    print(f"{args.num_images} photos ({load_average()}): classification {speed[base]:.0f} img/s "
          f"{cpu[base]:.0f} us CPU/img; " + "; ".join(
              f"{task} {speed[task]:.0f} img/s {speed[task] / speed[base]:.2f}x, "
              f"{cpu[task]:.0f} us CPU/img {cpu[base] / cpu[task]:.2f}x"
              for task in ("detection", "masks")))  # fmt: skip
    print(_batch_bytes(out))


if __name__ == "__main__":
    main()
