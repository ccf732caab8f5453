"""Near-equal 64-bit perceptual hashes found without comparing all pairs (multi-index hashing).

The 64 bits are cut into m bands. Two hashes at most k bits apart differ in at most k // m
bits of one band (pigeonhole), so each hash is compared only with the hashes whose value in
some band lies within that radius of its own: a table lookup per band value and neighbour
mask. Beam-free: transforms/near_duplicates.py runs it in the job, bench/ on a
million hashes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np

__all__ = [
    "CROP_MARGIN",
    "DEFAULT_THRESHOLD",
    "NEAR_DUPLICATE_MODES",
    "band_edges",
    "bands",
    "check_near_duplicates",
    "cluster_hashes",
    "cluster_ids",
    "components",
    "distance",
    "largest_distance",
    "spanning_pairs",
]

# report: list clusters; group: each cluster in one split; drop: keep the first by key; off.
NEAR_DUPLICATE_MODES = ("report", "group", "drop", "off")
# Bits two pHashes of one photo may differ by: the largest at which bench/near_duplicates.py's
# distinct images (photos, texture crops, video frames, document scans) stay apart (<= 1 %
# merged; the next step up merges same-layout scans), while it finds >= 95 % of the edited
# copies (resize, JPEG quality, 5 % crop, 15 % brightness/contrast, PNG). docs/benchmarks.md.
DEFAULT_THRESHOLD = 6
# A hash within this many bits fewer of another image's crop window (transforms/images/phash.py)
# links them too: each window is one more chance for distinct images to meet, and at the full
# threshold the benchmark's same-layout document scans did (bench/ablations/crop_windows.py).
CROP_MARGIN = 2
_MAX_THRESHOLD = 16  # a hash half noise
_ALL = (1 << 64) - 1
_BLOCK = 1 << 20
# Bands of 4 to 22 bits: a band's lookup tables stay a few MB.
_MIN_BANDS, _MAX_BANDS = 3, 16
# A candidate pair costs a few lookups (gathered, compared, kept or not); a table entry, a
# fraction of one (zeroed, then indexed).
_CANDIDATE_COST = 4
_ENTRY_COST = 0.1


def check_near_duplicates(mode: str, threshold: int, split_from: str) -> None:
    """--near_duplicates and --near_duplicates_threshold. Raises ValueError naming the fix."""
    if mode not in NEAR_DUPLICATE_MODES:
        raise ValueError(
            f"--near_duplicates must be one of {', '.join(NEAR_DUPLICATE_MODES)}, got {mode!r}"
        )
    if not 0 <= threshold <= _MAX_THRESHOLD:
        raise ValueError(
            f"--near_duplicates_threshold must be in 0..{_MAX_THRESHOLD} bits, got {threshold}"
        )
    if mode == "group" and split_from != "hash":
        raise ValueError(
            f"--near_duplicates group with --split_from {split_from}: the splits are given, so "
            "they cannot be moved; use --near_duplicates report (or drop)"
        )


def distance(a: int, b: int) -> int:
    """Hamming distance of two 64-bit hashes (signed or not)."""
    return ((a ^ b) & 0xFFFF_FFFF_FFFF_FFFF).bit_count()


def largest_distance(hashes: Iterable[int]) -> int:
    """The largest distance between two of `hashes` (0 for one)."""
    h = np.array([x & _ALL for x in hashes], dtype=np.uint64)
    rows = max(1, _BLOCK // max(1, len(h)))  # bounded memory for a large cluster
    return max(
        (
            int(np.bitwise_count(h[s : s + rows, None] ^ h[None, :]).max())
            for s in range(0, len(h), rows)
        ),
        default=0,
    )


def spanning_pairs(n: int, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (node, its component's smallest node) linking the same components of n nodes as
    the pairs (i, j): at most n - 1 of them, however many near-copies one photo has."""
    labels = np.arange(n)
    while True:
        low = np.minimum(labels[i], labels[j])
        new = labels.copy()
        np.minimum.at(new, i, low)
        np.minimum.at(new, j, low)
        new = new[new]  # pointer jumping: long chains settle in few rounds
        if np.array_equal(new, labels):
            break
        labels = new
    linked = np.flatnonzero(labels != np.arange(n))
    return linked, labels[linked]


def _masks(width: int, radius: int) -> list[int]:
    """Every `width`-bit mask with at most `radius` bits set, 0 first."""
    masks = [0]
    for r in range(1, radius + 1):
        masks += [sum(1 << i for i in bits) for bits in itertools.combinations(range(width), r)]
    return masks


