"""Storage-mode benchmark: reader img/s and bytes/image for --store encoded|pixels (+gzip) vs idfd.

    python bench/store_modes.py                      # 2,000 photos, 224², batch 64 (docs table)
    python bench/store_modes.py --num_images 300     # smoke
    python bench/store_modes.py --cost_model         # the --store smart threshold measurement

In one process, same corpus (bench._common.corpus: real-photo crops, long side 380-500), output
224x224, batch 64; every pipeline in evaluation mode (centre crop, fixed order), and each reader
also in training mode (`... train`: random-resized crop + flip, record shuffle; idfd has no
augmentation, so its row stays the reference):
  idfd                       tf.keras.utils.image_dataset_from_directory on the JPEG folder
  reader default             make_dataset on `imgrec convert` shards (full-size JPEGs)
  reader encoded ms256       ... converted with --max_side 256 (JPEGs re-encoded at 256)
  reader pixels ms256        ... converted with --store pixels --max_side 256 (raw uint8)
  reader pixels ms256 gzip   ... the same with --compression gzip
  ceiling raw                the bare pipeline on the pixels shards: TFRecordDataset -> batch ->
                             parse_example -> per image decode_raw, reshape, centre crop, resize
                             (map_fn, 4 in flight) -> prefetch; no file order, no count check
Pipelines are timed round-robin, `--repeats` rounds, median reported; a warm-up pass each is not
timed. The machine is shared: compare ratios within one run, not absolute numbers across runs.

--cost_model writes synthetic shards of one photo crop at several sides (JPEG q90 and raw) and
reports the reader's CPU per image (process time, best of 3): the data behind
transforms/store_modes.SMART_MAX_RAW_PIXELS.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._common import (  # noqa: E402
    WORK,
    clean_view,
    corpus,
    load_average,
    median,
    print_table,
    run_child,
)

PY = sys.executable

# name -> extra convert flags
MODES = {
    "default": [],
    "encoded ms256": ["--max_side", "256"],
    "pixels ms256": ["--store", "pixels", "--max_side", "256"],
    "pixels ms256 gzip": ["--store", "pixels", "--max_side", "256", "--compression", "gzip"],
    "smart": ["--store", "smart"],
}


def _converted(corpus_dir: str, n: int, name: str, extra: list[str]) -> tuple[str, float]:
    """(output dir, convert wall seconds or 0 when reused) of `imgrec convert` on the corpus."""
    out = os.path.join(WORK, f"out-store-{name.replace(' ', '-')}-{n}")
    if os.path.exists(os.path.join(out, "dataset_info.json")):
        return out, 0.0
    argv = [PY, "-m", "pipeline", "convert", "--input", f"{corpus_dir}/*/*.jpg", "--output", out]
    argv += ["--overwrite", "--no_analyze", "--max_bad_fraction", "0.5", "--workers", "2"]
    r = run_child(argv + extra)
    if r["rc"] != 0:
        raise SystemExit(f"convert failed: {' '.join(argv + extra)}\n{r['stderr'][-2000:]}")
    return out, r["wall_s"] if "wall_s" in r else 0.0


def _bytes_per_image(data_dir: str) -> float:
    with open(os.path.join(data_dir, "dataset_info.json")) as f:
        info = json.load(f)
    return sum(s["num_bytes"] for s in info["splits"].values()) / max(1, info["num_written"])


def _raw_ceiling(data_dir: str, size: tuple[int, int], batch: int):
    import tensorflow as tf

    from core import schema
    from pipeline.reader.dataset import split_files

    _, shards = split_files(data_dir, "train")
    keys = (schema.ENCODED, schema.LABEL, schema.HEIGHT, schema.WIDTH)
    spec = schema.feature_spec(keys=keys)

    def one(e):
        encoded, h, w = e
        h, w = tf.cast(h, tf.int32), tf.cast(w, tf.int32)
        img = tf.reshape(tf.io.decode_raw(encoded, tf.uint8), tf.stack([h, w, 3]))
        side = tf.cast(tf.cast(tf.minimum(h, w), tf.float32) * 0.875, tf.int32)
        img = tf.slice(img, tf.stack([(h - side) // 2, (w - side) // 2, 0]), [side, side, 3])
        img = tf.image.resize(tf.cast(img, tf.float32), size, method="bilinear")
        return tf.cast(img + 0.5, tf.uint8)

    def parse(records):
        f = tf.io.parse_example(records, spec)
        images = tf.map_fn(
            one,
            (f[schema.ENCODED], f[schema.HEIGHT], f[schema.WIDTH]),
            fn_output_signature=tf.TensorSpec((*size, 3), tf.uint8),
            parallel_iterations=4,
        )
        return images, f[schema.LABEL]

    o = tf.data.Options()
    o.threading.max_intra_op_parallelism = 1
    ds = tf.data.TFRecordDataset(
        [s.path for s in shards],
        compression_type=shards[0].compression,
        num_parallel_reads=tf.data.AUTOTUNE,
        buffer_size=8 << 20,
    )
    ds = ds.batch(batch).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(o)


def cost_model(num: int, size: int) -> int:
    """Reader CPU per image, JPEG vs raw, across stored sides (see module docstring)."""
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from core import schema
    from pipeline.demo import photo_dir
    from pipeline.reader import make_dataset

    base = Image.open(os.path.join(photo_dir(), "chelsea.png")).convert("RGB")
    tmp = tempfile.mkdtemp(prefix="imgrec-cost-")

    def write(root: str, side: int, raw: bool) -> float:
        os.makedirs(os.path.join(root, "v"), exist_ok=True)
        rel = "v/v-00000-of-00001.tfrecord"
        rng = np.random.default_rng(0)
        with tf.io.TFRecordWriter(os.path.join(root, rel)) as w:
            for i in range(num):
                x, y = (int(rng.integers(0, s - 200)) for s in base.size)
                im = base.crop((x, y, x + 200, y + 200)).resize((side, side), Image.BILINEAR)
                if raw:
                    data, fmt = np.asarray(im).tobytes(), schema.RAW_FORMAT
                else:
                    b = io.BytesIO()
                    im.save(b, "JPEG", quality=90)
                    data, fmt = b.getvalue(), "jpeg"
                w.write(
                    schema.make_example(
                        encoded=data,
                        image_format=fmt,
                        height=side,
                        width=side,
                        channels=3,
                        label=0,
                        label_text="a",
                        filename=str(i),
                        sha256=hashlib.sha256(data).hexdigest(),
                    )
                )
        nbytes = os.path.getsize(os.path.join(root, rel))
        split = {"num_examples": num, "num_bytes": nbytes}
        split["shards"] = [{"file": rel, **split}]
        info = {"schema_version": schema.SCHEMA_VERSION, "label_names": ["a"]}
        info.update(store="pixels" if raw else "encoded", splits={"v": split})
        with open(os.path.join(root, "dataset_info.json"), "w") as f:
            json.dump(info, f)
        return nbytes / num

    rows = []
    print(f"cost model, {num} images per side, output {size}²; {load_average()}", flush=True)
    for side in (32, 64, 128, 181, 256, 384):
        cells = [side, side * side]
        for raw in (False, True):
            d = os.path.join(tmp, f"{side}-{raw}")
            per_image = write(d, side, raw)
            ds = make_dataset(d, "v", 64, image_size=(size, size), jpeg_dct_scaling=False)
            for _ in ds:  # warm-up
                pass
            best = float("inf")
            for _ in range(3):
                c0 = time.process_time()
                for _ in ds:
                    pass
                best = min(best, (time.process_time() - c0) / num * 1e6)
            cells += [f"{best:.0f}", f"{per_image / 1e3:.1f}"]
        rows.append(cells)
    print_table(
        f"Reader CPU per image by stored side ({load_average()})",
        ["side", "pixels", "JPEG µs/img", "JPEG KB", "raw µs/img", "raw KB"],
        rows,
    )
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--num_images", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--cost_model", action="store_true")
    ap.add_argument("--no_training", action="store_true", help="evaluation-mode rows only")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.cost_model:
        return cost_model(400, args.size)

    import tensorflow as tf

    from pipeline.reader import make_dataset

    n = args.num_images
    cdir, summary = corpus(n, args.seed)
    healthy_dir = clean_view(cdir, summary)
    dirs, convert_s = {}, {}
    for name, extra in MODES.items():
        dirs[name], convert_s[name] = _converted(cdir, n, name, extra)
    size = (args.size, args.size)
    auto = tf.data.AUTOTUNE

    def reader(d, training=False):
        return lambda: make_dataset(
            d, "train", args.batch, image_size=size, repeat=False, training=training, seed=0
        )

    def idfd():
        ds = tf.keras.utils.image_dataset_from_directory(
            healthy_dir, image_size=size, batch_size=args.batch, shuffle=False, verbose=False
        )
        return ds.prefetch(auto)

    pipelines = {"idfd": idfd}
    readers = ("default", "encoded ms256", "pixels ms256", "pixels ms256 gzip")
    for name in readers:
        pipelines[f"reader {name}"] = reader(dirs[name])
    pipelines["ceiling raw"] = lambda: _raw_ceiling(dirs["pixels ms256"], size, args.batch)
    if not args.no_training:
        for name in readers:
            pipelines[f"reader {name} train"] = reader(dirs[name], training=True)

    cpu = [0.0]

    def one_pass(ds) -> tuple[int, float]:
        it = iter(ds)
        t0, c0 = time.perf_counter(), time.process_time()
        count = 0
        for batch in it:
            images = batch[0] if isinstance(batch, tuple) else batch
            count += int(images.shape[0])
        cpu[0] = time.process_time() - c0
        secs = time.perf_counter() - t0
        del it
        return count, secs

    start_load = load_average()
    print(f"corpus {n} images; {start_load}", flush=True)
    built = {}
    for name, make in pipelines.items():
        built[name] = make()
        one_pass(built[name])
    times = {k: [] for k in built}
    cpus = {k: [] for k in built}
    counts = {}
    for r in range(args.repeats):
        for name, ds in built.items():
            count, secs = one_pass(ds)
            counts[name] = count
            times[name].append(secs)
            cpus[name].append(cpu[0] / count * 1e6)
        print(
            f"round {r + 1}: "
            + ", ".join(f"{k} {counts[k] / times[k][-1]:.0f}" for k in built)
            + f"; {load_average()}",
            flush=True,
        )
    ips = {k: counts[k] / median(v) for k, v in times.items()}
    ref, ceiling = ips["idfd"], ips["ceiling raw"]
    per_image = {name: _bytes_per_image(d) for name, d in dirs.items()}
    source = summary.get("bytes", 0) / max(1, summary.get("images", 1))
    rows = []
    for k in built:
        mode = k[len("reader ") :].removesuffix(" train") if k.startswith("reader ") else ""
        kb = per_image.get(mode, source if k == "idfd" else per_image["pixels ms256"]) / 1e3
        rows.append(
            [
                k,
                counts[k],
                f"{ips[k]:.0f}",
                f"{ips[k] / ref:.2f}",
                f"{ips[k] / ceiling:.2f}",
                f"{median(cpus[k]):.0f}",
                f"{kb:.1f}",
            ]
        )
    rows.append(["(smart, bytes only)", "-", "-", "-", "-", "-", f"{per_image['smart'] / 1e3:.1f}"])
    table = print_table(
        f"Read, {n}-image corpus, {args.size}², batch {args.batch}; median of {args.repeats}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({load_average()}; at start: "
        f"{start_load})",
        ["pipeline", "images/pass", "img/s", "× idfd", "× raw ceiling", "CPU µs/img", "KB/img"],
        rows,
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "ips": ips,
                    "times": times,
                    "cpu_us_per_image": cpus,
                    "counts": counts,
                    "bytes_per_image": per_image,
                    "table": table,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
