"""The summary a conversion prints (Beam-free: the no-change rerun prints it too)."""

from __future__ import annotations

import os
import posixpath

from pipeline.core import schema

__all__ = ["format_summary"]


def _join(base: str, name: str) -> str:
    return posixpath.join(base.rstrip("/"), name) if "://" in base else os.path.join(base, name)


def format_summary(info: dict, output: str, seconds: float) -> str:
    """The human summary printed after a conversion."""
    lines = [
        f"imgrec: converted {info['num_listed']} listed files in {seconds:.1f} s "
        f"({info['num_listed'] / max(seconds, 1e-9):.0f} files/s) -> {output}"
    ]
    parts = []
    for split, s in info["splits"].items():
        parts.append(
            f"{split} {s['num_examples']} ({s['num_shards']} shard"
            f"{'s' if s['num_shards'] != 1 else ''}, {s['num_bytes'] / 1e6:.1f} MB)"
        )
    lines.append(f"  written     {info['num_written']:>7}   " + ", ".join(parts))
    reasons = ", ".join(f"{k} {v}" for k, v in info.get("rejected_by_reason", {}).items())
    lines.append(f"  rejected    {info['num_rejected']:>7}   {reasons}".rstrip())
    lines.append(f"  duplicates  {info['num_duplicates']:>7}")
    transcoded = ", ".join(f"{k} {v}" for k, v in info.get("transcoded_by_reason", {}).items())
    if transcoded:
        lines.append(
            f"  transcoded  {sum(info['transcoded_by_reason'].values()):>7}   {transcoded}"
        )
    total = sum(s["num_bytes"] for s in info["splits"].values())
    nshards = sum(s["num_shards"] for s in info["splits"].values())
    lines.append(
        f"  shards      {nshards:>7}   {total / 1e6:.1f} MB in all; labels: "
        f"{len(info['label_names'])}"
    )
    if info.get("num_rejected"):
        lines.append(f"  reasons per file: {_join(output, schema.REJECTED)}")
    return "\n".join(lines)
