"""`imgrec verify` of a --tile dataset: each chip inside its source, a source in one split only,
the chips counted as dataset_info.json["tiles"] says."""

from __future__ import annotations

from core import schema

__all__ = ["TileChecks"]


class TileChecks:
    """Filled record by record (`note`), then compared with dataset_info.json (`problems`)."""

    def __init__(self):
        self.splits: dict[str, set[str]] = {}  # source -> the splits its chips are in
        self.chips = 0

    def note(self, ex: dict, split: str) -> str | None:
        """A parsed chip record's problem, or None."""
        value = {key: int(ex[key].numpy()) for key in schema.TILE_KEYS}
        height, width = int(ex[schema.HEIGHT].numpy()), int(ex[schema.WIDTH].numpy())
        source = ex[schema.FILENAME].numpy().decode(errors="replace")
        self.splits.setdefault(source, set()).add(split)
        self.chips += 1
        x, y = value[schema.TILE_X], value[schema.TILE_Y]
        sides = value[schema.TILE_SOURCE_HEIGHT], value[schema.TILE_SOURCE_WIDTH]
        if x < 0 or y < 0 or y + height > sides[0] or x + width > sides[1]:
            return (
                f"chip {width}x{height} at ({x}, {y}) leaves its {sides[1]}x{sides[0]} "
                f"source {source}"
            )
        return None

    def problems(self, info: dict) -> list[str]:
        found = [
            f"{source}: chips in splits {', '.join(sorted(splits))} (a scene is one split)"
            for source, splits in sorted(self.splits.items())
            if len(splits) > 1
        ]
        expected = info["tiles"]["num_chips_written"]
        if self.chips != expected:
            found.append(f"{self.chips} chips read, dataset_info.json says {expected}")
        return found
