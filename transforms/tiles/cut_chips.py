"""Cut chips: each inspected scene becomes its chips (--tile), planned like files, by name only."""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.elements import Chip, InspectedChip, InspectedImage
from transforms.tiles.chip_records import TILE_REASON
from transforms.tiles.grid import TileOptions

__all__ = ["CutChips", "chips_of"]


def chips_of(image: InspectedImage, tiles: TileOptions) -> list[InspectedChip]:
    """The chips of one inspected image, in grid order. Each keeps the source's split and group
    (a scene never straddles splits), takes its key from the source's and its window (so its
    shard is its own hash: a scene's chips spread over the shards and their writers) and a share
    of the source's bytes for shard sizing."""
    fields = {f.name: getattr(image, f.name) for f in dataclasses.fields(InspectedImage)}
    area = image.height * image.width
    transcode = ",".join(filter(None, [image.transcode, TILE_REASON]))
    chips = []
    for w in tiles.windows(image.height, image.width):
        chip = Chip(w.y, w.x, w.height, w.width, image.height, image.width)
        fields.update(
            key=f"{image.key}#tile={w.y},{w.x}",
            height=w.height,
            width=w.width,
            size=max(1, image.size * w.height * w.width // area),
            transcode=transcode,
            stats=None,
        )
        chips.append(InspectedChip(**fields, chip=chip))
    return chips


class CutChips(beam.PTransform):
    """[InspectedImage] -> [InspectedChip]: every image's chips, one batch per input batch."""

    def __init__(self, tiles: TileOptions):
        super().__init__()
        self._tiles = tiles

    def expand(self, images):
        tiles = self._tiles
        counter = Metrics.counter("imgrec", "chips_planned")

        def cut(batch: list[InspectedImage]) -> list[list[InspectedChip]]:
            chips = [chip for image in batch for chip in chips_of(image, tiles)]
            counter.inc(len(chips))
            return [chips] if chips else []

        # [InspectedChip]: names and windows, never pixels
        return images | "ChipsOfEachImage" >> beam.FlatMap(cut)
