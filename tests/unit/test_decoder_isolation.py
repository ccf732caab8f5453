"""No single file fails the job: decoder_error dead letters, the decoder subprocess, regressions."""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from core import schema
from core.rejects import MAX_ERROR_DETAIL, REASONS, Rejected
from pipeline.options import ConvertConfig
from tests.runs import ROOT as ROOT_PATH
from tests.runs import in_process, read_records
from transforms.elements import ListedFile, WriterEntry
from transforms.images import check, decoder_pool, limits
from transforms.images.check import check_image
from transforms.images.limits import CheckOptions
from transforms.inspect_images import InspectImages

ROOT = str(ROOT_PATH)
REGRESSIONS = str(ROOT_PATH / "tests" / "regressions")


def _encode(im, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _photo(seed: int, size=(40, 30)) -> Image.Image:
    import numpy as np

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8))


def _config(tmp_path, **kw) -> ConvertConfig:
    kw.setdefault("inputs", (f"{tmp_path}/in/*/*",))
    return ConvertConfig(manifest=None, output=str(tmp_path / "out"), analyze=False, **kw)


# ----------------------------------------------------------------------------- the issue's files
@pytest.mark.parametrize(
    "name, raised_before",
    [
        ("psd_layer_block_too_short.psd", "SyntaxError"),
    ],
)
def test_issue_files_are_rejected_not_raised(name, raised_before):
    """Pillow raised these from lazy properties (n_frames) outside the guarded open/load: the
    PSD's layer block is shorter than its layer count. (The TIFF found with it,
    tiff_byte8_ff_missing_dimensions.tiff, is tifffile's now: test_fuzz's regression test.)"""
    with open(os.path.join(REGRESSIONS, name), "rb") as f:
        data = f.read()
    # The plugin itself still raises (the regression file still reproduces the bug's trigger).
    with pytest.raises(Exception) as raw:
        _ = Image.open(io.BytesIO(data)).n_frames
    assert type(raw.value).__name__ == raised_before
    with pytest.raises(Rejected) as default:
        check_image(data, CheckOptions())
    assert default.value.reason == "unsupported_format"  # not parsed unless asked for
    for transcode in ("png", "jpeg"):
        with pytest.raises(Rejected) as asked:
            check_image(data, CheckOptions(transcode=transcode))
        assert asked.value.reason == "corrupt", asked.value.detail
        assert raised_before in asked.value.detail


def test_a_format_nobody_asked_for_runs_no_plugin(monkeypatch):
    """--transcode auto/none name ICO/PSD from magic bytes; no Pillow plugin (and no decoder
    process) runs for them."""
    from PIL import Image as PILImage

    calls = []
    real = PILImage.OPEN["ICO"]
    monkeypatch.setitem(PILImage.OPEN, "ICO", (lambda *a: calls.append(1) or real[0](*a), None))
    monkeypatch.setattr(decoder_pool, "_ask", lambda *a: calls.append(2))
    data = _encode(_photo(1), "ICO")
    for mode in ("auto", "none"):
        with pytest.raises(Rejected) as e:
            check_image(data, CheckOptions(transcode=mode))
        assert e.value.reason == "unsupported_format" and "ICO" in e.value.detail
    assert calls == []


def test_bmp_and_webp_never_run_another_plugin(monkeypatch):
    """The restriction Image.open(formats=[...]) gives: a BMP is opened by the BMP plugin only."""
    from PIL import Image as PILImage

    opened = []
    for fmt in list(PILImage.OPEN):
        factory, accept = PILImage.OPEN[fmt]
        monkeypatch.setitem(
            PILImage.OPEN,
            fmt,
            (lambda *a, _f=factory, _n=fmt: opened.append(_n) or _f(*a), accept),
        )
    info = check_image(_encode(_photo(2), "BMP"), CheckOptions())
    assert (info.format, info.transcode) == ("png", "bmp_to_png")
    assert set(opened) == {"BMP"}


# ----------------------------------------------------------------------------- the worker
def test_decoder_process_death_is_one_reject_and_the_next_file_decodes(monkeypatch):
    monkeypatch.setattr(decoder_pool, "test_abort_marker", "IMGREC-ABORT-MARKER")
    good = _encode(_photo(3), "TIFF")
    bad = good + b"IMGREC-ABORT-MARKER"
    opts = CheckOptions(transcode="png")
    with pytest.raises(Rejected) as e:
        check_image(bad, opts)
    assert e.value.reason == "decoder_error"
    assert "decoder process died (signal 6)" in e.value.detail
    info = check_image(good, opts)  # a fresh worker takes over
    assert (info.format, info.source_format, info.width) == ("png", "tiff", 40)


