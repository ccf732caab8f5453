"""report.html and `imgrec preview` / `inspect`: contents match dataset_info.json; renders cleanly."""

from __future__ import annotations

import base64
import collections
import html
import io
import json
import os
import re
import shutil
import subprocess

import pytest

from core import schema
from pipeline.demo import build_corpus
from pipeline.launcher import run_convert
from pipeline.report.page import write_report
from pipeline.report.scan import parse_example, read_records
from tests.runs import ROOT as ROOT_PATH

ROOT = str(ROOT_PATH)
_DATA_URI = re.compile(r'src="data:(image/(?:png|jpeg));base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    src = str(tmp_path_factory.mktemp("corpus"))
    build_corpus(src, num_images=30, seed=7, long_side=(96, 160))
    out = str(tmp_path_factory.mktemp("out") / "ds")
    status = run_convert(
        [
            "--input", f"{src}/*/*.jpg", "--output", out, "--workers", "1",
            "--splits", "train=0.7,validation=0.3",
            "--max_side", "128",  # some photos get downscaled: transcodes to report
            "--max_bad_fraction", "0.2",  # the corpus has 3 broken files of 35
        ]
    )  # fmt: skip
    assert status == 0
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
        page = f.read()
    return out, info, page


def test_convert_writes_a_report_whose_counts_match_dataset_info(dataset):
    _, info, page = dataset
    for key in ("num_listed", "num_written", "num_rejected", "num_duplicates"):
        assert re.search(rf"id={key}>{info[key]}<", page), key
    for split, s in info["splits"].items():
        assert f'id="split-{split}">{s["num_examples"]}<' in page
        cells = re.findall(rf'<td class=n data-split="{split}">(\d+)</td>', page)
        assert len(cells) == len(info["label_names"])
        assert sum(map(int, cells)) == s["num_examples"]


def test_every_class_reason_and_transcode_appears(dataset):
    _, info, page = dataset
    assert info["rejected_by_reason"] and info["transcoded_by_reason"], info
    for name in info["label_names"]:
        assert f'id="class-{html.escape(name)}"' in page
    for reason in info["rejected_by_reason"]:
        assert f'id="reason-{reason}"' in page
    for reason in info["transcoded_by_reason"]:
        assert f'id="transcode-{reason}"' in page
    assert "<script" not in page.lower()


def test_every_embedded_image_decodes(dataset):
    from PIL import Image

    _, info, page = dataset
    found = _DATA_URI.findall(page)
    # At least an original and an eval crop per class (the plots are inline SVG).
    assert len(found) >= 2 * len(info["label_names"])
    eval_crops = 0
    for mime, data in found:
        with Image.open(io.BytesIO(base64.b64decode(data))) as image:
            image.load()
            assert image.format == {"image/png": "PNG", "image/jpeg": "JPEG"}[mime]
            eval_crops += image.size in ((160, 160),)  # 224x224 eval output, thumbnailed
    assert eval_crops >= len(info["label_names"])
    # Thumbnails of rejected files that still open (the truncated JPEG) are there too.
    assert page.count('class="thumb"') >= 1


def test_the_charts_draw_what_dataset_info_says(dataset):
    """Four inline SVG charts: classes per split, sizes, aspects, shards, each mark its value."""
    import xml.etree.ElementTree as ET

    _, info, page = dataset
    svgs = [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, re.S)]
    labels = [s.get("aria-label") for s in svgs]
    assert labels == ["classes per split", "image sizes", "aspect ratios", "shard sizes"]
    marks = [[el for el in s.iter() if el.get("class") == "mark"] for s in svgs]
    drawn = collections.Counter()
    for m in marks[0]:
        drawn[m.get("data-series")] += int(m.get("data-value"))
    assert drawn == {s: v["num_examples"] for s, v in info["splits"].items()}
    assert len(marks[0]) == len(info["splits"]) * len(info["label_names"])
    # The records read for the size plots (all of them: the dataset is small).
    assert sum(int(m.get("data-count")) for m in marks[1]) == info["num_written"]
    assert sum(int(m.get("data-value")) for m in marks[2]) == info["num_written"]
    shards = [sh["num_bytes"] / 1e6 for v in info["splits"].values() for sh in v["shards"]]
    assert [float(m.get("data-value")) for m in marks[3]] == pytest.approx(shards, rel=1e-5)


def test_tfrecord_parser_matches_tensorflow(dataset):
    import tensorflow as tf

    out, info, _ = dataset
    shard = os.path.join(out, info["splits"]["train"]["shards"][0]["file"])
    ours = list(read_records(shard))
    theirs = [r.numpy() for r in tf.data.TFRecordDataset(shard)]
    assert ours == theirs
    for record in ours[:10]:
        example = tf.train.Example.FromString(record).features.feature
        parsed = parse_example(record)
        assert parsed[schema.LABEL] == example[schema.LABEL].int64_list.value[0]
        assert parsed[schema.ENCODED] == example[schema.ENCODED].bytes_list.value[0]
        assert parsed[schema.FILENAME] == example[schema.FILENAME].bytes_list.value[0]


def test_inspect_prints_a_class_histogram(dataset, capsys):
    from pipeline.cli import main

    out, info, _ = dataset
    assert main(["inspect", out]) == 0
    text = capsys.readouterr().out
    rows = {}
    for name in info["label_names"]:
        (m,) = re.findall(rf"^    {re.escape(name)}\s+(\d+) (█+)", text, re.M)
        rows[name] = int(m[0])
    assert sum(rows.values()) == info["num_written"]


def test_preview_writes_elsewhere(dataset, tmp_path):
    out, info, _ = dataset
    path = write_report(out, str(tmp_path / "r.html"))
    assert path == str(tmp_path / "r.html")
    assert f"id=num_written>{info['num_written']}<" in open(path).read()


