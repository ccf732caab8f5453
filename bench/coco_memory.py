"""Peak memory and wall time of read_coco on a COCO-sized instances file, against json.load.

    PYTHONPATH=. .venv/bin/python bench/coco_memory.py            # 448 MB, as train2017
    PYTHONPATH=. .venv/bin/python bench/coco_memory.py --mb 50

The file is generated once (cached under bench/_work/) with COCO train2017's shape: ~118k images,
~860k annotations whose polygons hold ~24 points with 2 decimals, 1% crowd objects with
uncompressed RLE, categories last and their ids not contiguous. Each reader runs in a fresh
process; its growth is the peak RSS (VmHWM) after reading less the RSS before, so the
interpreter and its imports do not count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

__all__ = ["measure", "write_coco_like"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(REPO, "bench", "_work")  # git-ignored cache of generated inputs

# COCO train2017 (instances_train2017.json): 448 MB, 118,287 images, 860,001 annotations.
TRAIN2017_MB = 448
TRAIN2017_IMAGES = 118_287
TRAIN2017_ANNOTATIONS = 860_001
# COCO's 80 category ids run 1..90 with these gaps.
_GAPS = {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}
_CATEGORY_IDS = [i for i in range(1, 91) if i not in _GAPS]
# About 1% of COCO's objects are crowds, given as uncompressed RLE.
_CROWD_SHARE = 0.01


def write_coco_like(path: str, mb: float = TRAIN2017_MB, seed: int = 0) -> int:
    """Writes a COCO-like instances file of about `mb` megabytes; returns its size in bytes."""
    rng = random.Random(seed)
    scale = mb / TRAIN2017_MB
    n_images = max(1, round(TRAIN2017_IMAGES * scale))
    n_annotations = max(1, round(TRAIN2017_ANNOTATIONS * scale))
    image_ids = rng.sample(range(1, 600_000), n_images)  # COCO's ids are sparse too
    with open(path, "w", encoding="ascii") as f:
        f.write('{"info": {"description": "COCO-like test file","version": "1.0","year": 2017},')
        f.write('"licenses": [{"url": "http://creativecommons.org/licenses/by/2.0/","id": 4,')
        f.write('"name": "Attribution License"}],"images": [')
        f.write(",".join(_image(rng, image_id) for image_id in image_ids))
        f.write('],"annotations": [')
        for start in range(0, n_annotations, 10_000):
            stop = min(start + 10_000, n_annotations)
            batch = (_annotation(rng, i + 1, rng.choice(image_ids)) for i in range(start, stop))
            f.write(("," if start else "") + ",".join(batch))
        f.write('],"categories": [')
        f.write(",".join(_category(category_id) for category_id in _CATEGORY_IDS))
        f.write("]}")
    return os.path.getsize(path)


def _image(rng: random.Random, image_id: int) -> str:
    name = f"{image_id:012d}.jpg"
    width, height = rng.choice(((640, 480), (640, 427), (480, 640), (500, 375), (640, 426)))
    return (
        f'{{"license": {rng.randint(1, 8)},"file_name": "{name}",'
        f'"coco_url": "http://images.cocodataset.org/train2017/{name}",'
        f'"height": {height},"width": {width},"date_captured": "2013-11-14 11:18:45",'
        f'"flickr_url": "http://farm9.staticflickr.com/8186/{image_id}_4e622c8349_z.jpg",'
        f'"id": {image_id}}}'
    )


def _annotation(rng: random.Random, annotation_id: int, image_id: int) -> str:
    x, y = rng.uniform(0, 500), rng.uniform(0, 380)
    w, h = rng.uniform(2, 140), rng.uniform(2, 100)
    if rng.random() < _CROWD_SHARE:
        counts = ",".join(str(rng.randint(0, 900)) for _ in range(2 * rng.randint(40, 400)))
        segmentation = f'{{"counts": [{counts}],"size": [480,640]}}'
        crowd = 1
    else:
        parts = 1 if rng.random() < 0.9 else rng.randint(2, 4)
        # Log-normal point counts: most polygons hold 10-40 points, a few hundreds.
        polygons = [_polygon(rng, x, y, w, h) for _ in range(parts)]
        segmentation = "[" + ",".join(polygons) + "]"
        crowd = 0
    return (
        f'{{"segmentation": {segmentation},"area": {w * h * 0.6!r},"iscrowd": {crowd},'
        f'"image_id": {image_id},"bbox": [{x:.2f},{y:.2f},{w:.2f},{h:.2f}],'
        f'"category_id": {rng.choice(_CATEGORY_IDS)},"id": {annotation_id}}}'
    )


def _polygon(rng: random.Random, x: float, y: float, w: float, h: float) -> str:
    points = max(3, min(400, round(rng.lognormvariate(2.84, 0.55))))
    values = []
    for _ in range(points):
        values += (x + rng.random() * w, y + rng.random() * h)
    return "[" + ("%.2f," * len(values))[:-1] % tuple(values) + "]"


def _category(category_id: int) -> str:
    return f'{{"supercategory": "thing","id": {category_id},"name": "class{category_id}"}}'


# Run in a fresh interpreter: imports first, then RSS, then the read, then the peak.
_CHILD = """
import json, resource, sys, tempfile, time
from transforms.annotations.coco import read_coco
from transforms.annotations.options import AnnotationOptions
from transforms.load_annotations import load_annotations  # (Beam: imported before, as in a run)

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

before = status("VmRSS:")
start = time.perf_counter()
if sys.argv[1] == "launcher":  # the conversion's whole read: detect, parse, label map, stage
    with tempfile.TemporaryDirectory() as staging:
        load_annotations(AnnotationOptions(paths=(sys.argv[2],)), staging + "/s")
else:
    with open(sys.argv[2], "rb") as f:
        result = json.load(f) if sys.argv[1] == "json.load" else read_coco(f, sys.argv[2])
seconds = time.perf_counter() - start
print(json.dumps({"growth": status("VmHWM:") - before, "seconds": seconds}))
"""


def measure(path: str, reader: str) -> dict[str, float]:
    """Peak RSS growth (bytes) and seconds of `reader` ("launcher", "read_coco" or "json.load")
    on `path`, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, reader, path],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO),
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=TRAIN2017_MB, help="file size to generate")
    parser.add_argument(
        "--readers", nargs="+", default=["launcher", "read_coco", "json.load"],
        help="launcher: what `imgrec convert --annotations FILE` does before the job starts",
    )  # fmt: skip
    args = parser.parse_args()
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, f"coco-like-{args.mb:g}mb.json")
    if not os.path.exists(path):
        start = time.perf_counter()
        write_coco_like(path + ".part", args.mb)
        os.rename(path + ".part", path)
        print(f"generated {path} in {time.perf_counter() - start:.0f} s")
    size = os.path.getsize(path)
    print(f"file: {size / 1e6:.0f} MB")
    for reader in args.readers:
        result = measure(path, reader)
        print(
            f"{reader:>10}: peak growth {result['growth'] / 1e6:.0f} MB = "
            f"{result['growth'] / size:.2f}x the file, {result['seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
