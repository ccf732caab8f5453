"""The record a versioned run leaves for the next one (`VERSION/.imgrec/rerun.json`): its run key
and the digest of its input listing, combinable in constant memory by the pipeline's listing
step (transforms/publish_version.py) and recomputed by a rerun (pipeline/versions/fast_rerun.py).
Beam-free and TensorFlow-free: the no-change rerun imports neither.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

__all__ = [
    "RERUN_RECORD",
    "RECORD_FORMAT",
    "listing_line",
    "reject_line",
    "line_value",
    "combine_values",
    "merge_totals",
    "digest_of",
    "listing_digest",
    "record_bytes",
]

# Where a version records what its run was (written by the pipeline's publish step and here).
RERUN_RECORD = ".imgrec/rerun.json"
# Bumped whenever what the run key or the listing digest covers changes.
RECORD_FORMAT = 1
# Listing rejects the digest covers (what matching a pattern finds); any other listing reject
# (no_split, bad_manifest_row) makes the digest unusable, so such inputs always run the pipeline.
_MATCH_REASONS = frozenset({"broken_link", "unreadable_dir", "not_a_file"})


def listing_line(path: str, size: int, stamp: str | None) -> str | None:
    """The digest line of one listed file (None: no stamp, as for manifest rows)."""
    if stamp is None or size is None or size < 0:
        return None
    return json.dumps(["file", path, int(size), stamp])


def reject_line(reject: dict) -> str | None:
    """The digest line of one listing reject (None: a reject the digest does not cover)."""
    if reject.get("reason") not in _MATCH_REASONS:
        return None
    return json.dumps(["reject", reject["path"], reject["reason"], reject.get("detail", "")])


# The digest is a sum of per-line sha256 values modulo 2**256 (with the line count): it does not
# depend on the order lines arrive in, and a pipeline combines it in constant memory per worker
# whatever the input's size (a sorted list would gather every path on one worker).
_MODULUS = 1 << 256


def line_value(line: str | None) -> int | None:
    """One digest line's contribution (None stays None: the digest is then unusable)."""
    if line is None:
        return None
    return int.from_bytes(hashlib.sha256(line.encode("utf-8")).digest(), "big")


def combine_values(values: Iterable[int | None]) -> tuple[int, int, bool]:
    """(sum mod 2**256, count, usable) of line values; combinable with `merge_totals`."""
    total, count, usable = 0, 0, True
    for value in values:
        if value is None:
            usable = False
        else:
            total = (total + value) % _MODULUS
        count += 1
    return total, count, usable


def merge_totals(parts: Iterable[tuple[int, int, bool]]) -> tuple[int, int, bool]:
    total, count, usable = 0, 0, True
    for t, c, u in parts:
        total, count, usable = (total + t) % _MODULUS, count + c, usable and u
    return total, count, usable


def digest_of(totals: tuple[int, int, bool]) -> dict | None:
    """{"sha256", "count"} of combined totals, or None when a line was unusable."""
    total, count, usable = totals
    if not usable:
        return None
    return {"sha256": f"{total:064x}", "count": count}


def listing_digest(lines: Iterable[str | None]) -> dict | None:
    """{"sha256", "count"} of a listing's lines, or None when one of them is None."""
    return digest_of(combine_values(line_value(line) for line in lines))


def record_bytes(key: str | None, digest: dict | None) -> bytes | None:
    """rerun.json's content, or None when the run cannot be reused (no key or no digest)."""
    if not key or not digest:
        return None
    body = {"format": RECORD_FORMAT, "run_key": key, "listing": digest}
    return json.dumps(body, indent=1, sort_keys=True).encode("utf-8")
