"""Generated photo corpus for bench/near_duplicates.py: distinct natural-looking images, hard
distinct cases (crops of one texture, frames of one video, document scans) and edited copies."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFilter

__all__ = ["EDITS", "edit", "encode", "frames", "original", "photo", "scans", "texture_crops"]


def _pink(rng: np.random.Generator, h: int, w: int, beta: float) -> np.ndarray:
    """1/f^beta noise in [-1, 1]: the power spectrum of natural scenes."""
    fy = np.fft.fftfreq(h)[:, None]
    fx = np.fft.rfftfreq(w)[None, :]
    f = np.sqrt(fx * fx + fy * fy)
    f[0, 0] = 1.0
    spectrum = (rng.normal(size=f.shape) + 1j * rng.normal(size=f.shape)) / f ** (beta / 2)
    spectrum[0, 0] = 0
    field = np.fft.irfft2(spectrum, s=(h, w))
    return field / (np.abs(field).max() + 1e-9)


def _scene(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    """Sky/ground gradients, 1/f texture and soft shapes: a photo's statistics, not its content."""
    y = np.linspace(0, 1, h)[:, None, None]
    horizon = rng.uniform(0.2, 0.8)
    sky = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    ground = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    top = sky[0] + (sky[1] - sky[0]) * np.clip(y / horizon, 0, 1)
    bottom = ground[0] + (ground[1] - ground[0]) * np.clip((y - horizon) / (1 - horizon), 0, 1)
    base = np.where(y < horizon, top, bottom) * np.ones((1, w, 1))
    tint = rng.uniform(20, 70, 3)
    base = base + _pink(rng, h, w, rng.uniform(1.6, 2.6))[:, :, None] * tint
    im = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(im)
    for _ in range(rng.integers(3, 14)):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rx, ry = rng.uniform(0.03, 0.3) * w, rng.uniform(0.03, 0.3) * h
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((cx - rx, cy - ry, cx + rx, cy + ry), fill=color)
        else:
            n = int(rng.integers(3, 7))
            angles = np.sort(rng.uniform(0, 2 * np.pi, n))
            pts = [(cx + rx * np.cos(a), cy + ry * np.sin(a)) for a in angles]
            draw.polygon(pts, fill=color)
    return im.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 2.0)))


def photo(seed: int, size: tuple[int, int] | None = None) -> Image.Image:
    """One distinct generated photo (RGB); `size` (w, h) or a random one around 400-640 px."""
    rng = np.random.default_rng(seed)
    w, h = size or (int(rng.integers(400, 641)), int(rng.integers(300, 481)))
    im = _scene(rng, h, w)
    noise = rng.normal(0, rng.uniform(1, 6), (h, w, 1))  # sensor noise
    return Image.fromarray(np.clip(np.asarray(im) + noise, 0, 255).astype(np.uint8))


def texture_crops(seed: int, count: int, side: int = 256) -> list[Image.Image]:
    """`count` non-overlapping crops of one large texture (one material, distinct images)."""
    rng = np.random.default_rng(seed)
    cols = int(np.ceil(np.sqrt(count)))
    field = _pink(rng, side * cols, side * cols, rng.uniform(1.0, 1.8))
    colour = rng.uniform(60, 200, 3)
    pixels = np.clip(colour + field[:, :, None] * rng.uniform(40, 90, 3), 0, 255).astype(np.uint8)
    return [
        Image.fromarray(pixels[r * side : (r + 1) * side, c * side : (c + 1) * side])
        for r in range(cols)
        for c in range(cols)
    ][:count]


