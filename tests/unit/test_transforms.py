"""Transform-level tests with TestPipeline: listing, inspection counters, dedupe, shard planning."""

from __future__ import annotations

import io
import os

import apache_beam as beam
import pytest
import threadpoolctl
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipeline.options import ConvertConfig
from transforms.dedupe import DropNamed, FindDuplicates
from transforms.elements import InspectedImage, ListedFile, WriterEntry
from transforms.images.limits import CheckOptions
from transforms.inspect_images import InspectImages
from transforms.keys import assign_split
from transforms.list_images import ListImages, input_root
from transforms.plan_shards import PlanShards, num_shards_for


def _jpeg(color=(200, 30, 30), size=(24, 16)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _config(tmp_path, **kw) -> ConvertConfig:
    kw.setdefault("inputs", (f"{tmp_path}/in/*/*",))
    return ConvertConfig(manifest=None, output=str(tmp_path / "out"), analyze=False, **kw)


def _record(path: str, key: str, **fields) -> InspectedImage:
    """An inspected JPEG record (the fields the planner and writer read), with overrides."""
    defaults = {
        "path": path,
        "key": key,
        "label": "a",
        "split": "train",
        "size": 10,
        "stamp": None,
        "sha256": "0" * 64,
        "format": "jpeg",
        "source_format": "jpeg",
        "height": 1,
        "width": 1,
        "channels": 3,
        "transcode": "",
        "stats": None,
    }
    return InspectedImage(**(defaults | fields))


def test_input_root_is_directory_before_first_glob():
    assert input_root("/data/imgs/*/*.jpg") == "/data/imgs/"
    assert input_root("gs://b/pre/fix/**") == "gs://b/pre/fix/"
    assert input_root("s3://b/x/a?.png") == "s3://b/x/"
    assert input_root("/data/one/file.jpg") == "/data/one/"


def test_assign_split_is_stable_and_follows_fractions():
    splits = (("train", 0.8), ("validation", 0.2))
    keys = [f"cls/{i}.jpg" for i in range(4000)]
    got = [assign_split(k, 0, splits) for k in keys]
    assert got == [assign_split(k, 0, splits) for k in keys]  # Pure function of key and seed.
    share = got.count("train") / len(got)
    assert 0.77 < share < 0.83
    assert got != [assign_split(k, 1, splits) for k in keys]  # The seed salts the hash.


def test_num_shards_for_byte_target():
    assert num_shards_for(0, 0, 128, 1) == 1
    assert num_shards_for(300e6, 5000, 128, 1) == 3
    assert num_shards_for(300e6, 5000, 128, 8) == 8
    assert num_shards_for(300e6, 2, 128, 8) == 2  # Never more shards than files.


def test_list_images_keys_labels_and_overlapping_patterns(tmp_path):
    for label in ("cat", "dog"):
        os.makedirs(tmp_path / "in" / label)
        for i in range(3):
            (tmp_path / "in" / label / f"{i}.jpg").write_bytes(b"x" * (i + 1))
    config = _config(
        tmp_path,
        inputs=(f"{tmp_path}/in/*/*.jpg", f"{tmp_path}/in/cat/*"),
        splits=(("train", 1.0),),
    )
    with TestPipeline() as p:
        out = p | ListImages(config)
        keys = out["listed"] | beam.FlatMap(
            lambda batch: [(r.key, r.label, r.split, r.size) for r in batch]
        )
        assert_that(
            keys,
            equal_to(
                [
                    (f"{lab}/{i}.jpg", lab, "train", i + 1)
                    for lab in ("cat", "dog")
                    for i in range(3)
                ]
            ),
        )
        assert_that(out["rejected"], equal_to([]), label="NoRejects")


def test_inspect_counts_outcomes_and_tags_rejects(tmp_path):
    os.makedirs(tmp_path / "in" / "a")
    (tmp_path / "in" / "a" / "good.jpg").write_bytes(_jpeg())
    (tmp_path / "in" / "a" / "empty.jpg").write_bytes(b"")
    (tmp_path / "in" / "a" / "text.png").write_bytes(b"<html>hello</html>")
    config = _config(tmp_path)
    listed = [
        ListedFile(str(tmp_path / "in" / "a" / n), f"a/{n}", "a", "train", -1, None)
        for n in ("good.jpg", "empty.jpg", "text.png", "gone.jpg")
    ]
    p = TestPipeline()
    out = p | beam.Create([listed[:2], listed[2:]]) | InspectImages(config)
    assert_that(
        out["inspected"]
        | beam.FlatMap(lambda b: [(r.key, r.format, r.height, r.width, r.size > 0) for r in b]),
        equal_to([("a/good.jpg", "jpeg", 16, 24, True)]),
    )
    assert_that(
        out["rejected"] | beam.Map(lambda r: (os.path.basename(r["path"]), r["reason"])),
        equal_to(
            [("empty.jpg", "empty_file"), ("text.png", "not_an_image"), ("gone.jpg", "unreadable")]
        ),
        label="Rejects",
    )
    result = p.run()
    result.wait_until_finish()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(MetricsFilter().with_namespace("imgrec"))["counters"]
    }
    assert counters["inspected_ok"] == 1
    assert counters["rejected_empty_file"] == 1
    assert counters["rejected_not_an_image"] == 1
    assert counters["rejected_unreadable"] == 1
    # A worker is one core's: BLAS (the perceptual hash's products) gets no threads of its own.
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert blas and {i["num_threads"] for i in blas} == {1}


