"""Near-duplicates without a conversion: the pHash of Pillow-written copies, the multi-index
search against all pairs, the options, and FindNearDuplicates' three modes under TestPipeline."""

from __future__ import annotations

import hashlib
import io
import itertools
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image, ImageEnhance

from bench import _photos
from pipeline.demo import photo_dir
from pipeline.options import ConvertConfig, OptionError
from transforms.elements import InspectedImage
from transforms.hamming import (
    CROP_MARGIN,
    DEFAULT_THRESHOLD,
    _layout,
    band_edges,
    bands,
    cluster_hashes,
    cluster_ids,
    components,
    distance,
    spanning_pairs,
)
from transforms.images.check import check_image
from transforms.images.limits import CheckOptions
from transforms.images.phash import CROP_SPANS, pack, phash, phashes, to_unsigned, unpack
from transforms.near_duplicates import FindNearDuplicates


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _hash(data: bytes, **opts) -> int:
    return check_image(data, CheckOptions(**opts)).phash


def test_copies_of_a_photo_hash_close_and_other_photos_far():
    """Pillow-written copies (another size, quality, format, a crop, brighter) stay within the
    default threshold of the original as inspection hashes it; other photos do not."""
    photos = [_photos.photo(seed, (400, 300)) for seed in range(6)]
    originals = [_hash(_encode(im, "JPEG", quality=90)) for im in photos]
    im = photos[0]
    w, h = im.size
    copies = {
        "png": _encode(im, "PNG"),
        "webp": _encode(im, "WEBP", quality=80),
        "half": _encode(im.resize((w // 2, h // 2), Image.BICUBIC), "JPEG", quality=90),
        "quality 40": _encode(im, "JPEG", quality=40),
        "crop 3 %": _encode(im.crop((6, 4, w - 6, h - 4)), "JPEG", quality=90),
        "brighter": _encode(ImageEnhance.Brightness(im).enhance(1.1), "JPEG", quality=90),
    }
    for name, data in copies.items():
        assert distance(_hash(data), originals[0]) <= DEFAULT_THRESHOLD, name
    for a, b in itertools.combinations(originals, 2):
        assert distance(a, b) > DEFAULT_THRESHOLD
    # Whichever way the check decodes (1/8 DCT scale or full size), the same hash.
    data = _encode(im, "JPEG", quality=90)
    assert _hash(data, jpeg_verify="full") == originals[0]
    assert check_image(data, CheckOptions(), compute_stats=True).phash == originals[0]
    assert _hash(data, max_side=200) == originals[0]  # downscaled by the writer
    assert check_image(copies["png"], CheckOptions(phash=False)).phash is None


def test_every_layout_hashes_as_its_grey_picture():
    """RGB as its luma, alpha and a grey image's alpha ignored, bands averaged, any depth or
    scale (the bits compare coefficients with their median), NaN as 0."""
    rgb = np.asarray(_photos.photo(3, (120, 90)))
    luma = rgb.astype(np.float64) @ [0.299, 0.587, 0.114]
    want = phash(luma)
    assert distance(phash(rgb), want) <= 1  # float32 against float64 luma
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)])
    assert phash(rgba) == phash(rgb)
    assert phash(np.dstack([luma, np.zeros_like(luma)])) == want  # grey + alpha
    assert phash(np.dstack([luma] * 5)) == want  # 5 equal bands: their mean
    assert phash((luma * 250).astype(np.uint16)) == phash((luma * 250).astype(np.float32))
    assert phash(luma[:, :, None]) == want
    holes = luma.copy()
    holes[10:20, 30:40] = np.nan
    zeros = luma.copy()
    zeros[10:20, 30:40] = 0
    assert phash(holes) == phash(zeros)
    assert phash(luma[:, :, None].repeat(3, axis=2)[:, ::-1]) != want  # not mirror-blind


