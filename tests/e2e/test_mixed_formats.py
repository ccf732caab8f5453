"""End to end, as a new user runs it: the CLI with DEFAULT options (analysis on) over a mixed
folder (JPEG, PNG, BMP, WebP, GIF, TIFF, PSD and damaged files) finishes, accounts for every
file with the right outcome, and `imgrec verify` passes."""

from __future__ import annotations

import io
import json
import os
import random

import pytest
from PIL import Image

from core import schema
from tests.format_corpus import _photo, bmp_variant, webp_variants
from tests.runs import ROOT as ROOT_PATH
from tests.runs import cli as run_cli
from tests.runs import in_process, read_records

REGRESSIONS = str(ROOT_PATH / "tests" / "regressions")


def _encode(im, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _folder(root: str) -> dict[str, tuple[str, str]]:
    """Write the folder; {path: (outcome, format or reason)} (outcome "written" or "rejected")."""
    rng = random.Random(12)
    want: dict[str, tuple[str, str]] = {}

    def add(label: str, name: str, data: bytes, outcome: str, what: str) -> None:
        os.makedirs(os.path.join(root, label), exist_ok=True)
        path = os.path.join(root, label, name)
        with open(path, "wb") as f:
            f.write(data)
        want[path] = (outcome, what)

    for i in range(100):
        label = ("cat", "dog")[i % 2]
        im = _photo(rng, rng.choice((24, 40, 57)), rng.choice((20, 33, 48)))
        add(label, f"photo_{i}.jpg", _encode(im, "JPEG", quality=85), "written", "jpeg")
    for i in range(8):
        im = _photo(rng, 30, 20)
        add("cat", f"pic_{i}.png", _encode(im.convert(("RGB", "RGBA", "L", "P")[i % 4]), "PNG"),
            "written", "png")  # fmt: skip
    for i in range(4):
        pal = _photo(rng, 30, 20).convert("P", palette=Image.Palette.ADAPTIVE, colors=32)
        add("dog", f"anim_{i}.gif",
            _encode(pal, "GIF", save_all=i % 2 == 1, append_images=[pal.rotate(90)]),
            "written", "gif" if i % 2 == 0 else "png")  # fmt: skip
    for i, (size, bpp, top_down) in enumerate(
        [(12, 24, False), (40, 24, False), (40, 16, True), (52, 32, False), (56, 32, True),
         (64, 24, False), (108, 32, False), (124, 24, True)]
    ):  # fmt: skip
        add("cat", f"bitmap_v{size}_{i}.bmp", bmp_variant(_photo(rng, 31, 17), size, bpp, top_down),
            "written", "png")  # fmt: skip
    add("dog", "pillow_palette.bmp", _encode(_photo(rng, 20, 20).convert("P"), "BMP"),
        "written", "png")  # fmt: skip
    for name, data in webp_variants(_photo(rng, 33, 21)):
        kept_as = "png" if ("alpha" in name or "animated" in name) else "webp"
        add("dog", f"web_{name}.webp", data, "written", kept_as)
    # TIFF is decoded to pixels (transforms/images/tiff.py) and stored as PNG by default.
    add("cat", "scan.tiff", _encode(_photo(rng, 30, 20), "TIFF"), "written", "png")
    # Not decoded by TensorFlow: rejected by default (never parsed).
    with open(os.path.join(REGRESSIONS, "psd_layer_block_too_short.psd"), "rb") as f:
        add("dog", "layers.psd", f.read(), "rejected", "unsupported_format")
    # Damaged.
    jpeg = _encode(_photo(rng, 40, 30), "JPEG")
    add("cat", "cut.jpg", jpeg[: len(jpeg) // 2], "rejected", "truncated")
    add("dog", "error_page.jpg", b"<html><body>404 Not Found</body></html>\n", "rejected",
        "not_an_image")  # fmt: skip
    webp = dict(webp_variants(_photo(rng, 33, 21)))["lossy"]
    add("cat", "cut.webp", webp[: len(webp) // 2], "rejected", "truncated")
    return want


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    src = str(tmp_path_factory.mktemp("mixed"))
    want = _folder(src)
    out = str(tmp_path_factory.mktemp("mixed_out") / "ds")
    proc = run_cli("convert", "--input", f"{src}/*/*", "--output", out)  # defaults, analysis on
    return want, out, proc


def test_default_conversion_keeps_every_tensorflow_image_and_accounts_for_every_file(converted):
    import tensorflow as tf

    want, out, proc = converted
    assert proc.returncode == 0
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    assert info["num_listed"] == len(want)
    assert info["num_listed"] == info["num_written"] + info["num_rejected"] + info["num_duplicates"]
    assert info["num_duplicates"] == 0
    rejected = {
        json.loads(line)["path"]: json.loads(line)["reason"]
        for line in open(os.path.join(out, schema.REJECTED))
    }
    written = {}
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for rec in read_records(os.path.join(out, shard["file"])):
                ex = tf.io.parse_single_example(rec, schema.feature_spec())
                written[ex[schema.FILENAME].numpy().decode()] = ex[schema.FORMAT].numpy().decode()
    got = {p: ("written", f) for p, f in written.items()}
    got.update({p: ("rejected", r) for p, r in rejected.items()})
    want = {os.path.abspath(p): w for p, w in want.items()}
    assert got == want
    assert info["transcoded_by_reason"]["bmp_to_png"] == 9
    assert info["transcoded_by_reason"]["webp_to_png"] == 4
    assert os.path.isdir(os.path.join(out, "transform_fn"))


def test_verify_passes_on_the_mixed_result(converted):
    _, out, _ = converted
    # In this process (the command line's verify: tests/e2e/test_cli.py); in_process checks
    # the exit status.
    proc = in_process("verify", out)
    assert "OK" in proc.stdout, proc.stdout + proc.stderr


def test_strict_mode_rejects_bmp_and_webp_as_before(converted, tmp_path):
    """--transcode none: the old JPEG/PNG/GIF-only behaviour, for whoever wants it."""
    want, _, _ = converted
    src = os.path.dirname(os.path.dirname(next(iter(want))))
    out = str(tmp_path / "strict")
    # The option's behaviour, in this process (the default conversion above is the real CLI).
    in_process("convert", "--input", f"{src}/*/*", "--output", out, "--transcode", "none",
               "--no_analyze", "--max_bad_fraction", "0.5", "--workers", "1")  # fmt: skip
    reasons = {}
    for line in open(os.path.join(out, schema.REJECTED)):
        r = json.loads(line)
        reasons.setdefault(os.path.splitext(r["path"])[1], set()).add(r["reason"])
    assert reasons[".bmp"] == {"unsupported_format"}
    assert reasons[".webp"] == {"unsupported_format"}