def test_drop_duplicates_keeps_smallest_key():
    rows = [
        _record(f"/d/{k}", k, sha256=s)
        for k, s in (("b.jpg", "a1"), ("a.jpg", "a1"), ("c.jpg", "b2"), ("z.jpg", "a1"))
    ]
    with TestPipeline() as p:
        images = p | beam.Create([rows[:2], rows[2:]])
        duplicates = images | FindDuplicates()
        unique = images | DropNamed(duplicates)
        assert_that(
            unique | beam.FlatMap(lambda b: [r.key for r in b]),
            equal_to(["a.jpg", "c.jpg"]),
        )
        assert_that(
            duplicates | beam.Map(lambda r: (r["path"], r["duplicate_of"])),
            equal_to([("/d/b.jpg", "/d/a.jpg"), ("/d/z.jpg", "/d/a.jpg")]),
            label="Dups",
        )


def test_plan_shards_groups_by_split_and_hash(tmp_path):
    config = _config(tmp_path, target_shard_mb=1.0, min_shards=1)
    rows = [
        _record(
            f"/d/{i}",
            f"k{i}",
            split="train" if i < 30 else "validation",
            size=100_000,
            sha256=str(i),
            stats=[1.0] * 7,
        )
        for i in range(40)
    ]
    with TestPipeline() as p:
        out = (
            p | beam.Create([rows[i : i + 7] for i in range(0, len(rows), 7)]) | PlanShards(config)
        )
        assert_that(out["plan"], equal_to([{"train": 3, "validation": 1}]))
        sizes = out["groups"] | beam.MapTuple(lambda key, recs: (key[0], len(list(recs))))
        totals = sizes | beam.CombinePerKey(sum)
        assert_that(totals, equal_to([("train", 30), ("validation", 10)]), label="Totals")
        # Each file once, as the compact tuple of exactly the writer's fields (no pixel
        # statistics, no field names), whose values read back by name.
        entries = out["groups"] | beam.FlatMapTuple(lambda key, recs: list(recs))
        assert_that(entries, equal_to([WriterEntry.of(r) for r in rows]), label="CompactEntries")
        by_name = out["groups"] | beam.FlatMapTuple(
            lambda key, recs: [(key[0], e.path, e.size) for e in recs]
        )
        assert_that(
            by_name,
            equal_to([(r.split, r.path, r.size) for r in rows]),
            label="ByName",
        )


