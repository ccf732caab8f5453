"""--near_duplicates: how many edited copies the default threshold finds and how many distinct
images it merges, what `report` costs against `off` (the default command, whole process), and a
million hashes clustered in one process on one core.

    python bench/near_duplicates.py --part quality --photos 600 --edited 200
    python bench/near_duplicates.py --part real --seeds 10
    python bench/near_duplicates.py --part cost --sizes 3000 --repeats 3
    python bench/near_duplicates.py --part million --hashes 1000000
    python bench/near_duplicates.py --part cost --corpus megapixel --sizes 1000 -- --stats_max_images 250

quality: a corpus of its own (bench/_photos.py: generated photos, never seen by the threshold's
choice in tests), each of `--edited` photos copied by every edit; hard distinct cases: crops of
one texture, frames of one panning video, document scans. The default command converts it; the
job's near_duplicates.jsonl gives the headline, the job's hashes (and its crop windows' hashes,
or not) the threshold sweep. real: the same edits of scikit-image's photographs, micrographs,
scans and textures.
cost: report and off alternating on a corpus of distinct photos, 1 % of them edited copies;
`--split` adds "stand-in": report with the perceptual hash replaced by a random number in the
job's processes, so the clustering, its passes and the report run but no pixels are hashed
(report - stand-in: the hash; stand-in - off: the rest); `--windows` adds report with the
whole-image hash alone (no crop windows), what the windows cost.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import sys
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import _photos  # noqa: E402
from bench._common import (  # noqa: E402
    REPO,
    WORK,
    alternate,
    corpus,
    load_average,
    patched_argv,
    timed_run,
)
from transforms.hamming import CROP_MARGIN, DEFAULT_THRESHOLD, cluster_hashes, distance  # noqa: E402
from transforms.images.phash import CROP_WINDOWS, HASH_BITS  # noqa: E402

# The edits the issue names (EDITS also has "all": every one of them at once, a harder row).
LISTED_EDITS = ("resize", "jpeg_quality", "crop", "brightness_contrast", "png")
HARD = {"texture": (8, 16), "frames": (8, 10), "scan": (1, 60)}  # kind: (sets, images per set)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def build_quality_corpus(photos: int, edited: int) -> str:
    """(Once) root/<kind>/<name>: kind photo, an edit's name, or a hard case's; the name's stem
    says which distinct image it is (copies share their photo's stem)."""
    root = os.path.join(WORK, f"near-{photos}-{edited}")
    if os.path.exists(root + ".done"):
        return root
    shutil.rmtree(root, ignore_errors=True)
    for i in range(photos):
        im = _photos.photo(10_000 + i)
        _write(os.path.join(root, "photo", f"p{i:05d}.jpg"), _photos.original(im))
        if i < edited:
            for name in _photos.EDITS:
                ext = "png" if name == "png" else "jpg"
                _write(os.path.join(root, name, f"p{i:05d}.{ext}"), _photos.edit(im, name, i))
    makers = {"texture": _photos.texture_crops, "frames": _photos.frames, "scan": _photos.scans}
    for kind, (sets, per_set) in HARD.items():
        for s in range(sets):
            for j, im in enumerate(makers[kind](20_000 + 100 * s, per_set)):
                _write(os.path.join(root, kind, f"{kind}{s:02d}-{j:03d}.jpg"), _photos.original(im))
    open(root + ".done", "w").close()
    return root


# The cost corpus: class folders of distinct photos, one in COPY_EVERY an edited copy of an
# earlier one (near-copies are a few percent of a real collection, not most of it).
COST_CLASSES = 5
COPY_EVERY = 100
# --corpus: the generated photos' sides (None: _photos.photo's own).
CORPUS_SIDES = {"generated": None, "megapixel": (1600, 1200)}


def _cost_file(i: int, side: tuple[int, int] | None = None) -> tuple[str, bytes]:
    """(relative path, bytes) of the cost corpus's i-th file; `side` (w, h) of every photo, or
    _photos.photo's own 400-640 px."""
    folder = f"class{i % COST_CLASSES}"
    if i % COPY_EVERY == COPY_EVERY - 1:
        name = list(_photos.EDITS)[(i // COPY_EVERY) % len(_photos.EDITS)]
        # Half a period back: a photo of the corpus, never another copy.
        data = _photos.edit(_photos.photo(30_000 + i - COPY_EVERY // 2, side), name, i)
        return os.path.join(folder, f"copy{i:06d}.{'png' if name == 'png' else 'jpg'}"), data
    return os.path.join(folder, f"photo{i:06d}.jpg"), _photos.original(
        _photos.photo(30_000 + i, side)
    )


def build_cost_corpus(size: int, side: tuple[int, int] | None = None) -> str:
    """(Once) `size` files of distinct photos and 1 % edited copies, generated on every core."""
    import functools
    import multiprocessing

    root = os.path.join(
        WORK, f"near-cost-corpus-{size}" + (f"-{side[0]}x{side[1]}" if side else "")
    )
    if os.path.exists(root + ".done"):
        return root
    shutil.rmtree(root, ignore_errors=True)
    print(f"[bench] generating {root} ...", file=sys.stderr, flush=True)
    with multiprocessing.Pool() as pool:
        files = pool.imap(functools.partial(_cost_file, side=side), range(size), chunksize=16)
        for name, data in files:
            _write(os.path.join(root, name), data)
    open(root + ".done", "w").close()
    return root


def _identity(path: str) -> tuple[str, str]:
    """(kind, distinct image) of a corpus file: copies are their photo (a name's ~ ends it)."""
    kind = os.path.basename(os.path.dirname(path))
    stem = os.path.splitext(os.path.basename(path))[0]
    return kind, stem.split("~")[0]


def evaluate(clusters: list[list[str]], paths: list[str]) -> dict:
    """found per edit (a copy in its photo's cluster) and merged per kind of distinct image
    (one sharing a cluster with another distinct image)."""
    cluster_of = {p: n for n, members in enumerate(clusters) for p in members}
    sources = collections.defaultdict(set)  # cluster -> distinct images in it
    for p, n in cluster_of.items():
        sources[n].add(_identity(p)[1])
    found, copies, merged, distinct = (collections.Counter() for _ in range(4))
    originals = {_identity(p)[1]: p for p in paths if _identity(p)[0] == "photo"}
    for p in paths:
        kind, stem = _identity(p)
        if kind in _photos.EDITS:
            copies[kind] += 1
            n = cluster_of.get(p)
            found[kind] += n is not None and cluster_of.get(originals[stem]) == n
        else:
            distinct[kind] += 1
            n = cluster_of.get(p)
            merged[kind] += n is not None and len(sources[n]) > 1
    return {"found": found, "copies": copies, "merged": merged, "distinct": distinct}


def _rates(result: dict) -> tuple[float, float]:
    listed = sum(result["found"][e] for e in LISTED_EDITS) / sum(
        result["copies"][e] for e in LISTED_EDITS
    )
    false = sum(result["merged"].values()) / sum(result["distinct"].values())
    return listed, false


def _job_hashes(paths: list[str]) -> dict[str, tuple[int, tuple[int, ...]]]:
    """path -> (pHash, crop windows' pHashes) as the job's inspection computes them (the
    records keep the first; the windows live in its inspection records)."""
    from transforms.images.check import check_image
    from transforms.images.limits import CheckOptions

    found = {}
    for path in paths:
        with open(path, "rb") as f:
            info = check_image(f.read(), CheckOptions())
        found[path] = (info.phash, info.phash_crops)
    return found


def _convert(root: str, label: str) -> tuple[list[str], list[list[str]], float]:
    """(the corpus's files, the default command's clusters, its wall seconds) on `root`."""
    out = os.path.join(WORK, "near-out")
    shutil.rmtree(out, ignore_errors=True)
    argv = [sys.executable, "-m", "pipeline", "convert", "--input", f"{root}/*/*", "--output", out]
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    wall, _ = timed_run(argv, env, label)
    with open(os.path.join(out, "near_duplicates.jsonl")) as f:
        clusters = [json.loads(line)["paths"] for line in f]
    return sorted(glob.glob(f"{root}/*/*")), clusters, wall


def _print_result(result: dict, kinds) -> None:
    listed, false = _rates(result)
    print(f"the job's clusters, threshold {DEFAULT_THRESHOLD}: found {listed:.1%} of the listed "
          f"edits' copies, merged {false:.2%} of distinct images")  # fmt: skip
    for edit in _photos.EDITS:
        print(f"  found {edit:>20}: {result['found'][edit]}/{result['copies'][edit]}")
    for kind in kinds:
        print(f"  merged {kind:>19}: {result['merged'][kind]}/{result['distinct'][kind]}")


def _sweep(paths: list[str]) -> None:
    """found and merged at each threshold: the job's hashes clustered as the job does, with
    and without the crop windows."""
    hashes = _job_hashes(paths)
    by_hash = collections.defaultdict(list)
    for path, (h, _) in hashes.items():
        by_hash[h & 0xFFFF_FFFF_FFFF_FFFF].append(path)
    crops = [(h, w) for h, windows in hashes.values() for w in windows]
    owners, windows = (
        np.array(c, dtype=np.int64).view(np.uint64) for c in zip(*crops, strict=True)
    )
    print("threshold | windows | found (listed edits) | found (all at once) | distinct merged")
    for threshold in range(2, 15, 2):
        for with_windows in (True, False):
            found = cluster_hashes(
                np.fromiter(by_hash, dtype=np.uint64), threshold,
                (owners, windows) if with_windows else None,
            )  # fmt: skip
            groups = [[p for h in members for p in by_hash[h]] for members in found]
            groups += [
                ps for ps in by_hash.values() if len(ps) > 1 and not any(ps[0] in g for g in groups)
            ]
            r = evaluate(groups, paths)
            listed, false = _rates(r)
            print(f"{threshold:>9} | {'yes' if with_windows else 'no':>7} | {listed:20.1%} | "
                  f"{r['found']['all'] / r['copies']['all']:19.1%} | {false:.2%}")  # fmt: skip


def quality(args) -> None:
    root = build_quality_corpus(args.photos, args.edited)
    paths, clusters, wall = _convert(root, "quality corpus conversion")
    result = evaluate(clusters, paths)
    print(f"{len(paths)} files ({args.photos} photos, {args.edited} edited by each of "
          f"{len(_photos.EDITS)} edits, {sum(result['distinct'].values()) - args.photos} hard "
          f"distinct images), default command {wall:.1f} s")  # fmt: skip
    _print_result(result, ("photo", *HARD))
    _sweep(paths)


# Photographs, micrographs, scans and textures that scikit-image's wheel ships (cameras and
# instruments made them, not bench/_photos). motorcycle_right.png is left out: a stereo view of
# motorcycle_left.png, a near-copy of it.
REAL = (
    "astronaut.png", "brick.png", "camera.png", "cell.png", "chelsea.png", "clock_motion.png",
    "coffee.png", "coins.png", "color.png", "grass.png", "gravel.png", "horse.png",
    "hubble_deep_field.jpg", "ihc.png", "logo.png", "moon.png", "motorcycle_left.png",
    "page.png", "retina.jpg", "rocket.jpg", "text.png",
)  # fmt: skip


def build_real_corpus(seeds: int) -> str:
    """(Once) root/photo/<name>.jpg of each REAL image, root/<edit>/<name>~<seed>: its copies
    (those that differ)."""
    from pipeline.demo import photo_dir

    root = os.path.join(WORK, f"near-real-{seeds}")
    if os.path.exists(root + ".done"):
        return root
    shutil.rmtree(root, ignore_errors=True)
    for n, name in enumerate(REAL):
        im = Image.open(os.path.join(photo_dir(), name)).convert("RGB")
        stem = os.path.splitext(name)[0]
        _write(os.path.join(root, "photo", f"{stem}.jpg"), _photos.original(im))
        for edit in _photos.EDITS:
            ext = "png" if edit == "png" else "jpg"
            # Copies alike byte for byte (one PNG; a JPEG quality drawn twice) are exact
            # duplicates, which dedupe drops before clustering: one of each.
            copies = {_photos.edit(im, edit, 1000 * n + seed): seed for seed in range(seeds)}
            for copy, seed in copies.items():
                _write(os.path.join(root, edit, f"{stem}~{seed}.{ext}"), copy)
    open(root + ".done", "w").close()
    return root


def real(args) -> None:
    """The quality part's edits on scikit-image's real images (REAL), `--seeds` copies each."""
    root = build_real_corpus(args.seeds)
    paths, clusters, wall = _convert(root, "real images conversion")
    print(f"{len(paths)} files ({len(REAL)} real images, up to {args.seeds} copies by each of "
          f"{len(_photos.EDITS)} edits), default command {wall:.1f} s")  # fmt: skip
    _print_result(evaluate(clusters, paths), ("photo",))
    _direct(paths)


def linked(a, b, margin: int = CROP_MARGIN) -> bool:
    """Whether two images link as the job links a pair, each given as (pHash, its crop windows'
    pHashes): the hashes at most the threshold apart, or one within threshold - `margin` of a
    window of the other."""
    (h, h_crops), (g, g_crops) = a, b
    near = [distance(h, w) for w in g_crops] + [distance(g, w) for w in h_crops]
    return distance(h, g) <= DEFAULT_THRESHOLD or min(near, default=HASH_BITS) <= (
        DEFAULT_THRESHOLD - margin
    )


def _direct(paths: list[str]) -> None:
    """Each copy against its original alone (no chain through other copies, which a corpus of
    many copies a photo offers the job's clusters): linked by the whole-image hashes, or also
    through a crop window."""
    hashes = _job_hashes(paths)
    originals = {_identity(p)[1]: hashes[p] for p in paths if _identity(p)[0] == "photo"}
    whole, windows, copies = (collections.Counter() for _ in range(3))
    for path in paths:
        kind, stem = _identity(path)
        if kind not in _photos.EDITS:
            continue
        copies[kind] += 1
        whole[kind] += distance(hashes[path][0], originals[stem][0]) <= DEFAULT_THRESHOLD
        windows[kind] += linked(hashes[path], originals[stem])
    listed = sum(copies[e] for e in LISTED_EDITS)
    print(f"each copy against its original, threshold {DEFAULT_THRESHOLD}: whole-image hash "
          f"{sum(whole[e] for e in LISTED_EDITS) / listed:.1%} of the listed edits' copies, with "
          f"the crop windows {sum(windows[e] for e in LISTED_EDITS) / listed:.1%}")  # fmt: skip
    for edit in _photos.EDITS:
        print(f"  {edit:>20}: {whole[edit]}/{copies[edit]} whole, {windows[edit]} with windows")


# Every perceptual hash a random number (patched_argv).
_STAND_IN = r"""
import random
import transforms.images.check as check
from transforms.images.phash import CROP_WINDOWS
def stand_in(*args):
    crops = tuple(random.getrandbits(63) for _ in range(CROP_WINDOWS))
    return random.getrandbits(64) - (1 << 63), crops
check._phashes = check.phashes = stand_in
"""
# The crop windows left out: the whole-image hash alone, as before them.
_NO_WINDOWS = r"""
import transforms.images.check as check
import transforms.images.phash as ph
check.phashes = lambda pixels: ph.phashes(pixels, ph.SPANS[:1])
"""


def cost(args) -> None:
    """report against off: the default command, whole process, on distinct photos with 1 %
    edited copies (build_cost_corpus) or on the headline's corpus (`--corpus demo`)."""
    print(load_average())
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    modes = ("report", "off", *(("stand-in",) if args.split else ()))
    modes += ("no-windows",) if args.windows else ()
    programs = {"stand-in": patched_argv(_STAND_IN), "no-windows": patched_argv(_NO_WINDOWS)}
    for size in (int(s) for s in args.sizes.split(",")):
        images = (
            corpus(size)[0]
            if args.corpus == "demo"
            else build_cost_corpus(size, CORPUS_SIDES[args.corpus])
        )
        outs = {m: os.path.join(WORK, f"near-cost-{m}") for m in modes}

        def run(mode: str, images=images, outs=outs, size=size):
            shutil.rmtree(outs[mode], ignore_errors=True)
            program = programs.get(mode, [sys.executable, "-m", "pipeline"])
            argv = [*program, "convert", "--input", f"{images}/*/*",
                    "--output", outs[mode], "--near_duplicates", "off" if mode == "off" else "report",
                    *args.convert_flags]  # fmt: skip
            return timed_run(argv, env, f"--near_duplicates {mode}, {size} files")

        run("off")  # page cache
        medians = alternate(modes, args.repeats, run, label=f"{size} files, ")
        (w1, c1), (w0, c0) = medians["report"], medians["off"]
        with open(os.path.join(outs["report"], "dataset_info.json")) as f:
            near = json.load(f)["near_duplicates"]
        print(f"{size} files, default command, median of {args.repeats}: report {w1:.2f} s wall "
              f"({c1:.2f} s CPU), off {w0:.2f} s wall ({c0:.2f} s CPU): {w1 / w0:.3f}x wall, "
              f"{c1 / c0:.3f}x CPU; {near['num_clusters']} clusters, {near['num_images']} images")  # fmt: skip
        if args.split:
            _print_split(medians, outs["stand-in"], size)
        if args.windows:
            wn, cn = medians["no-windows"]
            print(f"{size} files: report without the crop windows {wn / w0:.3f}x wall "
                  f"({cn / c0:.3f}x CPU) of off")  # fmt: skip


def _print_split(medians: dict, stand_in_out: str, size: int) -> None:
    (w1, c1), (w0, c0), (ws, cs) = (medians[m] for m in ("report", "off", "stand-in"))
    with open(os.path.join(stand_in_out, "dataset_info.json")) as f:
        clusters = json.load(f)["near_duplicates"]["num_clusters"]
    assert clusters == 0, "the stand-in hash did not reach the workers"  # random: no cluster
    print(
        f"{size} files: stand-in {ws:.2f} s wall ({cs:.2f} s CPU): the hash "
        f"{(w1 - ws) / w0:+.1%} wall ({(c1 - cs) / c0:+.1%} CPU), the rest "
        f"{(ws - w0) / w0:+.1%} wall ({(cs - c0) / c0:+.1%} CPU) of off"
    )


def _flipped(rng, hashes: np.ndarray, low: int, high: int) -> np.ndarray:
    """Each of `hashes` with low to high of its 63 lower bits flipped (a bit drawn twice: once)."""
    count = rng.integers(low, high + 1, len(hashes))
    bits = np.left_shift(
        np.uint64(1), rng.integers(0, 63, (len(hashes), max(high, 1))).astype(np.uint64)
    )
    bits[np.arange(bits.shape[1])[None, :] >= count[:, None]] = 0
    return hashes ^ np.bitwise_or.reduce(bits, axis=1)


def million(args) -> None:
    """Hashes shaped like pHashes (bit 63 set, 31 of the other 63 set), each with 15 crop
    windows 4-12 bits from it (as real photos' windows lie); 1 % more hashes planted: half
    0-`threshold` bits from another hash, half 0-(threshold - CROP_MARGIN) from another's
    window. Clustered by cluster_hashes on one core, as the job's combine does."""
    rng = np.random.default_rng(0)
    n = args.hashes
    bits = np.argsort(rng.random((n, 63)), axis=1)[:, :31]
    weights = np.left_shift(np.uint64(1), np.arange(63, dtype=np.uint64))
    hashes = weights[bits].sum(axis=1, dtype=np.uint64) | np.uint64(1 << 63)
    owners = np.repeat(hashes, CROP_WINDOWS)
    windows = np.concatenate([
        _flipped(rng, owners[s : s + 1_000_000], 4, 12) for s in range(0, len(owners), 1_000_000)
    ])  # fmt: skip
    planted = n // 200
    near = rng.integers(0, n, planted)
    cut = rng.integers(0, len(windows), planted)
    copies = np.concatenate([
        _flipped(rng, hashes[near], 0, DEFAULT_THRESHOLD),
        _flipped(rng, windows[cut], 0, DEFAULT_THRESHOLD - CROP_MARGIN),
    ])  # fmt: skip
    start, wall = time.process_time(), time.perf_counter()
    clusters = cluster_hashes(
        np.concatenate([hashes, copies]), DEFAULT_THRESHOLD, (owners, windows)
    )
    cpu, wall = time.process_time() - start, time.perf_counter() - wall
    where = {h: k for k, members in enumerate(clusters) for h in members}
    bases = np.concatenate([hashes[near], owners[cut]])
    pairs = [(int(a), int(b)) for a, b in zip(bases, copies, strict=True) if a != b]
    found = sum(where.get(a) is not None and where.get(a) == where.get(b) for a, b in pairs)
    print(f"{n:,} hashes with {len(windows):,} crop windows, {2 * planted:,} planted copies "
          f"(half near a window), threshold {DEFAULT_THRESHOLD}: {wall:.1f} s wall, {cpu:.1f} s "
          f"CPU on one core; {len(clusters):,} clusters; {found:,}/{len(pairs):,} planted copies "
          "found")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--part", choices=("quality", "real", "cost", "million", "all"), default="all"
    )
    parser.add_argument("--seeds", type=int, default=10, help="real: copies by each edit")
    parser.add_argument("--photos", type=int, default=600)
    parser.add_argument("--edited", type=int, default=200)
    parser.add_argument("--sizes", default="3000")
    # cost: generated distinct photos (build_cost_corpus; megapixel: 1600x1200 each), or the
    # headline's crops of five photos (bench/_common.corpus: most near-copies of one another).
    parser.add_argument("--corpus", choices=("generated", "megapixel", "demo"), default="generated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--split", action="store_true", help="cost: also the stand-in hash")
    parser.add_argument("--windows", action="store_true", help="cost: also report without them")
    parser.add_argument("--hashes", type=int, default=1_000_000)
    parser.add_argument(
        "convert_flags", nargs=argparse.REMAINDER, help="cost: after --, to convert"
    )
    args = parser.parse_args()
    args.convert_flags = [f for f in args.convert_flags if f != "--"]
    for part in ("quality", "real", "cost", "million"):
        if args.part in (part, "all"):
            globals()[part](args)


if __name__ == "__main__":
    main()