def _brute_force(hashes: list[int], threshold: int, more_pairs=()) -> list[list[int]]:
    pairs = [(a, b) for a, b in itertools.combinations(hashes, 2) if distance(a, b) <= threshold]
    pairs += more_pairs
    members: dict[int, list[int]] = {}
    for node, first in components(pairs).items():
        members.setdefault(first, []).append(node)
    return sorted(sorted(m) for m in members.values())


# Photographs from a camera (scikit-image's data): not our generator's pictures.
_REAL = ("astronaut.png", "camera.png", "chelsea.png", "coffee.png", "rocket.jpg", "moon.png")


def _real(name: str) -> Image.Image:
    return Image.open(os.path.join(photo_dir(), name)).convert("RGB")


# Written datasets keep image/phash and later versions compare new images with it (and with the
# windows in the inspection records): a picture's bits may never change. The values: the whole
# image's as the area-averaged pHash (024c9f0) made them, its windows' (a digest) as 3e49791 did.
_PINNED = {
    "camera.png": (0xBFF1C1C0434E8CBC, "41e35a851ce1adb1"),
    "astronaut.png": (0xC2924C5532BDDFC8, "671e39627b984d97"),
    "rocket.jpg": (0xC0371BEC1BE51267, "557c5a0489c5760d"),
}


def test_the_bits_of_known_pictures_never_change():
    for name, (whole, windows) in _PINNED.items():
        pixels = np.asarray(_real(name))
        got, crops = phashes(pixels)
        digest = hashlib.sha256(np.array(crops, ">i8").tobytes()).hexdigest()[:16]
        assert (to_unsigned(got), digest) == (whole, windows), name
        # Its grey picture (Pillow's luma) hashes alike.
        assert phash(np.asarray(_real(name).convert("L"))) == got, name
    # Ties at the middle stay unset (photos have none): a flat picture has no bit set.
    assert phashes(np.zeros((40, 40), np.uint8)) == (0, (0,) * 15)


def test_a_crop_window_hashes_as_that_crop():
    """Each of the 15 windows is the hash of the image cut to it (sides of whole pixels here),
    rows span first; the whole image's hash is phash's."""
    im = np.asarray(_real("astronaut.png").resize((400, 400)))
    whole, crops = phashes(im)
    assert whole == phash(im) and len(crops) == 15
    spans = [(0.0, 1.0), *CROP_SPANS]
    cut = [(round(a * 400), round(b * 400)) for a, b in spans]
    windows = [(r, c) for r in cut for c in cut][1:]
    assert [phash(im[r0:r1, c0:c1]) for (r0, r1), (c0, c1) in windows] == list(crops)
    # As the job carries them: packed, and unpacked unsigned for the clustering.
    assert unpack(pack(crops)).tolist() == [to_unsigned(c) for c in crops]


def test_real_photos_cut_up_to_5_percent_are_found_through_the_windows():
    """A camera photo cut by 2-5 % of each side (split at random between its ends, as the
    benchmark's crop edit), re-encoded: its hash lies within the threshold of its original's
    or within threshold - CROP_MARGIN of a window of it, where the whole-image hash alone
    misses many; different photos stay apart either way."""
    found = whole_only = total = 0
    originals = {}
    for name in _REAL:
        im = _real(name)
        originals[name] = check_image(_photos.original(im), CheckOptions())
        for seed in range(6):
            copy = check_image(_photos.edit(im, "crop", seed), CheckOptions())
            whole = distance(copy.phash, originals[name].phash) <= DEFAULT_THRESHOLD
            near = min(distance(copy.phash, w) for w in originals[name].phash_crops)
            found += whole or near <= DEFAULT_THRESHOLD - CROP_MARGIN
            whole_only += whole
            total += 1
    assert found >= 0.9 * total and whole_only <= 0.75 * total, (found, whole_only, total)
    for a, b in itertools.combinations(originals.values(), 2):
        assert distance(a.phash, b.phash) > DEFAULT_THRESHOLD
        assert min(distance(a.phash, w) for w in b.phash_crops) > DEFAULT_THRESHOLD - CROP_MARGIN


