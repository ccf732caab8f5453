"""A photo folder as users have them: mostly JPEG, plus the formats JPEG-only readers fail on."""

from __future__ import annotations

import io
import os
import random

from PIL import Image

from tests.format_corpus import _photo

__all__ = ["NON_JPEG", "encode", "write_mixed_folder"]

# Files of write_mixed_folder whose source is not a JPEG (a JPEG-only reader fails on each
# unless --transcode jpeg re-encodes it), by file name.
NON_JPEG = {
    "plain.png": "png",
    "transparent.png": "png",
    "gray.png": "png",
    "palette.png": "png",
    "photo_saved_as.jpg": "png",  # a PNG under a .jpg name, as in ImageNet's train split
    "bitmap.bmp": "bmp",
    "lossy.webp": "webp",
    "alpha.webp": "webp",
    "still.gif": "gif",
    "animated.gif": "gif",
}


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def write_mixed_folder(root: str, num_jpegs: int = 12, seed: int = 31) -> dict[str, str]:
    """Write `root/{cat,dog}/...`; returns {path: source format}.

    JPEGs (colour, gray, CMYK) and every file of NON_JPEG; the RGBA PNG's left half is fully
    transparent (black underneath), so where its alpha went shows in the pixels.
    """
    rng = random.Random(seed)
    out: dict[str, str] = {}

    def add(label: str, name: str, data: bytes, fmt: str) -> None:
        os.makedirs(os.path.join(root, label), exist_ok=True)
        path = os.path.join(root, label, name)
        with open(path, "wb") as f:
            f.write(data)
        out[path] = fmt

    def photo() -> Image.Image:
        return _photo(rng, rng.choice((40, 57, 64)), rng.choice((30, 41, 48)))

    for i in range(num_jpegs):
        add(("cat", "dog")[i % 2], f"photo_{i}.jpg", encode(photo(), "JPEG", quality=90), "jpeg")
    add("cat", "cmyk.jpg", encode(photo().convert("CMYK"), "JPEG"), "jpeg")
    add("dog", "gray.jpg", encode(photo().convert("L"), "JPEG"), "jpeg")
    add("cat", "plain.png", encode(photo(), "PNG"), "png")
    rgba = photo().convert("RGBA")
    alpha = Image.new("L", rgba.size, 255)
    alpha.paste(0, (0, 0, rgba.width // 2, rgba.height))
    rgba.putalpha(alpha)
    black = Image.new("RGBA", rgba.size, (0, 0, 0, 0))
    rgba = Image.composite(rgba, black, alpha)  # transparent pixels hold black, as editors save
    add("dog", "transparent.png", encode(rgba, "PNG"), "png")
    add("cat", "gray.png", encode(photo().convert("L"), "PNG"), "png")
    add("dog", "palette.png", encode(photo().convert("P"), "PNG"), "png")
    add("cat", "photo_saved_as.jpg", encode(photo(), "PNG"), "png")
    add("dog", "bitmap.bmp", encode(photo(), "BMP"), "bmp")
    add("cat", "lossy.webp", encode(photo(), "WEBP", quality=80), "webp")
    add("dog", "alpha.webp", encode(rgba, "WEBP", lossless=True), "webp")
    pal = photo().convert("P", palette=Image.Palette.ADAPTIVE, colors=32)
    add("cat", "still.gif", encode(pal, "GIF"), "gif")
    add("dog", "animated.gif", encode(pal, "GIF", save_all=True, append_images=[pal.rotate(90)]),
        "gif")  # fmt: skip
    return out