def frames(seed: int, count: int, step: float = 0.2, size: tuple[int, int] = (480, 360)):
    """`count` frames of one video: the camera pans `step` of a frame between frames over a wide
    scene while one object crosses it (the frames a user would keep, one every second or so)."""
    rng = np.random.default_rng(seed)
    w, h = size
    wide = _scene(rng, h, int(w * (1 + step * count)))
    out = []
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    for i in range(count):
        x = int(i * step * w)
        frame = wide.crop((x, 0, x + w, h))
        draw = ImageDraw.Draw(frame)
        ox, oy = w * (0.1 + 0.8 * i / max(count - 1, 1)), h * rng.uniform(0.3, 0.7)
        draw.ellipse((ox - 40, oy - 30, ox + 40, oy + 30), fill=colour)
        out.append(frame)
    return out


def scans(seed: int, count: int, size: tuple[int, int] = (425, 550)) -> list[Image.Image]:
    """`count` distinct document scans: text-like lines in columns, figures, a grey paper tone."""
    rng = np.random.default_rng(seed)
    w, h = size
    out = []
    for _ in range(count):
        paper = int(rng.integers(215, 250))
        im = Image.new("L", size, paper)
        draw = ImageDraw.Draw(im)
        columns = int(rng.integers(1, 3))
        col_w = (w - 60) // columns
        for c in range(columns):
            y = int(rng.integers(30, 90))
            while y < h - 40:
                if rng.random() < 0.12:  # a figure or a table
                    fh = int(rng.integers(50, 160))
                    draw.rectangle((30 + c * col_w, y, 20 + (c + 1) * col_w, y + fh),
                                   fill=int(rng.integers(60, 200)))  # fmt: skip
                    y += fh + 12
                    continue
                length = col_w * rng.uniform(0.3, 1.0) if rng.random() < 0.2 else col_w - 10
                draw.rectangle((30 + c * col_w, y, 30 + c * col_w + length, y + 5), fill=40)
                y += int(rng.integers(10, 16)) + (
                    int(rng.integers(8, 25)) if rng.random() < 0.1 else 0
                )
        arr = np.asarray(im, dtype=np.float64) + rng.normal(0, 4, (h, w))
        out.append(Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).convert("RGB"))
    return out


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _crop(im: Image.Image, rng: np.random.Generator) -> Image.Image:
    """Up to 5 % of the width and of the height cut, split at random between the two sides."""
    w, h = im.size
    cw, ch = int(w * rng.uniform(0.02, 0.05)), int(h * rng.uniform(0.02, 0.05))
    left, top = int(rng.integers(0, cw + 1)), int(rng.integers(0, ch + 1))
    return im.crop((left, top, w - (cw - left), h - (ch - top)))


def _resize(im: Image.Image, rng: np.random.Generator) -> Image.Image:
    scale = rng.uniform(0.3, 0.8)
    return im.resize(
        (max(16, int(im.width * scale)), max(16, int(im.height * scale))), Image.BICUBIC
    )


def _light(im: Image.Image, rng: np.random.Generator) -> Image.Image:
    im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.85, 1.15))
    return ImageEnhance.Contrast(im).enhance(rng.uniform(0.85, 1.15))


# Edited copies: each makes encoded bytes from the original image; the JPEG original is q=90.
EDITS = {
    "resize": lambda im, rng: encode(_resize(im, rng), "JPEG", quality=90),
    "jpeg_quality": lambda im, rng: encode(im, "JPEG", quality=int(rng.integers(30, 70))),
    "crop": lambda im, rng: encode(_crop(im, rng), "JPEG", quality=90),
    "brightness_contrast": lambda im, rng: encode(_light(im, rng), "JPEG", quality=90),
    "png": lambda im, rng: encode(im, "PNG"),
    "all": lambda im, rng: encode(_light(_crop(_resize(im, rng), rng), rng), "JPEG", quality=60),
}


def edit(im: Image.Image, name: str, seed: int) -> bytes:
    """The bytes of `im` edited by EDITS[name]."""
    return EDITS[name](im, np.random.default_rng(seed))


def original(im: Image.Image) -> bytes:
    """An original as stored in the corpus: a q=90 JPEG."""
    return encode(im, "JPEG", quality=90)
