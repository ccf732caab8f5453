"""dataset_info.json["tiles"]: the chip grid's options and what became of the chips."""

from __future__ import annotations

import collections
import dataclasses

from core.tile_grid import TileOptions
from transforms.elements import ShardInfo

__all__ = ["describe_tiles"]


def describe_tiles(tiles: TileOptions, shards: list[ShardInfo]) -> dict:
    """{"options": the --tile options, "num_chips_written": N, "num_chips_skipped": N,
    "skipped_by_scene": {source path: chips skipped by --tile_min_valid}} over every shard."""
    written, skipped = 0, collections.Counter()
    for shard in shards:
        if shard.chips:
            written += shard.chips["written"]
            skipped.update(shard.chips["skipped"])
    return {
        "options": dataclasses.asdict(tiles),
        "num_chips_written": written,
        "num_chips_skipped": sum(skipped.values()),
        "skipped_by_scene": dict(sorted(skipped.items())),
    }
