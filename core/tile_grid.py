"""The chip grid of --tile H[xW] / --tile_overlap N and the validated tile options.

The one statement of the rule: the planner cuts by it, the report draws it. Imports no numpy:
option parsing imports it.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["TileOptions", "Window", "axis_starts", "chip_windows", "parse_tile_size"]

# "512" or "512x256" (height x width, source pixels).
_SIZE = re.compile(r"^\s*(\d+)\s*(?:[xX]\s*(\d+))?\s*$")


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """A chip's rectangle in source pixels: rows y .. y + height, columns x .. x + width."""

    y: int
    x: int
    height: int
    width: int


def axis_starts(length: int, chip: int, overlap: int) -> list[int]:
    """Chip starts along an axis of `length`: 0, C-N, 2(C-N), ..., the last moved inward so that
    it ends at `length` (no padding); an axis shorter than the chip is one chip of `length`.

    Raises:
        ValueError: a side < 1, or an overlap that leaves no stride.
    """
    if length < 1 or chip < 1:
        raise ValueError(f"axis length {length} and chip {chip} must be >= 1")
    if not 0 <= overlap < chip:
        raise ValueError(f"overlap {overlap} must be in [0, {chip})")
    if length <= chip:
        return [0]
    stride = chip - overlap
    starts = list(range(0, length - chip, stride))
    starts.append(length - chip)  # the last chip ends at the edge, moved inward
    return starts


def chip_windows(height: int, width: int, tile: tuple[int, int], overlap: int) -> list[Window]:
    """Every chip of a height x width image, row by row (the first always at 0, 0)."""
    chip_h, chip_w = tile
    rows = axis_starts(height, chip_h, overlap)
    cols = axis_starts(width, chip_w, overlap)
    return [Window(y, x, min(chip_h, height), min(chip_w, width)) for y in rows for x in cols]


def parse_tile_size(text: str) -> tuple[int, int]:
    """(height, width) of --tile "H" or "HxW".

    Raises:
        ValueError: naming --tile and the expected form.
    """
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"--tile must be H or HxW in source pixels, e.g. --tile 512, got {text!r}")
    height = int(match.group(1))
    width = int(match.group(2) or height)
    if height < 1 or width < 1:
        raise ValueError(f"--tile sides must be >= 1, got {text!r}")
    return height, width


@dataclasses.dataclass(frozen=True)
class TileOptions:
    """--tile and its companions (each field the option of the same name, tile parsed)."""

    height: int
    width: int
    overlap: int = 0
    min_valid: float = 0.0  # chips whose valid fraction is below it are skipped
    min_object: float = 0.5  # an object is kept in a chip when this much of its area is inside
    keep_empty: float = 1.0  # the fraction of chips without objects kept (annotated runs)

    def __post_init__(self):
        if self.height < 1 or self.width < 1:
            raise ValueError(f"--tile sides must be >= 1, got {self.height}x{self.width}")
        if not 0 <= self.overlap < min(self.height, self.width):
            raise ValueError(
                f"--tile_overlap must be in [0, {min(self.height, self.width)}) for --tile "
                f"{self.height}x{self.width}, got {self.overlap}"
            )
        for name in ("min_valid", "min_object", "keep_empty"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"--tile_{name} must be in [0, 1], got {value}")

    @property
    def size(self) -> tuple[int, int]:
        return self.height, self.width

    def windows(self, height: int, width: int) -> list[Window]:
        """The chips of a height x width scene."""
        return chip_windows(height, width, self.size, self.overlap)
