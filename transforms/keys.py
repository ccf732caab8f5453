"""Stable, salted hashes of file keys: split assignment, shard assignment and in-shard order."""

from __future__ import annotations

import hashlib
import hmac

from transforms.elements import ListedFile

__all__ = [
    "unit_hash",
    "int_hash",
    "assign_split",
    "group_hash",
    "split_key",
    "stats_fraction",
    "wants_stats",
]

# Hex digits of image/group kept: 128 bits, no collision between groups of any real dataset.
_GROUP_HEX = 32


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


def split_key(key: str, group: str | None) -> str:
    """What a file's split is hashed from: its group's value under --group_by (every file of
    the group gets the same split, and adding files never moves a group), else its key."""
    return f"group\0{group}" if group else key


def group_hash(group: str, salt: str, seed: int) -> str:
    """image/group: an HMAC-SHA256 of the group's value (a patient ID, say), never the value.

    Keyed by --group_salt, or by a key derived from the seed when none is given (stable across
    runs; whoever knows the seed can test guessed values, which --group_salt prevents).
    """
    key = (salt or f"imgrec-group\0{seed}").encode()
    return hmac.new(key, group.encode(), hashlib.sha256).hexdigest()[:_GROUP_HEX]


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