def test_a_window_of_an_image_not_clustered_is_refused():
    hashes = np.array([5, 1 << 40], dtype=np.uint64)
    with pytest.raises(ValueError, match="owner"):
        cluster_ids(hashes, 6, (np.array([7], dtype=np.uint64), np.array([5], dtype=np.uint64)))


@pytest.mark.parametrize("threshold", [2, 6, 9])
def test_crop_windows_link_what_all_pairs_link(threshold):
    """Hashes, 15 windows each 3-10 bits from their owner, and copies planted 0-5 bits from
    random windows: the clusters equal all pairs' (hashes within the threshold, or a hash
    within threshold - CROP_MARGIN of another's window)."""
    rng = np.random.default_rng(threshold)
    base = rng.integers(0, 2**64, 150, dtype=np.uint64)

    def flipped(h, low: int, high: int) -> int:
        bits = rng.choice(64, int(rng.integers(low, high + 1)), replace=False)
        return int(h) ^ sum(1 << int(b) for b in bits)

    owners = np.repeat(base, 15)
    windows = np.array([flipped(h, 3, 10) for h in owners], dtype=np.uint64)
    copies = [flipped(w, 0, 5) for w in rng.choice(windows, 40)]
    hashes = np.unique(np.concatenate([base, np.array(copies, dtype=np.uint64)]))
    near = threshold - CROP_MARGIN
    through = [(int(h), int(o)) for h in hashes for o, w in zip(owners, windows, strict=True)
               if h != o and distance(int(h), int(w)) <= near]  # fmt: skip
    want = _brute_force([int(h) for h in hashes], threshold, through)
    assert len(want) >= 5  # threshold 2: only copies planted on a window link
    assert cluster_hashes(hashes, threshold, (owners, windows)) == want


@pytest.mark.parametrize("threshold", [1, 2, 5, 8, 11])
def test_multi_index_search_finds_what_all_pairs_find(threshold):
    """Random hashes with planted copies 0-14 bits away: the clusters equal those of comparing
    every pair, at thresholds below, at and above the bands' radius steps."""
    rng = np.random.default_rng(threshold)
    hashes = [int(h) for h in rng.integers(0, 2**64, 300, dtype=np.uint64)]
    for base in hashes[:80]:
        flips = rng.choice(64, int(rng.integers(0, 15)), replace=False)
        hashes.append(base ^ sum(1 << int(b) for b in flips))
    hashes = sorted(set(hashes))
    want = _brute_force(hashes, threshold)
    assert len(want) >= 3  # the comparison has clusters to find
    assert cluster_hashes(np.array(hashes, dtype=np.uint64), threshold) == want


