"""Demo and benchmark corpora: real-photo crops from the images scikit-image ships, plus broken files."""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import random

from PIL import Image

__all__ = ["PHOTOS", "photo_dir", "build_corpus", "main"]

# label -> photo file in skimage/data. Real photographs (not synthetic patterns), so JPEG sizes,
# decode costs and statistics look like a user's data.
PHOTOS = {
    "astronaut": "astronaut.png",
    "cat": "chelsea.png",
    "coffee": "coffee.png",
    "rocket": "rocket.jpg",
    "motorcycle": "motorcycle_left.png",
}


def photo_dir() -> str:
    """The folder of scikit-image's bundled photos (no network: they ship in the wheel)."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("scikit-image is not installed: pip install scikit-image (demo data)")
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


def _crop(photo, rng: random.Random, long_side: tuple[int, int]):
    w, h = photo.size
    frac = rng.uniform(0.45, 0.95)
    cw, ch = int(w * frac), int(h * frac * rng.uniform(0.8, 1.2))
    ch = min(ch, h)
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    crop = photo.crop((x, y, x + cw, y + ch))
    target = rng.randint(*long_side)
    scale = target / max(crop.size)
    size = (max(8, round(crop.size[0] * scale)), max(8, round(crop.size[1] * scale)))
    crop = crop.resize(size, Image.BILINEAR)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    return crop


def build_corpus(
    out_dir: str,
    num_images: int = 300,
    seed: int = 0,
    long_side: tuple[int, int] = (380, 500),
    quality: tuple[int, int] = (75, 95),
    broken: bool = True,
) -> dict:
    """Write `num_images` JPEG photo crops into `out_dir/<label>/`, plus a few broken files.

    Args:
        out_dir: destination folder (created).
        num_images: healthy images, spread evenly over the labels of PHOTOS.
        seed: makes the corpus byte-identical run to run.
        long_side: range of the longer side in pixels (ImageNet-like by default).
        quality: range of JPEG quality.
        broken: also write a truncated JPEG, a zero-byte file, a text file named .jpg, a PNG
            named .jpg (accepted as PNG) and one exact duplicate.

    Returns:
        {"images": N healthy, "broken": {relative path: expected reject reason},
         "png_as_jpg": relative path, "duplicate": relative path, "bytes": total bytes}
    """
    rng = random.Random(seed)
    photos = _load_photos(out_dir)
    labels = sorted(photos)
    total = 0
    first = None
    for i in range(num_images):
        label = labels[i % len(labels)]
        crop = _crop(photos[label], rng, long_side)
        buf = io.BytesIO()
        crop.save(buf, "JPEG", quality=rng.randint(*quality))
        rel = f"{label}/{label}_{i:06d}.jpg"
        _write(out_dir, rel, buf.getvalue())
        total += buf.tell()
        first = first or (rel, buf.getvalue())
    summary = {"images": num_images, "broken": {}, "png_as_jpg": None, "duplicate": None}
    if broken:
        _write_odd_files(out_dir, summary, first, photos[labels[1]], labels[1], rng, long_side)
    summary["bytes"] = total
    return summary


def _load_photos(out_dir: str) -> dict:
    """label -> the RGB photo of PHOTOS, with the label's folder made under `out_dir`."""
    base = photo_dir()
    photos = {}
    for label, name in PHOTOS.items():
        img = Image.open(os.path.join(base, name)).convert("RGB")
        photos[label] = img
        os.makedirs(os.path.join(out_dir, label), exist_ok=True)
    return photos


def _write(out_dir: str, rel: str, data: bytes) -> None:
    with open(os.path.join(out_dir, rel), "wb") as f:
        f.write(data)


def _write_odd_files(
    out_dir: str,
    summary: dict,
    first: tuple[str, bytes],
    png_photo,
    png_label: str,
    rng: random.Random,
    long_side: tuple[int, int],
) -> None:
    """The broken files, a PNG named .jpg and a duplicate of the `first` JPEG, noted in `summary`."""
    rel0, data0 = first
    label0 = rel0.split("/")[0]
    files = {
        f"{label0}/broken_truncated.jpg": (data0[: len(data0) // 2], "truncated"),
        f"{label0}/broken_empty.jpg": (b"", "empty_file"),
        f"{label0}/broken_text.jpg": (b"this is not an image\n" * 4, "not_an_image"),
    }
    for rel, (data, reason) in files.items():
        _write(out_dir, rel, data)
        summary["broken"][rel] = reason
    png = io.BytesIO()
    _crop(png_photo, rng, long_side).save(png, "PNG")
    rel = f"{png_label}/png_named_as.jpg"
    _write(out_dir, rel, png.getvalue())
    summary["png_as_jpg"] = rel
    rel = f"{label0}/copy_of_{os.path.basename(rel0)}"
    _write(out_dir, rel, data0)
    summary["duplicate"] = rel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a demo corpus of real-photo crops.")
    parser.add_argument("out_dir")
    parser.add_argument("--num_images", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no_broken", action="store_true")
    args = parser.parse_args(argv)
    s = build_corpus(args.out_dir, args.num_images, args.seed, broken=not args.no_broken)
    print(
        f"imgrec: demo corpus: {s['images']} photos ({s['bytes'] / 1e6:.1f} MB) and "
        f"{len(s['broken']) + 2 if s['broken'] else 0} odd files in {args.out_dir}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
