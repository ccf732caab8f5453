"""Chips of a 12,000^2 x 4-band uint16 tiled GeoTIFF: imgrec --tile against plain loops.

    PYTHONPATH=. .venv/bin/python bench/tiles.py              # 12,000^2, chips of 512
    PYTHONPATH=. .venv/bin/python bench/tiles.py --side 4000  # a quick look

The scene (1.15 GB of samples, tiles of 512, deflate; a nodata border) is written once, window
by window, under bench/_work/tiles/. Each command runs in a fresh process; imgrec with default
options plus --tile 512 --bit_depth 16 (every sample kept, as the loops keep them) and
--splits train=1 (one scene is one split). Reported: wall time, the largest resident memory of
any one process (each process's own high-water mark, VmHWM, polled over the command's process
tree) and which process it was, and chips per second. The plain loops are what a user writes:
rasterio reading each window (or the whole scene, then cutting it), a 16-bit PNG per chip, one
TFRecord file. Last, the same scene without --tile: rejected from its header.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

from bench._common import REPO, WORK, print_table

# The scene: 12,000^2 pixels, 4 bands of uint16 (1.15 GB of samples).
_SIDE, _BANDS, _TILE = 12_000, 4, 512
# Rows written per window while generating: a few hundred MB at most.
_ROWS = 1_024

_LOOP = """
import sys, numpy as np, rasterio, tensorflow as tf
from rasterio.windows import Window
from core.tile_grid import chip_windows
path, out, tile, whole = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "whole"
n = 0
with rasterio.open(path) as src, tf.io.TFRecordWriter(out) as writer:
    scene = np.moveaxis(src.read(), 0, 2) if whole else None
    for w in chip_windows(src.height, src.width, (tile, tile), 0):
        if whole:
            chip = scene[w.y:w.y + w.height, w.x:w.x + w.width]
        else:
            chip = np.moveaxis(src.read(window=Window(w.x, w.y, w.width, w.height)), 0, 2)
        png = tf.io.encode_png(np.ascontiguousarray(chip)).numpy()
        feature = {"image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))}
        writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        n += 1
print(n)
"""


def write_scene(path: str, side: int) -> None:
    """A tiled GeoTIFF of `side`^2 x 4 uint16 (a gradient with 8 noisy low bits, a zero border
    as nodata), written window by window."""
    import rasterio
    from rasterio.transform import Affine
    from rasterio.windows import Window

    rng = np.random.default_rng(0)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    profile = dict(
        driver="GTiff", height=side, width=side, count=_BANDS, dtype="uint16",
        crs="EPSG:32633", transform=Affine(10.0, 0, 300000.0, 0, -10.0, 5000000.0),
        tiled=True, blockxsize=_TILE, blockysize=_TILE, compress="deflate", nodata=0,
        BIGTIFF="IF_SAFER",
    )  # fmt: skip
    with rasterio.open(path + ".part", "w", **profile) as dst:
        cols = np.arange(side, dtype=np.uint32)
        for top in range(0, side, _ROWS):
            rows = np.arange(top, min(side, top + _ROWS), dtype=np.uint32)[:, None]
            for band in range(_BANDS):
                base = (rows * 3 + cols * 2 + band * 5000) & 0xFF00
                noise = rng.integers(1, 256, base.shape, dtype=np.uint32)
                block = (base + noise).astype(np.uint16)
                block[:, :200] = 0  # the scene's nodata edge
                dst.write(block, band + 1, window=Window(0, top, side, len(rows)))
    os.replace(path + ".part", path)


def _peak_per_process(argv: list[str]) -> dict:
    """Run `argv` from the repo root: {"rc", "wall_s", "stderr", "peak_mb": the largest peak
    resident memory (VmHWM) of any one process of its tree, "which": that process's command}.
    Each process's own high-water mark, polled: no figure inherited from a parent."""
    import subprocess
    import threading
    import time

    import psutil

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    peaks: dict[int, tuple[float, str]] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    stop = threading.Event()

    def poll() -> None:
        root = psutil.Process(proc.pid)
        while not stop.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            for p in tree:
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM"))
                    command = " ".join(" ".join(p.cmdline()[1:4]).split())
                    peaks[p.pid] = (hwm / 1024, command[:50])
                except (OSError, StopIteration, psutil.Error):
                    continue
            stop.wait(0.1)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    _, stderr = proc.communicate()
    stop.set()
    thread.join()
    peak, which = max(peaks.values(), default=(float("nan"), ""))
    wall = time.perf_counter() - start
    return {"rc": proc.returncode, "wall_s": wall, "stderr": stderr, "peak_mb": peak,
            "which": which}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", type=int, default=_SIDE)
    parser.add_argument("--tile", type=int, default=_TILE)
    parser.add_argument("--only", default="", help="run only the commands naming this word")
    args = parser.parse_args()
    folder = os.path.join(WORK, "tiles", str(args.side))
    scene = os.path.join(folder, "in", "scenes", "scene.tif")
    if not os.path.exists(scene):
        write_scene(scene, args.side)
    size_mb = os.path.getsize(scene) / 1e6
    samples_gb = args.side**2 * _BANDS * 2 / 1e9
    print(f"scene: {args.side}^2 x {_BANDS} uint16 = {samples_gb:.2f} GB of samples, "
          f"a {size_mb:.0f} MB file; chips of {args.tile}")  # fmt: skip
    out = os.path.join(folder, "out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    imgrec = [sys.executable, "-m", "pipeline", "convert", "--input", f"{folder}/in/**"]
    imgrec += ["--splits", "train=1"]  # one scene: one split
    runs = {
        "imgrec --tile (default options + --bit_depth 16)": imgrec
        + ["--output", f"{out}/imgrec", "--tile", str(args.tile), "--bit_depth", "16"],
        "rasterio window loop": [sys.executable, "-c", _LOOP, scene, f"{out}/w.tfrecord",
                                 str(args.tile), "window"],
        "rasterio whole-scene loop": [sys.executable, "-c", _LOOP, scene, f"{out}/s.tfrecord",
                                      str(args.tile), "whole"],
        "imgrec without --tile (rejected from its header)": imgrec
        + ["--output", f"{out}/whole", "--max_bad_fraction", "1"],
    }  # fmt: skip
    chips = (-(-args.side // args.tile)) ** 2
    rows = []
    for name, argv in runs.items():
        if args.only not in name:
            continue
        result = _peak_per_process(argv)
        if result["rc"] != 0:
            sys.exit(f"{name} failed:\n{result['stderr'][-2000:]}")
        per_s = chips / result["wall_s"] if "rejected" not in name else float("nan")
        rows.append([name, f"{result['wall_s']:.1f}", f"{result['peak_mb']:.0f}",
                     result["which"], f"{per_s:.1f}"])  # fmt: skip
    print_table(
        f"{chips} chips of {args.tile}^2 from one {args.side}^2 x {_BANDS} uint16 scene",
        ["command", "wall s", "peak RSS of one process MB", "that process", "chips/s"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