def _layout(m: int) -> list[tuple[int, int]]:
    """(shift, width) of m bands over the 64 bits, the wider ones first."""
    widths = [64 // m + (k < 64 % m) for k in range(m)]
    return [(sum(widths[:k]), w) for k, w in enumerate(widths)]


def bands(n: int, threshold: int, stored: int | None = None) -> tuple[list[tuple[int, int]], int]:
    """The bands ((shift, width) each) and the radius in each to search n hashes with, among
    themselves or in a table of `stored` hashes: the fewest lookups and candidate pairs. Wide
    bands hold few hashes a value but need many neighbour masks (a million hashes: 3 bands,
    radius 2 at the default threshold); narrow ones need few masks but crowd (ten thousand
    hashes: 4 bands of 16 bits, radius 1)."""
    stored = n if stored is None else stored

    def cost(m: int) -> float:
        radius = threshold // m
        total = 0.0
        for _, width in _layout(m):
            lookups = n * sum(math.comb(width, r) for r in range(radius + 1))
            total += lookups * (1 + _CANDIDATE_COST * stored / 2**width) + _ENTRY_COST * 2**width
        return total

    m = min(range(_MIN_BANDS, _MAX_BANDS + 1), key=cost)
    return _layout(m), threshold // m


def band_edges(
    hashes: np.ndarray, band: tuple[int, int], radius: int, threshold: int, table=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance) arrays of the pairs at most `threshold` bits apart whose values in
    `band` ((shift, width)) are within `radius` bits: of distinct unsigned `hashes` (i < j),
    or, given a `table` of unsigned hashes, of hashes[i] and table[j]. Over the bands of
    `bands` this finds every such pair (a pair may come from several)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    stored = hashes if table is None else np.asarray(table, dtype=np.uint64)
    shift, width = band

    def band_values(h: np.ndarray) -> np.ndarray:
        return ((h >> np.uint64(shift)) & np.uint64((1 << width) - 1)).astype(np.int64)

    values = band_values(hashes)
    stored_values = values if table is None else band_values(stored)
    order = np.argsort(stored_values, kind="stable")
    starts, counts = _value_runs(stored_values[order], width)
    # Most lookups find no hash: a table of one byte per band value (a few MB, in cache) sorts
    # them out before the wider tables are read.
    present = counts > 0
    found = ([], [], [])
    masks = np.array(_masks(width, radius), dtype=np.int64)
    # Several masks a step (a block of about _BLOCK lookups): numpy's per-call cost, not
    # Python's loop, then decides a small dataset's time.
    step = max(1, _BLOCK // max(1, len(values)))
    for first in range(0, len(masks), step):
        block = masks[first : first + step]
        query = (values[:, None] ^ block[None, :]).ravel()
        rows = np.flatnonzero(present[query])
        hit = query[rows]
        reps = counts[hit]
        i = np.repeat(rows // len(block), reps)
        offsets = np.arange(len(i)) - np.repeat(np.cumsum(reps) - reps, reps)
        j = order[np.repeat(starts[hit], reps) + offsets]
        if table is None:  # each pair once (met from both ends), never a hash with itself
            keep = i < j
            i, j = i[keep], j[keep]
        d = np.bitwise_count(hashes[i] ^ stored[j])
        close = d <= threshold
        for out, part in zip(found, (i[close], j[close], d[close]), strict=True):
            out.append(part)
    return tuple(np.concatenate(parts) for parts in found)


def _value_runs(sorted_values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, counts), each indexed by band value: where that value's run begins in
    `sorted_values` and how long it is (0: no hash has it)."""
    values, first, counts = np.unique(sorted_values, return_index=True, return_counts=True)
    starts = np.zeros(1 << width, dtype=np.int32)
    runs = np.zeros(1 << width, dtype=np.int32)
    starts[values], runs[values] = first, counts
    return starts, runs


def components(edges: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Union-find over `edges` (pairs of nodes): {node: the smallest node of its component}."""
    parent: dict[int, int] = {}

    def root(a: int) -> int:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]  # path halving
            a = parent[a]
        return a

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {a: root(a) for a in parent}


def cluster_ids(
    hashes: np.ndarray, threshold: int = DEFAULT_THRESHOLD, crops=None
) -> dict[int, int]:
    """{hash: its cluster's smallest hash} for each of the unsigned `hashes` (repeats allowed)
    in a cluster: a connected component of distinct values at most `threshold` bits apart, or a
    value held more than once. `crops`: (owners, windows), unsigned arrays: a hash at most
    threshold - CROP_MARGIN bits from a window links with the window's owner (one of hashes)."""
    values, counts = np.unique(np.asarray(hashes, dtype=np.uint64), return_counts=True)
    pairs = [(k, k) for k in np.flatnonzero(counts > 1).tolist()]
    layout, radius = bands(len(values), threshold)
    for band in layout:
        i, j, _ = band_edges(values, band, radius, threshold)
        i, j = spanning_pairs(len(values), i, j)  # the same clusters, at most one pair a value
        pairs += zip(i.tolist(), j.tolist(), strict=True)
    if crops is not None and len(crops[1]) and threshold >= CROP_MARGIN:
        pairs += _crop_pairs(values, *crops, threshold - CROP_MARGIN)
    # values are sorted: a component's smallest node is its smallest hash
    return {int(values[node]): int(values[first]) for node, first in components(pairs).items()}


def _crop_pairs(values: np.ndarray, owners, windows, threshold: int) -> list[tuple[int, int]]:
    """Pairs of indices into the sorted unique `values`: a value and the owner of a window at
    most `threshold` bits from it (each owner is one of values)."""
    owners = np.asarray(owners, dtype=np.uint64)
    owner = np.searchsorted(values, owners)
    if len(owner) and (owner.max() >= len(values) or not np.array_equal(values[owner], owners)):
        raise ValueError("every crop window's owner must be one of the hashes clustered")
    windows = np.asarray(windows, dtype=np.uint64)
    pairs = []
    layout, radius = bands(len(values), threshold, len(windows))
    for band in layout:
        i, j, _ = band_edges(values, band, radius, threshold, windows)
        j = owner[j]
        keep = i != j
        i, j = spanning_pairs(len(values), i[keep], j[keep])
        pairs += zip(i.tolist(), j.tolist(), strict=True)
    return pairs


def cluster_hashes(
    hashes: np.ndarray, threshold: int = DEFAULT_THRESHOLD, crops=None
) -> list[list[int]]:
    """The clusters (connected components at most `threshold` bits apart, `crops` as
    cluster_ids) of unsigned hashes, in one process: what the job computes. Clusters of one
    distinct value are left out."""
    members: dict[int, list[int]] = {}
    unique = np.unique(np.asarray(hashes, dtype=np.uint64))
    for value, first in cluster_ids(unique, threshold, crops).items():
        members.setdefault(first, []).append(value)
    return sorted(sorted(m) for m in members.values())
