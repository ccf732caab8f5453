"""Training read rate as a training job sees it: one iterator of `make_dataset(...,
training=True)` (repeat=True, the default), epoch after epoch.

    python bench/read.py --num_images 6000 --only idfd    # converts the corpora once
    python bench/read_steady.py --reader_tree /tmp/before57
    python bench/read_steady.py

bench/read.py times each pass with a new iterator (`repeat=False`), so its figures include
every iterator's start; this script starts one per split and times `--epochs` epochs after
the first, which it reports apart (its start is what a job pays once, or after a restart).
Splits: bench/read.py's conversions of the `--num_images` corpus, JPEG and raw pixels
(`--store pixels --max_side 256`), each with 2 shards (the defaults) and with 64
(`--min_shards 64`). Batch 64, 224²; images/s per epoch, the median of the later epochs.
Compare trees run alternately (A B B A): the host's load moves the figures between runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import WORK  # noqa: E402

_SPLITS = {
    "JPEG, 2 shards": "out-w2-{n}",
    "pixels, 2 shards": "out-pixels256-{n}",
    "JPEG, 64 shards": "out-shards64-{n}",
    "pixels, 64 shards": "out-pixels256-shards64-{n}",
}


def _rates(data_dir: str, epochs: int, batch: int) -> list[float]:
    """Images/s of each epoch (the first included) of one training iterator."""
    from pipeline.reader import make_dataset, steps_per_epoch

    steps = steps_per_epoch(data_dir, "train", batch)
    ds = make_dataset(data_dir, "train", batch, training=True, image_size=(224, 224), seed=1)
    it = iter(ds)
    rates = []
    for _ in range(epochs + 1):
        start, images = time.perf_counter(), 0
        for _ in range(steps):
            images += int(next(it)[0].shape[0])
        rates.append(images / (time.perf_counter() - start))
    return rates


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=6000)
    ap.add_argument("--epochs", type=int, default=5, help="timed epochs after the first")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reader_tree", default="", help="a checkout whose reader to time")
    args = ap.parse_args(argv)
    if args.reader_tree:  # before the first import of pipeline/core in this process
        sys.path.insert(0, os.path.abspath(args.reader_tree))
    print(f"| split ({args.reader_tree or 'this checkout'}) | first epoch img/s | later, median |")
    print("|---|---|---|")
    for name, folder in _SPLITS.items():
        data_dir = os.path.join(WORK, folder.format(n=args.num_images))
        if not os.path.exists(os.path.join(data_dir, "dataset_info.json")):
            raise SystemExit(f"{data_dir} missing: run python bench/read.py --num_images "
                             f"{args.num_images} --only idfd first")  # fmt: skip
        rates = _rates(data_dir, args.epochs, args.batch)
        print(f"| {name} | {rates[0]:.0f} | {statistics.median(rates[1:]):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