# --- Rendering in Chromium ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium():
    """The chromium binary; installed with apt-get (Debian's `chromium`) when missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found and shutil.which("apt-get") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"], env=env, capture_output=True,
            timeout=900,
        )  # fmt: skip
        found = shutil.which("chromium")
    if not found:
        pytest.skip("chromium is not installed and `apt-get install chromium` was not possible")
    return found


def _chromium(binary: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def _page_width(binary: str, page: str, tmp_path) -> tuple[int, int]:
    """(document scrollWidth, viewport width) of `page` in a 1280 px wide frame.

    The report has no JavaScript: a wrapper page of the test's own loads it in an iframe and
    writes the measurement into its DOM, which --dump-dom prints.
    """
    wrapper = tmp_path / "measure.html"
    wrapper.write_text(
        f'<iframe id=f src="{os.path.basename(page)}" style="width:1280px;height:800px;border:0">'
        "</iframe><pre id=out>pending</pre><script>"
        "document.getElementById('f').onload=function(){"
        "var d=this.contentDocument.documentElement;"
        "document.getElementById('out').textContent='width '+d.scrollWidth+' '+d.clientWidth;};"
        "</script>"
    )
    proc = _chromium(
        binary, "--allow-file-access-from-files", "--virtual-time-budget=10000",
        "--window-size=1400,900", "--dump-dom", f"file://{wrapper}",
    )  # fmt: skip
    m = re.search(r"width (\d+) (\d+)", proc.stdout)
    assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
    return int(m.group(1)), int(m.group(2))


@pytest.mark.e2e  # a real browser, three headless Chromium starts
def test_report_renders_in_chromium_without_horizontal_overflow(dataset, chromium, tmp_path):
    from PIL import Image, ImageStat

    out, _, page = dataset
    report = tmp_path / "report.html"
    shutil.copy(os.path.join(out, "report.html"), report)
    shot = tmp_path / "shot.png"
    proc = _chromium(
        chromium, "--window-size=1280,1600", f"--screenshot={shot}", f"file://{report}"
    )
    assert shot.exists(), proc.stderr[-2000:]
    with Image.open(shot) as image:
        stat = ImageStat.Stat(image.convert("L"))
        assert image.size == (1280, 1600)
        assert stat.stddev[0] > 20, "blank screenshot"
    scroll, client = _page_width(chromium, str(report), tmp_path)
    assert client == 1280 and scroll <= client, (scroll, client)
    # The check can fail: the same page with one over-wide element overflows.
    wide = tmp_path / "wide.html"
    wide.write_text(page.replace("</main>", '<div style="width:2000px">x</div></main>'))
    scroll, client = _page_width(chromium, str(wide), tmp_path)
    assert scroll > client


def test_preview_reads_and_writes_a_bucket(dataset, store, beam_filesystems):
    """`imgrec preview gs://...|s3://...`: read through Beam FileSystems, report written there."""
    out, info, _ = dataset
    bucket = store.new_bucket("report")
    base = store.uri(bucket, "ds")
    for root, _, files in os.walk(out):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), out)
            if rel.endswith((".json", ".jsonl", ".tfrecord")):
                with open(os.path.join(root, name), "rb") as f:
                    store.put(f"{base}/{rel}", f.read())
    assert write_report(base) == f"{base}/report.html"
    page = store.get(f"{base}/report.html").decode("utf-8")
    assert f"id=num_written>{info['num_written']}<" in page
    for name in info["label_names"]:
        assert f'id="class-{html.escape(name)}"' in page
    # The reader's eval crops come from a local copy of the shown records: S3 works too.
    assert page.count('alt="eval crop"') >= len(info["label_names"])


def test_report_eval_crops_are_what_the_reader_yields_in_evaluation(dataset):
    """evaluation_images (the report's eager decode) equals make_dataset(training=False)."""
    import numpy as np

    from pipeline.reader.dataset import evaluation_images, make_dataset, split_files

    out, info, _ = dataset
    _, shards = split_files(out, "validation")
    records = [r for s in shards for r in read_records(s.path)]
    expected = np.concatenate(
        [b[0].numpy() for b in make_dataset(out, "validation", 4, image_size=(64, 48))]
    )
    got = evaluation_images(records, info, (64, 48)).numpy()
    assert got.shape == expected.shape == (info["splits"]["validation"]["num_examples"], 64, 48, 3)
    assert np.array_equal(got, expected)


def test_class_counts_per_split_are_exact_in_dataset_info(dataset):
    """The writer counts examples per label; describe sums them per split."""
    out, info, _ = dataset
    for split, s in info["splits"].items():
        labels = []
        for shard in s["shards"]:
            for record in read_records(os.path.join(out, shard["file"])):
                text = parse_example(record, {schema.LABEL_TEXT})[schema.LABEL_TEXT]
                labels.append(text.decode("utf-8"))
        assert s["label_counts"] == {k: labels.count(k) for k in sorted(set(labels))}, split
        assert sum(s["label_counts"].values()) == s["num_examples"]


def test_reject_thumbnails_never_open_fifos_folders_or_huge_files(tmp_path, monkeypatch):
    """A rejected path may be a FIFO (reading it would block forever) or a folder."""
    from pipeline.report import page as report

    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    (tmp_path / "folder.jpg").mkdir()
    big = tmp_path / "big.jpg"
    big.write_bytes(b"\xff\xd8\xff" + b"\0" * 100)
    assert report._open_any(str(fifo)) is None
    assert report._open_any(str(tmp_path / "folder.jpg")) is None
    monkeypatch.setattr(report, "THUMB_MAX_FILE_BYTES", 50)
    assert report._open_any(str(big)) is None
