"""Objects drawn on the contact sheet's thumbnails: the label map and instance masks as
translucent colour, boxes with their class names on top (Pillow only: the report is TF-free)."""

from __future__ import annotations

import collections
import dataclasses
import io

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from pipeline.report.charts import PALETTE
from pipeline.report.objects import RecordObjects, read_objects

__all__ = ["ObjectDrawer", "class_colours"]

# How much of a mask's colour covers the image under it: enough to see, not to hide it.
MASK_ALPHA = 0.45
# A box's line in thumbnail pixels: one pixel is lost in a photo's texture.
LINE_PX = 2
_TEXT = "#fff"


def class_colours(annotations: dict) -> dict[int, str]:
    """Class id -> its colour: the label map's order through the charts' palette."""
    return {
        int(c["id"]): PALETTE[i % len(PALETTE)]
        for i, c in enumerate(annotations.get("label_map", []))
    }


def _rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], np.float64)


@dataclasses.dataclass(frozen=True)
class ObjectDrawer:
    """Draws one record's objects on its thumbnail."""

    colours: dict[int, str]  # class id -> colour
    segmentation_colours: dict[int, str]  # label-map value -> colour (background, ignore: none)
    thumb_px: int  # the thumbnail's longer side

    @classmethod
    def of(cls, info: dict, thumb_px: int) -> ObjectDrawer | None:
        """The drawer of an annotated dataset; None for one without annotations."""
        annotations = info.get("annotations")
        if annotations is None:
            return None
        colours = class_colours(annotations)
        shown = [
            c
            for c in annotations.get("segmentation_classes") or []
            if c["value"] != annotations.get("ignore_value") and c["name"] != "background"
        ]
        # A value that is a class id takes the class's colour, so the two overlays agree.
        by_value = {
            int(c["value"]): colours.get(int(c["value"]), PALETTE[i % len(PALETTE)])
            for i, c in enumerate(shown)
        }
        return cls(colours, by_value, thumb_px)

    def draw(self, image: Image.Image, record: bytes) -> tuple[Image.Image, list[str]]:
        """The record's thumbnail (RGB, longer side thumb_px) with its objects drawn.

        Returns:
            The image, and "NAME xN" of each class among its objects, the most first.
        """
        image = image.convert("RGB")
        image.thumbnail((self.thumb_px, self.thumb_px))
        objects = read_objects(record)
        pixels = np.asarray(image, np.float64).copy()
        if objects.segmentation:
            self._paint_label_map(pixels, objects.segmentation)
        for mask, label in zip(objects.masks, objects.labels, strict=False):
            shape = pixels.shape[:2]
            area = _mask_pixels(mask, shape)
            if area is not None:
                _paint(pixels, area > 0, self.colours.get(label, PALETTE[7]))
        image = Image.fromarray(np.rint(pixels).astype(np.uint8))
        self._draw_boxes(image, objects)
        names = collections.Counter(objects.texts)
        return image, [f"{n} ×{k}" if k > 1 else n for n, k in names.most_common()]

    def _paint_label_map(self, pixels: np.ndarray, png: bytes) -> None:
        values = _mask_pixels(png, pixels.shape[:2])
        if values is None:
            return
        for value, colour in self.segmentation_colours.items():
            _paint(pixels, values == value, colour)

    def _draw_boxes(self, image: Image.Image, objects: RecordObjects) -> None:
        """Each box's outline and, at its top-left corner, its class name on its colour."""
        draw = ImageDraw.Draw(image)
        font = ImageFont.load_default()
        w, h = image.size
        for (xmin, ymin, xmax, ymax), label, text in zip(
            objects.boxes, objects.labels, objects.texts, strict=False
        ):
            colour = self.colours.get(label, PALETTE[7])
            # Pixel edges: a box over [xmin, xmax) covers the columns up to xmax * w - 1.
            x0, y0 = round(xmin * w), round(ymin * h)
            x1, y1 = max(x0, round(xmax * w) - 1), max(y0, round(ymax * h) - 1)
            draw.rectangle((x0, y0, x1, y1), outline=colour, width=LINE_PX)
            _, _, right, bottom = draw.textbbox((x0 + 2, y0 + 1), text, font=font)
            draw.rectangle((x0, y0, right + 1, bottom + 1), fill=colour)
            draw.text((x0 + 2, y0 + 1), text, fill=_TEXT, font=font)


def _mask_pixels(png: bytes, shape: tuple[int, int]) -> np.ndarray | None:
    """A mask or label map PNG as an H x W array of the thumbnail's size (nearest values), or
    None when it does not open (`imgrec verify` names it)."""
    try:
        with Image.open(io.BytesIO(png)) as mask:
            if mask.mode not in ("L", "P", "1", "I", "I;16"):
                mask = mask.convert("L")
            resized = mask.resize((shape[1], shape[0]), Image.Resampling.NEAREST)
            return np.asarray(resized)
    except (OSError, ValueError, SyntaxError):  # not a PNG Pillow opens
        return None


def _paint(pixels: np.ndarray, where: np.ndarray, colour: str) -> None:
    """Blend `colour` into the pixels `where` is true, MASK_ALPHA of it."""
    pixels[where] = pixels[where] * (1 - MASK_ALPHA) + _rgb(colour) * MASK_ALPHA