def test_unexpected_exception_in_the_worker_is_a_decoder_error(monkeypatch):
    """The worker's own boundary: an exception its plugin raises that no list anticipated."""
    opts = CheckOptions(transcode="png")
    monkeypatch.setattr(
        decoder_pool, "_POOL", type("P", (), {"call": lambda self, r: ("error", "KeyError: 7")})()
    )
    with pytest.raises(Rejected) as e:
        check_image(_encode(_photo(4), "ICO"), opts)
    assert (e.value.reason, e.value.detail) == ("decoder_error", "Pillow (ICO): KeyError: 7")


# ----------------------------------------------------------------------------- Beam boundaries
def test_inspection_turns_any_per_file_exception_into_a_decoder_error(tmp_path, monkeypatch):
    from transforms import inspect_images

    real = inspect_images.check_image

    def flaky(data, opts, compute_stats=False):
        if b"boom" in data:
            raise RuntimeError("boom\n" + "x" * 1000)
        if b"nomem" in data:
            raise MemoryError()
        return real(data, opts, compute_stats=compute_stats)

    monkeypatch.setattr(inspect_images, "check_image", flaky)
    (tmp_path / "in" / "a").mkdir(parents=True)
    names = {"good.jpg": b"", "boom.jpg": b"boom", "nomem.jpg": b"nomem"}
    listed = []
    for name, tail in names.items():
        path = tmp_path / "in" / "a" / name
        path.write_bytes(_encode(_photo(5), "JPEG") + tail)
        listed.append(ListedFile(str(path), f"a/{name}", "a", "train", -1, None))
    with TestPipeline() as p:
        out = p | beam.Create([listed]) | InspectImages(_config(tmp_path))
        assert_that(
            out["inspected"] | beam.FlatMap(lambda b: [r.key for r in b]),
            equal_to(["a/good.jpg"]),
        )
        assert_that(
            out["rejected"]
            | beam.Map(
                lambda r: (
                    os.path.basename(r["path"]),
                    r["reason"],
                    r["detail"][:17],
                    len(r["detail"]) <= MAX_ERROR_DETAIL,
                )
            ),
            equal_to(
                [
                    ("boom.jpg", "decoder_error", "RuntimeError: boo", True),
                    ("nomem.jpg", "decoder_error", "MemoryError", True),
                ]
            ),
            label="Rejected",
        )


def test_writer_turns_a_failing_re_encode_into_a_reject_and_keeps_the_rest(tmp_path, monkeypatch):
    from transforms.write_shards import WriteShards

    real = check.encode_for_storage  # what the writer's store_image calls per file

    def flaky(data, info, opts):
        if data.endswith(b"boom"):
            raise SyntaxError("Layer block too short")
        return real(data, info, opts)

    monkeypatch.setattr(check, "encode_for_storage", flaky)
    (tmp_path / "in" / "a").mkdir(parents=True)
    entries = []
    for name, tail in (("ok.jpg", b""), ("boom.jpg", b"boom")):
        data = _encode(_photo(6), "JPEG") + tail
        path = tmp_path / "in" / "a" / name
        path.write_bytes(data)
        entries.append(
            WriterEntry(
                path=str(path),
                key=f"a/{name}",
                label="a",
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                format="jpeg",
                source_format="jpeg",
                height=30,
                width=40,
                channels=3,
                transcode="",
            )
        )
    with TestPipeline() as p:
        plan = p | "Plan" >> beam.Create([{"train": 1}])
        labels = p | "Labels" >> beam.Create([["a"]])
        out = (
            p
            | beam.Create([(("train", 0), entries)])
            | WriteShards(_config(tmp_path), plan, labels)
        )
        assert_that(
            out["shards"] | beam.Map(lambda s: s.num_examples), equal_to([1]), label="Written"
        )
        assert_that(
            out["rejected"]
            | beam.Map(lambda r: (os.path.basename(r["path"]), r["reason"], r["detail"])),
            equal_to([("boom.jpg", "decoder_error", "SyntaxError: Layer block too short")]),
            label="Rejected",
        )


def test_decoder_error_is_a_documented_reason():
    assert "decoder_error" in REASONS
    assert limits.TRANSCODE_MODES[0] == "auto"
