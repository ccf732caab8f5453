"""The report's contact sheet: PER_CLASS images of every class, read no further than it needs."""

from __future__ import annotations

import io

from PIL import Image

from core import schema
from core.tfrecord import write_record
from pipeline.report import page


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (200, 30, 30)).save(buf, "JPEG")
    return buf.getvalue()


def _dataset(tmp_path, shards: list[list[int]], names: list[str]) -> dict:
    """Shards of records with the given label ids, and the info dict that names them."""
    data = _jpeg()
    entries = []
    for index, labels in enumerate(shards):
        name = f"train-{index:05d}-of-{len(shards):05d}.tfrecord"
        with open(tmp_path / name, "wb") as f:
            for n, label in enumerate(labels):
                example = schema.make_example(
                    encoded=data, image_format="jpeg", height=6, width=8, channels=3,
                    label=label, label_text=names[label] if label >= 0 else "",
                    filename=f"{index}/{n}.jpg", sha256="0" * 64,
                )  # fmt: skip
                write_record(f, example)
        entries.append({"file": name, "num_examples": len(labels)})
    return {"label_names": names, "splits": {"train": {"shards": entries}}}


def _sheet(tmp_path, info, monkeypatch) -> tuple[dict, int]:
    parsed = []
    parse = page.parse_example
    monkeypatch.setattr(page, "parse_example", lambda r, k=None: parsed.append(1) or parse(r, k))
    monkeypatch.setattr(page, "_eval_crops", lambda info, records: [None] * len(records))
    return page._contact_sheet(str(tmp_path), info, "train"), len(parsed)


def test_it_stops_reading_once_every_class_has_its_images(tmp_path, monkeypatch):
    per = page.PER_CLASS
    info = _dataset(tmp_path, [[0, 1] * (3 * per), [0, 1] * per], ["cat", "dog"])
    sheet, parsed = _sheet(tmp_path, info, monkeypatch)
    assert {name: len(items) for name, items in sheet.items()} == {"cat": per, "dog": per}
    assert parsed == 2 * per  # the last image it needed, not the end of the shard
    assert [item["path"] for item in sheet["dog"]] == [f"0/{2 * n + 1}.jpg" for n in range(per)]
    assert all(item["original"].startswith("data:image/jpeg;base64,") for item in sheet["cat"])


def test_a_class_found_only_in_a_later_shard_is_shown(tmp_path, monkeypatch):
    per = page.PER_CLASS
    info = _dataset(tmp_path, [[0] * (2 * per), [-1, 1, 1]], ["cat", "dog"])
    sheet, parsed = _sheet(tmp_path, info, monkeypatch)
    assert {name: len(items) for name, items in sheet.items()} == {
        "cat": per,
        "dog": 2,
        "(no label)": 1,
    }
    assert parsed == 2 * per + 3  # every record: "dog" never had PER_CLASS images
    assert list(sheet) == ["cat", "dog", "(no label)"]  # label order, the unlabelled last


def test_it_reads_at_most_eval_search_records(tmp_path, monkeypatch):
    monkeypatch.setattr(page, "EVAL_SEARCH_RECORDS", 5)
    info = _dataset(tmp_path, [[0] * 20], ["cat", "dog"])
    sheet, parsed = _sheet(tmp_path, info, monkeypatch)
    assert parsed == 5 and {name: len(v) for name, v in sheet.items()} == {"cat": 5}
