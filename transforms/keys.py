"""Stable, salted hashes of file keys: split assignment, shard assignment and in-shard order."""

from __future__ import annotations

import hashlib

from transforms.elements import ListedFile

__all__ = ["unit_hash", "int_hash", "assign_split", "stats_fraction", "wants_stats"]


def int_hash(purpose: str, seed: int, key: str) -> int:
    """A 64-bit hash of `key`, independent per purpose and seed, equal on every machine.

    sha256 rather than Python's hash(): hash() is salted per process (PYTHONHASHSEED), so it would
    break "same input, same shards" across runs and workers.
    """
    digest = hashlib.sha256(f"{purpose}\0{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def unit_hash(purpose: str, seed: int, key: str) -> float:
    """`int_hash` mapped to [0, 1)."""
    return int_hash(purpose, seed, key) / 2.0**64


def assign_split(key: str, seed: int, splits: tuple[tuple[str, float], ...]) -> str:
    """The split of `key` by cumulative fractions of a salted hash of the key alone.

    Depends on nothing but the key, the seed and the fractions: adding files never moves an
    existing file to another split.
    """
    u = unit_hash("split", seed, key)
    cumulative = 0.0
    for name, fraction in splits:
        cumulative += fraction
        if u < cumulative:
            return name
    return splits[-1][0]  # u within float rounding of 1.0


def stats_fraction(fraction: float, max_images: int, num_listed: int) -> float:
    """The share of training files sampled for pixel statistics: --stats_sample_fraction, lowered
    so that about --stats_max_images (0: no cap) of `num_listed` files are."""
    if max_images and num_listed:
        return min(fraction, max_images / num_listed)
    return fraction


def wants_stats(item: ListedFile, stats_split: str | None, fraction: float, seed: int) -> bool:
    """Whether `item` feeds the pixel statistics: in `stats_split` and in the salted-hash sample.

    One rule for inspection and for reused inspections (--resume), so both pick the same files.
    """
    if item.split != stats_split:
        return False
    return fraction >= 1.0 or unit_hash("stats", seed, item.key) < fraction
