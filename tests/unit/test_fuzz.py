"""Fuzz the per-file path: mutated files of every format the decoders open, through check_image
and the writer's encode_for_storage. Only Rejected may come out; whatever is accepted decodes
with TensorFlow as the reader decodes it.

Seed: fixed when CI is set (reproducible runs), else IMGREC_FUZZ_SEED or a random one; the seed
is in every failure message (IMGREC_FUZZ_SEED=N pytest tests/unit/test_fuzz.py replays it). A crash
found becomes a file in tests/regressions/ (checked by test_regression_files_are_rejected_or_kept).
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
import random
import struct
import time

import numpy as np
import pytest
from PIL import Image

from core.rejects import Rejected
from tests.runs import ROOT as ROOT_PATH
from tests.runs import fuzz_budget_s, fuzz_seed
from transforms.images.check import check_image, encode_for_storage
from transforms.images.limits import CheckOptions

tf = pytest.importorskip("tensorflow")

# Time budget of the mutation loop, and a cap on the number of cases so that a fast machine does
# not run much longer. 6 s in the unit tier (the inner loop, `./run_tests.sh -m unit`: a tenth of
# its 60 s target, ~3,000 cases on this 2-core machine, each run a fresh random seed); CI (.ci/run)
# sets IMGREC_FUZZ_BUDGET_S=40, as every run did before the tier had a time target.
_BUDGET_S = fuzz_budget_s(6)
_MAX_CASES = 20000
# Fewer cases than this per second of budget means the loop itself got slow (a check that
# decodes far more than it should), not that the machine is busy.
_MIN_CASES_PER_S = 25
# CI's fixed seed: every CI run fuzzes the same inputs.
_CI_SEED = 20261201
# Every this-many accepted files goes through the writer's encode_for_storage as well.
_WRITE_SAMPLE = 3

REGRESSIONS = str(ROOT_PATH / "tests" / "regressions")


def _encode(im, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _psd(width: int = 12, height: int = 10) -> bytes:
    """A minimal raw RGB PSD (Pillow reads PSD but does not write it)."""
    pixels = np.random.default_rng(1).integers(0, 255, 3 * width * height, dtype=np.uint8)
    return (
        b"8BPS"
        + struct.pack(">H6xHIIHH", 1, 3, height, width, 8, 3)
        + struct.pack(">III", 0, 0, 0)  # colour mode data, image resources, layer/mask info
        + struct.pack(">H", 0)  # raw image data
        + pixels.tobytes()
    )


def _bases() -> list[tuple[str, bytes, CheckOptions]]:
    """(name, valid file, options that keep its format) for every format decoded here."""
    from tests.format_corpus import bmp_variant

    rng = np.random.default_rng(0)
    im = Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8))
    pal = im.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    rgba = im.convert("RGBA")
    auto, png = CheckOptions(), CheckOptions(transcode="png")
    return [
        ("jpeg", _encode(im, "JPEG", quality=80), auto),
        ("jpeg_progressive", _encode(im, "JPEG", progressive=True), auto),
        ("png", _encode(im, "PNG"), auto),
        ("png_palette_trns", _encode(pal, "PNG", transparency=0), auto),
        ("apng", _encode(im, "PNG", save_all=True, append_images=[im.rotate(90)]), auto),
        ("gif", _encode(pal, "GIF"), auto),
        ("gif_animated", _encode(pal, "GIF", save_all=True, append_images=[pal.rotate(90)]), auto),
        ("bmp", _encode(im, "BMP"), auto),
        ("bmp_palette", _encode(pal, "BMP"), auto),
        ("bmp_v5_bitfields", bmp_variant(im, 124, 32, top_down=True), auto),
        ("bmp_os2v1", bmp_variant(im, 12, 24), auto),
        ("webp_lossy", _encode(im, "WEBP", quality=70), auto),
        ("webp_lossless_alpha", _encode(rgba, "WEBP", lossless=True), auto),
        ("webp_animated", _encode(im, "WEBP", save_all=True, append_images=[im.rotate(90)]), auto),
        ("tiff", _encode(im, "TIFF"), png),
        ("tiff_lzw", _encode(im, "TIFF", compression="tiff_lzw"), png),
        ("psd", _psd(), png),
        ("ico", _encode(im, "ICO", sizes=[(16, 16)]), png),
        ("ppm", _encode(im, "PPM"), png),
        ("tga", _encode(im, "TGA"), png),
        ("pcx", _encode(im, "PCX"), png),
    ]


_LENGTHS = (0, 1, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF)


def _mutate(rng: random.Random, data: bytes, other: bytes) -> tuple[str, bytes]:
    """One random mutation of `data`: (what was done, the bytes)."""
    b = bytearray(data)
    n = len(b)
    kind = rng.choice(("flip", "flip", "truncate", "splice", "length", "length", "zero", "dup"))
    if kind == "flip":
        for _ in range(rng.choice((1, 1, 2, 4, 8))):
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[: rng.randrange(1, n)]
    elif kind == "splice":  # a stretch of another file (or this one) over a stretch of this one
        src = rng.choice((other, data))
        i, j = rng.randrange(n), rng.randrange(len(src))
        k = rng.randrange(1, 64)
        b[i : i + k] = src[j : j + k]
    elif kind == "length":  # a 2- or 4-byte field near a structure boundary set to an extreme
        width = rng.choice((2, 4))
        value = rng.choice(_LENGTHS) & ((1 << (8 * width)) - 1)
        # Headers and chunk/segment lengths live early and after markers: bias to the start.
        i = rng.randrange(min(n, 128)) if rng.random() < 0.7 else rng.randrange(n)
        b[i : i + width] = value.to_bytes(width, rng.choice(("big", "little")))
    elif kind == "zero":
        i = rng.randrange(n)
        b[i : i + rng.randrange(1, 32)] = bytes(min(32, n - i))
    else:  # duplicate a stretch (repeated chunks/segments)
        i = rng.randrange(n)
        k = rng.randrange(1, 128)
        b[i:i] = b[i : i + k] * rng.randrange(1, 4)
    return kind, bytes(b)


def _decode_stored(stored: bytes):
    return tf.io.decode_image(stored, channels=3, expand_animations=False)


def test_mutated_files_only_ever_raise_rejected(tmp_path):
    seed = fuzz_seed(_CI_SEED)
    rng = random.Random(seed)
    bases = _bases()
    failures: list[str] = []
    cases = accepted = written = decoder_errors = 0
    start = time.monotonic()
    while cases < _MAX_CASES and time.monotonic() - start < _BUDGET_S:
        name, data, opts = rng.choice(bases)
        kind, mutant = _mutate(rng, data, rng.choice(bases)[1])
        cases += 1
        where = f"seed {seed}, case {cases}, {name} {kind}"
        try:
            info = check_image(mutant, opts, compute_stats=rng.random() < 0.2)
        except Rejected as e:
            decoder_errors += e.reason == "decoder_error"
            continue
        except Exception as e:  # noqa: BLE001  (what the test looks for)
            path = tmp_path / f"crash-{hashlib.sha256(mutant).hexdigest()[:12]}-{name}"
            path.write_bytes(mutant)
            failures.append(f"{where}: check_image raised {type(e).__name__}: {e} ({path})")
            continue
        accepted += 1
        stored = mutant
        if info.transcode or accepted % _WRITE_SAMPLE == 0:
            try:
                stored = encode_for_storage(mutant, info, opts)
                written += 1
            except Rejected:
                continue  # a writer-time reject is an outcome too
            except Exception as e:  # noqa: BLE001
                failures.append(f"{where}: encode_for_storage raised {type(e).__name__}: {e}")
                continue
        if info.format == "raw":  # samples, not an encoded image: their count must match
            samples = info.height * info.width * info.channels
            if len(stored) % samples or len(stored) // samples not in (1, 2, 4, 8):
                failures.append(f"{where}: a raw record of {len(stored)} bytes, check said {info}")
            continue
        try:
            image = _decode_stored(stored)
        except tf.errors.OpError as e:
            failures.append(f"{where}: accepted ({info}) but TensorFlow does not decode: {e}")
            continue
        if tuple(image.shape) != (info.height, info.width, 3):
            failures.append(f"{where}: decodes to {image.shape}, check said {info}")
    print(
        f"fuzz seed {seed}: {cases} cases, {accepted} accepted, {written} through the writer, "
        f"{decoder_errors} decoder_error, {time.monotonic() - start:.1f} s"
    )
    wanted = min(_MAX_CASES, int(_MIN_CASES_PER_S * _BUDGET_S))
    assert cases >= wanted, f"seed {seed}: only {cases} cases ran in {_BUDGET_S} s"
    assert accepted > 0
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REGRESSIONS, "*"))), ids=os.path.basename
)
def test_regression_files_are_rejected_or_kept(path):
    """Every file a fuzz run or a user found: a Rejected or an image TensorFlow decodes, under
    the default options and with --transcode png."""
    with open(path, "rb") as f:
        data = f.read()
    for opts in (CheckOptions(), CheckOptions(transcode="png")):
        try:
            info = check_image(data, opts)
        except Rejected:
            continue
        image = _decode_stored(encode_for_storage(data, info, opts))
        assert tuple(image.shape) == (info.height, info.width, 3)
