"""Conversion time with boxes and masks against the same images without, and against the script a
user would otherwise write (TensorFlow's create_coco_tf_record.py, condensed).

    python bench/annotations.py                          # smoke: 300 photos
    python bench/annotations.py --num_images 3000 --repeats 3   # docs/benchmarks.md

HEADLINE: whole process, wall clock, default options, alternating rounds, medians:
  images      `imgrec convert --input ...` (the images alone)
  boxes       the same plus `--annotations instances.json --no_instance_masks`
  annotated   the same plus `--annotations instances.json` (boxes and instance masks: one PNG
              per object, drawn and encoded in the writer)
  script      pycocotools + tf.train.Example + TFRecordWriter, one process, as
              create_coco_tf_record.py does it (masks from annToMask, PNG-encoded)
The COCO file is generated for the corpus with COCO train2017's shape: 7.3 objects per image on
average, polygons of 12 points and more, 1 % crowd objects as RLE.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (  # noqa: E402
    WORK,
    alternate,
    corpus,
    imgrec_argv,
    load_average,
    print_table,
    timed_run,
)

# COCO train2017: 860,001 objects on 118,287 images.
_OBJECTS_PER_IMAGE = 860_001 / 118_287

_SCRIPT = r"""
import io, json, os, sys
import numpy as np, tensorflow as tf
from PIL import Image
from pycocotools import mask as mask_util
from pycocotools.coco import COCO

ann_file, image_dir, out = sys.argv[1:4]
coco = COCO(ann_file)
feat = tf.train.Feature
def floats(v): return feat(float_list=tf.train.FloatList(value=v))
def ints(v): return feat(int64_list=tf.train.Int64List(value=v))
def byts(v): return feat(bytes_list=tf.train.BytesList(value=v))
with tf.io.TFRecordWriter(out) as writer:
    for image in coco.dataset["images"]:
        with open(os.path.join(image_dir, image["file_name"]), "rb") as f:
            data = f.read()
        w, h = image["width"], image["height"]
        boxes, labels, masks = [], [], []
        for ann in coco.imgToAnns[image["id"]]:
            x, y, bw, bh = ann["bbox"]
            boxes.append((x / w, y / h, (x + bw) / w, (y + bh) / h))
            labels.append(ann["category_id"])
            png = io.BytesIO()
            Image.fromarray(coco.annToMask(ann)).save(png, "PNG")
            masks.append(png.getvalue())
        example = tf.train.Example(features=tf.train.Features(feature={
            "image/encoded": byts([data]), "image/height": ints([h]), "image/width": ints([w]),
            "image/source_id": byts([str(image["id"]).encode()]),
            "image/object/bbox/xmin": floats([b[0] for b in boxes]),
            "image/object/bbox/ymin": floats([b[1] for b in boxes]),
            "image/object/bbox/xmax": floats([b[2] for b in boxes]),
            "image/object/bbox/ymax": floats([b[3] for b in boxes]),
            "image/object/class/label": ints(labels), "image/object/mask": byts(masks)}))
        writer.write(example.SerializeToString())
"""


def _polygon(rng: random.Random, w: int, h: int) -> tuple[list[float], list[float]]:
    """A star-shaped polygon inside the image and its bbox."""
    import math

    cx, cy = rng.uniform(0.2, 0.8) * w, rng.uniform(0.2, 0.8) * h
    r = rng.uniform(0.03, 0.2) * min(w, h)
    n = rng.randint(12, 40)
    points = []
    for i in range(n):
        a = 2 * math.pi * i / n
        k = rng.uniform(0.6, 1.0) * r
        points += [round(cx + k * math.cos(a), 2), round(cy + k * math.sin(a), 2)]
    xs, ys = points[0::2], points[1::2]
    return points, [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]


def coco_for(corpus_dir: str, seed: int = 0) -> str:
    """A COCO instances file (cached) for every healthy JPEG of the corpus."""
    from PIL import Image
    from pycocotools import mask as mask_util

    path = corpus_dir.rstrip("/") + "-instances.json"
    if os.path.exists(path):
        return path
    rng = random.Random(seed)
    images, annotations = [], []
    names = sorted(
        os.path.join(label, n)
        for label in os.listdir(corpus_dir)
        if os.path.isdir(os.path.join(corpus_dir, label))
        for n in os.listdir(os.path.join(corpus_dir, label))
    )
    for image_id, name in enumerate(names, start=1):
        try:
            with Image.open(os.path.join(corpus_dir, name)) as im:
                w, h = im.size
        except OSError:
            continue
        images.append({"id": image_id, "file_name": name, "width": w, "height": h})
        for _ in range(int(rng.expovariate(1 / _OBJECTS_PER_IMAGE))):
            polygon, bbox = _polygon(rng, w, h)
            ann = {"id": len(annotations) + 1, "image_id": image_id, "bbox": bbox,
                   "category_id": rng.randint(1, 80), "iscrowd": 0, "area": bbox[2] * bbox[3],
                   "segmentation": [polygon]}  # fmt: skip
            if rng.random() < 0.01:
                rle = mask_util.frPyObjects([polygon], h, w)[0]
                ann.update(iscrowd=1, segmentation={"size": rle["size"],
                                                    "counts": rle["counts"].decode()})  # fmt: skip
            annotations.append(ann)
    categories = [{"id": i, "name": f"class{i:02d}"} for i in range(1, 81)]
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    corpus_dir, _ = corpus(args.num_images, broken=False)
    instances = coco_for(corpus_dir)
    with open(instances) as f:
        num_objects = len(json.load(f)["annotations"])
    out = os.path.join(WORK, "annotations-out")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    pattern = os.path.join(corpus_dir, "*", "*.jpg")
    commands = {
        "images": imgrec_argv() + ["convert", "--input", pattern, "--output", out, "--overwrite"],
        "boxes": imgrec_argv()
        + ["convert", "--input", pattern, "--output", out, "--overwrite"]
        + ["--annotations", instances, "--no_instance_masks"],
        "annotated": imgrec_argv()
        + ["convert", "--input", pattern, "--output", out, "--overwrite"]
        + ["--annotations", instances],
        "script": [sys.executable, "-c", _SCRIPT, instances, corpus_dir, out + ".tfrecord"],
    }
    times = alternate(
        tuple(commands), args.repeats, lambda mode: timed_run(commands[mode], env, mode)
    )
    base_wall, base_cpu = times["images"]
    rows = [
        [mode, f"{wall:.1f}", f"{cpu:.1f}", f"{wall / base_wall:.2f}", f"{cpu / base_cpu:.2f}"]
        for mode, (wall, cpu) in times.items()
    ]
    print_table(
        f"{args.num_images} photos, {num_objects} objects ({load_average()})",
        ["command", "wall s", "CPU s", "wall / images", "CPU / images"],
        rows,
    )


if __name__ == "__main__":
    main()
