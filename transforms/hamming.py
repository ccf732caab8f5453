"""Near-equal 64-bit perceptual hashes found without comparing all pairs (multi-index hashing).

The 64 bits are cut into BANDS bands. Two hashes at most k bits apart differ in at most
k // BANDS bits of one band (pigeonhole), so each hash is compared only with the hashes whose
value in some band lies within that radius of its own: a table lookup per band value and
neighbour mask. Beam-free: transforms/near_duplicates.py runs it per band in the job, bench/
on a million hashes in one process.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import numpy as np

__all__ = [
    "BANDS",
    "DEFAULT_THRESHOLD",
    "NEAR_DUPLICATE_MODES",
    "band_edges",
    "check_near_duplicates",
    "cluster_hashes",
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
# Three bands of 21-22 bits: a band value then picks about one hash in a few million, so even a
# million-image dataset meets few candidates per lookup, and the default threshold needs a
# radius of 2 bits per band (254 neighbour masks). More bands mean narrower bands and crowded
# buckets; fewer, a radius whose masks outnumber the images.
BANDS = 3
_MAX_THRESHOLD = 16  # radius 5 per band: tens of thousands of masks, and a hash half noise
_ALL = (1 << 64) - 1
_WIDTHS = (22, 21, 21)
_BLOCK = 1 << 20
_SHIFTS = (0, 22, 43)


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


def band_edges(
    hashes: np.ndarray, band: int, threshold: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance) arrays, i < j, of the pairs of distinct unsigned `hashes` at most
    `threshold` bits apart whose values in `band` are within threshold // BANDS bits. Over
    the BANDS bands this finds every such pair (a pair may come from several bands)."""
    hashes = np.asarray(hashes, dtype=np.uint64)
    width = _WIDTHS[band]
    values = ((hashes >> np.uint64(_SHIFTS[band])) & np.uint64((1 << width) - 1)).astype(np.int64)
    order = np.argsort(values, kind="stable")
    starts, counts = _value_runs(values[order], width)
    # Most lookups find no hash: a table of one byte per band value (a few MB, in cache) sorts
    # them out before the wider tables are read.
    present = counts > 0
    found = ([], [], [])
    masks = np.array(_masks(width, threshold // BANDS), dtype=np.int64)
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
        keep = i < j  # each pair once (it is met from both ends), and never a hash with itself
        i, j = i[keep], j[keep]
        d = np.bitwise_count(hashes[i] ^ hashes[j])
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


def cluster_hashes(hashes: np.ndarray, threshold: int = DEFAULT_THRESHOLD) -> list[list[int]]:
    """The clusters (connected components at most `threshold` bits apart) of unsigned hashes,
    in one process: what the job's steps compute. Clusters of one distinct value are left out."""
    hashes = np.unique(np.asarray(hashes, dtype=np.uint64))
    pairs = []
    for band in range(BANDS):
        i, j, _ = band_edges(hashes, band, threshold)
        i, j = spanning_pairs(len(hashes), i, j)
        pairs += zip(i.tolist(), j.tolist(), strict=True)
    members: dict[int, list[int]] = {}
    for node, first in components(pairs).items():
        members.setdefault(first, []).append(int(hashes[node]))
    return sorted(sorted(m) for m in members.values())