def test_write_shards_rejects_files_gone_at_write_time_and_keeps_an_empty_shard(tmp_path):
    from transforms.write_shards import WriteShards

    config = _config(tmp_path)
    record = _record(str(tmp_path / "gone.jpg"), "a/gone.jpg")
    with TestPipeline() as p:
        plan = p | "Plan" >> beam.Create([{"train": 1}])
        labels = p | "Labels" >> beam.Create([["a"]])
        out = (
            p
            | beam.Create([(("train", 0), [WriterEntry.of(record)])])
            | WriteShards(config, plan, labels)
        )
        assert_that(
            out["shards"] | beam.Map(lambda s: (s.file, s.num_examples, s.num_bytes)),
            equal_to([("train/train-00000-of-00001.tfrecord", 0, 0)]),
        )
        assert_that(
            out["rejected"] | beam.Map(lambda r: r["reason"]),
            equal_to(["unreadable"]),
            label="Rejected",
        )
    shard = tmp_path / "out" / "train" / "train-00000-of-00001.tfrecord"
    assert shard.exists() and shard.stat().st_size == 0
    assert not list((tmp_path / "out" / "train").glob(".tmp-*"))


def test_write_shards_checks_each_re_encode_against_the_record(tmp_path):
    """The writer makes --max_side re-encodes (inspection only computes their sides) and decodes
    each one: a re-encode whose sides differ from the record is rejected, not written."""
    import hashlib

    from PIL import Image

    from transforms.write_shards import WriteShards

    config = _config(tmp_path, check=CheckOptions(max_side=100))
    (tmp_path / "in" / "a").mkdir(parents=True)
    records = []
    for name, (w, h) in (("ok", (100, 50)), ("wrong", (40, 40))):
        path = tmp_path / "in" / "a" / f"{name}.jpg"
        buf = io.BytesIO()
        Image.new("RGB", (200, 100), (120, 30, 200)).save(buf, "JPEG")
        data = buf.getvalue() + name.encode()  # distinct bytes, still a valid JPEG
        path.write_bytes(data)
        records.append(
            _record(
                str(path),
                f"a/{name}.jpg",
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                height=h,
                width=w,
                transcode="max_side",
            )
        )
    with TestPipeline() as p:
        plan = p | "Plan" >> beam.Create([{"train": 1}])
        labels = p | "Labels" >> beam.Create([["a"]])
        out = (
            p
            | beam.Create([(("train", 0), [WriterEntry.of(r) for r in records])])
            | WriteShards(config, plan, labels)
        )
        assert_that(
            out["shards"] | beam.Map(lambda s: s.num_examples), equal_to([1]), label="Written"
        )
        assert_that(
            out["rejected"]
            | beam.Map(
                lambda r: (os.path.basename(r["path"]), r["reason"], "40x40" in r["detail"])
            ),
            equal_to([("wrong.jpg", "corrupt", True)]),
            label="Rejected",
        )


def test_a_store_that_stays_down_fails_the_job_instead_of_rejecting_each_file(
    tmp_path, monkeypatch
):
    """Inspection and the writer let storage.StoreOutageError through (a per-file ReadError
    would become an `unreadable` reject): the pipeline stops with the outage message."""
    from core import storage
    from transforms.write_shards import WriteShards

    monkeypatch.setattr(storage, "_BREAKER", storage._OutageBreaker())
    monkeypatch.setattr(storage, "BACKOFF_BASE_S", 0.0)

    def refused(path, compression_type=None):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(storage.FileSystems, "open", refused)
    monkeypatch.setattr(storage.beam_clients, "read_object", refused)  # gs:// reads
    config = _config(tmp_path)
    listed = [
        ListedFile(f"gs://dead/a/{i}.jpg", f"a/{i}.jpg", "a", "train", 100, None) for i in range(40)
    ]
    with pytest.raises(Exception, match="gs://dead looks down"):
        with TestPipeline() as p:
            _ = p | beam.Create([listed]) | InspectImages(config)

    monkeypatch.setattr(storage, "_BREAKER", storage._OutageBreaker())
    records = [WriterEntry.of(_record(item.path, item.key)) for item in listed]
    with pytest.raises(Exception, match="gs://dead looks down"):
        with TestPipeline() as p:
            plan = p | "Plan" >> beam.Create([{"train": 1}])
            labels = p | "Labels" >> beam.Create([["a"]])
            groups = p | "Groups" >> beam.Create([(("train", 0), records)])
            _ = groups | WriteShards(config, plan, labels)