@pytest.mark.parametrize("m", [3, 4, 7])
def test_every_band_layout_finds_every_close_pair(m):
    """However many bands (a million hashes get 3, ten thousand 4, a few hundred 7 or more),
    the bands together find exactly the pairs within the threshold."""
    rng = np.random.default_rng(m)
    base = rng.integers(0, 2**64, 200, dtype=np.uint64)
    flips = [sum(1 << int(b) for b in rng.choice(64, int(rng.integers(0, 9)), replace=False))
             for _ in base]  # fmt: skip
    hashes = np.unique(np.concatenate([base, base ^ np.array(flips, dtype=np.uint64)]))
    threshold = 7
    found = set()
    for band in _layout(m):
        i, j, _ = band_edges(hashes, band, threshold // m, threshold)
        found |= set(zip(i.tolist(), j.tolist(), strict=True))
    want = {
        (i, j)
        for i, j in itertools.combinations(range(len(hashes)), 2)
        if distance(int(hashes[i]), int(hashes[j])) <= threshold
    }
    assert len(want) >= 100 and found == want


def test_bands_fit_the_number_of_hashes():
    assert [len(bands(n, DEFAULT_THRESHOLD)[0]) for n in (10_000, 1_000_000)] == [4, 3]
    assert bands(1_000_000, DEFAULT_THRESHOLD)[1] == 2  # 2 of 6 bits in one of 3 bands


def test_a_hash_held_twice_is_a_cluster_of_its_own():
    assert cluster_ids(np.array([5, 9, 5, 1 << 40], dtype=np.uint64), 0) == {5: 5}
    assert cluster_ids(np.array([5, 7, 5], dtype=np.uint64), 1) == {5: 5, 7: 5}


def test_options_name_the_fix():
    config = ConvertConfig(inputs=("x/*",), manifest=None, output="out")
    assert (config.near_duplicates, config.near_threshold) == ("report", DEFAULT_THRESHOLD)
    with pytest.raises(OptionError, match="--near_duplicates must be one of report, group"):
        ConvertConfig(inputs=("x/*",), manifest=None, output="out", near_duplicates="keep")
    with pytest.raises(OptionError, match="--near_duplicates_threshold must be in 0..16"):
        ConvertConfig(inputs=("x/*",), manifest=None, output="out", near_threshold=20)
    with pytest.raises(OptionError, match="use --near_duplicates report"):
        ConvertConfig(
            inputs=("x/*",), manifest=None, output="out", near_duplicates="group",
            split_from="path",
        )  # fmt: skip


def _image(key: str, split: str, phash: int | None, group: str = "") -> InspectedImage:
    return InspectedImage(
        path=f"/in/{key}", key=key, label="a", split=split, size=1, stamp=None, group=group,
        sha256=key, format="jpeg", source_format="jpeg", height=1, width=1, channels=3,
        transcode="", stats=None, phash=phash,
    )  # fmt: skip


# a ~ a2 (2 bits) ~ a3 (2 more bits): one cluster through a chain; b alone; c and c2 share one
# hash (two files, one picture); d has no hash (--near_duplicates was off for its record).
_A = 0x0123_4567_89AB_CDEF
_IMAGES = [
    _image("a.jpg", "validation", _A),
    _image("a2.jpg", "train", _A ^ 0b11),
    _image("a3.jpg", "train", _A ^ 0b1111, group="g1"),
    _image("mate.jpg", "train", -42, group="g1"),  # a3's --group_by group mate
    _image("b.jpg", "train", ~_A),
    _image("c.jpg", "train", 7),
    _image("c2.jpg", "train", 7),
    _image("d.jpg", "validation", None),
]


def _run(mode: str):
    with TestPipeline() as p:
        out = (
            p
            | beam.Create([_IMAGES[:3], _IMAGES[3:]])
            | FindNearDuplicates(mode, DEFAULT_THRESHOLD)
        )
        clusters = out["clusters"] | "Rows" >> beam.Map(lambda c: c.to_dict())
        images = out["images"] | "Splits" >> beam.FlatMap(lambda b: [(r.key, r.split) for r in b])
        yield clusters, images, out["dropped"]


def test_report_lists_clusters_and_changes_nothing():
    for clusters, images, dropped in _run("report"):
        assert_that(
            clusters,
            equal_to(
                [
                    {
                        "paths": ["/in/a.jpg", "/in/a2.jpg", "/in/a3.jpg"],
                        "distance": 4,
                        "splits": ["train", "validation"],
                    },
                    {"paths": ["/in/c.jpg", "/in/c2.jpg"], "distance": 0, "splits": ["train"]},
                ]
            ),  # fmt: skip
            label="clusters",
        )
        assert_that(images, equal_to([(r.key, r.split) for r in _IMAGES]), label="images")
        assert dropped is None  # only drop drops


def test_exact_duplicates_leave_in_the_same_pass_and_clusters_of_one_vanish():
    """c2 and a3 are exact duplicates (dedupe's rows): gone from the images, and from the
    clusters, c's cluster with them (an image with its own copy is no near-duplicate)."""
    rows = [
        {"path": "/in/c2.jpg", "duplicate_of": "/in/c.jpg", "sha256": "c"},
        {"path": "/in/a3.jpg", "duplicate_of": "/in/a.jpg", "sha256": "a"},
    ]
    with TestPipeline() as p:
        duplicates = p | "Rows" >> beam.Create(rows)
        out = (
            p
            | beam.Create([_IMAGES[:3], _IMAGES[3:]])
            | FindNearDuplicates("report", DEFAULT_THRESHOLD, duplicates=duplicates)
        )
        assert_that(
            out["clusters"] | beam.Map(lambda c: c.to_dict()),
            equal_to(
                [
                    {
                        "paths": ["/in/a.jpg", "/in/a2.jpg"],
                        "distance": 2,
                        "splits": ["train", "validation"],
                    }
                ]
            ),  # fmt: skip
            label="clusters",
        )
        assert_that(
            out["images"] | beam.FlatMap(lambda b: [r.key for r in b]),
            equal_to([r.key for r in _IMAGES if r.key not in ("c2.jpg", "a3.jpg")]),
            label="images",
        )


def test_no_images_no_clusters():
    with TestPipeline() as p:
        out = p | beam.Create([]) | FindNearDuplicates("group", DEFAULT_THRESHOLD)
        assert_that(out["clusters"], equal_to([]), label="clusters")
        assert_that(out["images"], equal_to([]), label="images")


def test_group_puts_each_cluster_and_its_groups_in_one_split():
    """The cluster takes the split of its first image by key (a.jpg's validation), and a3's
    group mate, in no cluster itself, moves with a3."""
    for clusters, images, _ in _run("group"):
        moved = {"a2.jpg": "validation", "a3.jpg": "validation", "mate.jpg": "validation"}
        assert_that(
            images,
            equal_to([(r.key, moved.get(r.key, r.split)) for r in _IMAGES]),
            label="images",
        )
        assert_that(
            clusters | beam.Map(lambda c: c["splits"]),
            equal_to([["validation"], ["train"]]),
            label="splits",
        )


def test_drop_keeps_the_first_by_key_and_records_the_others():
    for _, images, dropped in _run("drop"):
        gone = {"a2.jpg", "a3.jpg", "c2.jpg"}
        assert_that(
            images,
            equal_to([(r.key, r.split) for r in _IMAGES if r.key not in gone]),
            label="images",
        )
        assert_that(
            dropped,
            equal_to(
                [
                    {
                        "path": "/in/a2.jpg",
                        "duplicate_of": "/in/a.jpg",
                        "sha256": "a2.jpg",
                        "distance": 2,
                    },
                    {
                        "path": "/in/a3.jpg",
                        "duplicate_of": "/in/a.jpg",
                        "sha256": "a3.jpg",
                        "distance": 4,
                    },
                    {
                        "path": "/in/c2.jpg",
                        "duplicate_of": "/in/c.jpg",
                        "sha256": "c2.jpg",
                        "distance": 0,
                    },
                ]
            ),  # fmt: skip
            label="dropped",
        )


def test_spanning_pairs_link_the_same_components_with_fewer_pairs():
    """A long chain, a dense clique and random links: the same components, <= n - 1 pairs."""
    rng = np.random.default_rng(7)
    n = 400
    chain = [(k, k + 1) for k in range(100, 199)][::-1]  # settles only by pointer jumping
    clique = list(itertools.combinations(range(200, 240), 2))
    random = [tuple(int(x) for x in rng.integers(240, n, 2)) for _ in range(80)]
    i, j = (np.array(side) for side in zip(*(chain + clique + random), strict=True))
    a, b = spanning_pairs(n, i, j)
    assert len(a) <= n - 1 < len(i)
    assert components(zip(a.tolist(), b.tolist(), strict=True)) == components(
        (x, y) for x, y in zip(i.tolist(), j.tolist(), strict=True) if x != y
    )
