"""Cut chips: each inspected scene becomes its chips (--tile), planned like files, by name only."""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam.metrics import Metrics

from core.tile_grid import TileOptions
from transforms.elements import Chip, InspectedChip, InspectedImage, PackedObjects
from transforms.keys import unit_hash
from transforms.tiles.chip_objects import cut_objects
from transforms.tiles.chip_records import TILE_REASON

__all__ = ["CutChips", "chips_of"]


def chips_of(image: InspectedImage, tiles: TileOptions, seed: int = 0) -> list[InspectedChip]:
    """The chips of one inspected image, in grid order. Each keeps the source's split and group
    (a scene never straddles splits), takes its key from the source's and its window (so its
    shard is its own hash: a scene's chips spread over the shards and their writers) and a share
    of the source's bytes for shard sizing. An annotated image's chips carry their own objects
    (chip_objects.py); a chip without any is kept when a hash of its key falls under
    --tile_keep_empty (at least one chip of each image is kept: it counts the file)."""
    fields = {f.name: getattr(image, f.name) for f in dataclasses.fields(InspectedImage)}
    area = image.height * image.width
    transcode = ",".join(filter(None, [image.transcode, TILE_REASON]))
    annotations = image.objects.unpack() if image.objects is not None else None
    chips = []
    for w in tiles.windows(image.height, image.width):
        key = f"{image.key}#tile={w.y},{w.x}"
        objects = None
        if annotations is not None:
            cut = cut_objects(annotations, image.width, image.height, w, tiles.min_object)
            if not cut.objects and unit_hash("tile_keep_empty", seed, key) >= tiles.keep_empty:
                continue
            objects = PackedObjects.pack(cut)
        chips.append((w, key, objects))
    if not chips:  # every chip empty and dropped: the first stands for the file
        w = tiles.windows(image.height, image.width)[0]
        cut = cut_objects(annotations, image.width, image.height, w, tiles.min_object)
        chips.append((w, f"{image.key}#tile=0,0", PackedObjects.pack(cut)))
    out = []
    for i, (w, key, objects) in enumerate(chips):
        fields.update(
            key=key,
            height=w.height,
            width=w.width,
            size=max(1, image.size * w.height * w.width // area),
            transcode=transcode,
            stats=None,
            objects=objects,
        )
        chip = Chip(w.y, w.x, w.height, w.width, image.height, image.width, i == 0, image.key)
        out.append(InspectedChip(**fields, chip=chip))
    return out


class CutChips(beam.PTransform):
    """[InspectedImage] -> [InspectedChip]: every image's chips, one batch per input batch."""

    def __init__(self, tiles: TileOptions, seed: int = 0):
        super().__init__()
        self._tiles = tiles
        self._seed = seed

    def expand(self, images):
        tiles, seed = self._tiles, self._seed
        counter = Metrics.counter("imgrec", "chips_planned")

        def cut(batch: list[InspectedImage]) -> list[list[InspectedChip]]:
            chips = [chip for image in batch for chip in chips_of(image, tiles, seed)]
            counter.inc(len(chips))
            return [chips] if chips else []

        # [InspectedChip]: names and windows, never pixels
        return images | "ChipsOfEachImage" >> beam.FlatMap(cut)
