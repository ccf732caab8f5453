"""report.html's scenes (--tile): each scene as an overview pasted from its chips, with its grid.

Chips found in the report's bounded read are pasted where they were cut, outlined in green; with
every record read, the grid's chips missing from the records (skipped by --tile_min_valid or
--tile_keep_empty) are outlined in red. Counts come from dataset_info.json["tiles"].
"""

from __future__ import annotations

import base64
import html
import io

from PIL import Image, ImageDraw

from core import schema, storage
from core.tile_grid import chip_windows
from pipeline.report.scan import SCAN_BYTES, parse_example, read_records
from pipeline.report.thumbs import open_stored

__all__ = ["MAX_SCENES", "OVERVIEW_PX", "tile_section"]

# Scenes drawn at most, and their overview's longer side: a page that opens at once.
MAX_SCENES = 6
OVERVIEW_PX = 480
_KEPT, _SKIPPED = (40, 200, 90), (230, 40, 40)
_KEYS = {
    schema.FILENAME, schema.TILE_X, schema.TILE_Y, schema.TILE_SOURCE_HEIGHT,
    schema.TILE_SOURCE_WIDTH, schema.ENCODED, schema.FORMAT, schema.HEIGHT, schema.WIDTH,
    schema.CHANNELS, schema.DTYPE,
}  # fmt: skip


def _scene_chips(data_dir: str, info: dict) -> tuple[dict[str, list[dict]], bool]:
    """({source: [parsed chip record]} of the first MAX_SCENES sources met, whether every
    record was read)."""
    scenes: dict[str, list[dict]] = {}
    budget, complete = SCAN_BYTES, True
    for split in info["splits"].values():
        for shard in split.get("shards", []):
            if not shard.get("num_examples"):
                continue
            for record in read_records(storage.join(data_dir, shard["file"]), budget):
                budget -= len(record)
                fields = parse_example(record, _KEYS)
                source = fields[schema.FILENAME].decode(errors="replace")
                if source in scenes or len(scenes) < MAX_SCENES:
                    scenes.setdefault(source, []).append(fields)
            if budget <= 0:
                complete = False
    return scenes, complete


def _overview(chips: list[dict], options: dict, complete: bool) -> str:
    """One scene's overview as a JPEG data URI."""
    height, width = (
        int(chips[0][schema.TILE_SOURCE_HEIGHT]),
        int(chips[0][schema.TILE_SOURCE_WIDTH]),
    )
    scale = OVERVIEW_PX / max(height, width)
    canvas = Image.new("RGB", (max(1, round(width * scale)), max(1, round(height * scale))))
    draw = ImageDraw.Draw(canvas)
    seen = set()
    for fields in chips:
        y, x = int(fields[schema.TILE_Y]), int(fields[schema.TILE_X])
        h, w = int(fields[schema.HEIGHT]), int(fields[schema.WIDTH])
        seen.add((y, x))
        box = (round(x * scale), round(y * scale), round((x + w) * scale), round((y + h) * scale))
        try:
            image = open_stored(fields[schema.ENCODED], fields).convert("RGB")
            size = (max(1, box[2] - box[0]), max(1, box[3] - box[1]))
            canvas.paste(image.resize(size), box[:2])
        except (OSError, ValueError):  # a chip the report cannot show: its outline stays
            pass
    grid = chip_windows(height, width, (options["height"], options["width"]), options["overlap"])
    for w in grid:
        if (w.y, w.x) in seen or complete:
            colour = _KEPT if (w.y, w.x) in seen else _SKIPPED
            box = (w.x * scale, w.y * scale, (w.x + w.width) * scale - 1,
                   (w.y + w.height) * scale - 1)  # fmt: skip
            draw.rectangle(box, outline=colour)
    buf = io.BytesIO()
    canvas.save(buf, "JPEG", quality=80)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def tile_section(data_dir: str, info: dict) -> list[str]:
    """The scenes section of a --tile dataset ([] for another)."""
    tiles = info.get("tiles")
    if not tiles:
        return []
    options, skipped = tiles["options"], tiles.get("skipped_by_scene", {})
    scenes, complete = _scene_chips(data_dir, info)
    out = [
        "<h2 id=scenes>Scenes</h2>",
        f"<p>{tiles['num_chips_written']} chips of {options['height']}x{options['width']} "
        f"(overlap {options['overlap']}), {tiles['num_chips_skipped']} skipped by "
        "--tile_min_valid. Green: chips written; red: chips of the grid not written.</p>",
    ]
    for source, chips in scenes.items():
        e = html.escape
        out.append(
            f"<figure><img src='{_overview(chips, options, complete)}' alt='{e(source)}'>"
            f"<figcaption>{e(source)}: {len(chips)} chips shown, "
            f"{skipped.get(source, 0)} skipped</figcaption></figure>"
        )
    return out
