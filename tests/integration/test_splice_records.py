"""Spliced reruns: an unchanged file's record is copied from the previous version's shard (its
CRCs checked), its source is not read, and the version still equals a from-scratch conversion."""

from __future__ import annotations

import glob
import json
import os
import shutil
import time
import urllib.parse

import pytest

from core import schema, storage
from pipeline.demo import build_corpus
from tests.integration.test_incremental import (
    _in_process_default,
    _input,
    _rewrite_same_size,
    _run,
    snapshot,
)
from tests.servers import past_the_second, put_corpus


@pytest.fixture
def corpus(tmp_path):
    d = str(tmp_path / "corpus")
    summary = build_corpus(d, num_images=80, seed=11, long_side=(48, 80))
    return d, summary


@pytest.fixture
def source_reads(monkeypatch, corpus):
    """Every read of a file under the corpus folder, by path (the in-memory runner runs the
    DoFns in this process, so storage.read_bytes sees every source read)."""
    src = corpus[0]
    reads: list[str] = []
    real = storage.read_bytes

    def counting(path, *args, **kwargs):
        if path.startswith(src):
            reads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(storage, "read_bytes", counting)
    return reads


def _add_remove_change(src: str, tmp_path) -> tuple[list[str], list[str]]:
    """Add 6 photos, remove 3, rewrite 2 (same size, other bytes) -> (added, changed) paths."""
    extra = str(tmp_path / "extra")
    build_corpus(extra, num_images=6, seed=99, long_side=(48, 80), broken=False)
    added = []
    for path in sorted(glob.glob(os.path.join(extra, "*", "*.jpg"))):
        label = os.path.basename(os.path.dirname(path))
        added.append(os.path.join(src, label, "added_" + os.path.basename(path)))
        shutil.copy(path, added[-1])
    for path in sorted(glob.glob(os.path.join(src, "*", "*_00001*.jpg")))[:3]:
        os.remove(path)
    changed = sorted(glob.glob(os.path.join(src, "*", "*_00004*.jpg")))[:2]
    for path in changed:
        _rewrite_same_size(path)
    return added, changed


def _rejected(version: str) -> set[str]:
    with open(os.path.join(version, "rejected.jsonl")) as f:
        return {json.loads(line)["path"] for line in f}


def _marker_records(version: str) -> dict[str, list]:
    """path -> its record entry, over every shard marker of `version`."""
    found = {}
    for marker in glob.glob(os.path.join(version, ".imgrec", "shards", "*.json")):
        with open(marker) as f:
            for rec in json.load(f).get("records", []):
                found[rec[0]] = rec
    return found


def test_a_rerun_reads_only_added_and_changed_sources(corpus, tmp_path, source_reads):
    src, _ = corpus
    root = str(tmp_path / "root")
    first, c1 = _run([*_input(src), "--output", root], versioned=True)
    assert "records_spliced" not in c1
    # Every written record is located: the offsets point at whole frames of its shard.
    records = _marker_records(first)
    assert len(records) == c1["written"]
    added, changed = _add_remove_change(src, tmp_path)

    source_reads.clear()
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    read = set(source_reads)
    fresh, _ = _run([*_input(src), "--output", str(tmp_path / "fresh")], versioned=False)
    assert snapshot(second) == snapshot(fresh)
    # Sources the rerun read (inspection, then the writer): the new and changed files, and the
    # files rejected last time (they have no inspection record); nothing of an unchanged one.
    expected = set(added) | set(changed)
    assert read - _rejected(first) == expected, sorted(read ^ expected)
    # The writer spliced every record of an unchanged file in a shard it wrote anew.
    assert c2["records_spliced"] == c2["written"] - len(added) - len(changed)
    assert c2.get("records_rebuilt", 0) == 0
    assert not any(k.startswith("splice_refused_") for k in c2), c2
    assert len(_marker_records(second)) == sum(
        json.load(open(m))["shard"]["num_examples"]
        for m in glob.glob(os.path.join(second, ".imgrec", "shards", "*.json"))
    )


def test_a_flipped_byte_in_a_previous_shard_is_caught_by_the_record_crc(
    corpus, tmp_path, source_reads
):
    src, _ = corpus
    root = str(tmp_path / "root")
    first, c1 = _run([*_input(src), "--output", root], versioned=True)
    expected = snapshot(first)
    records = _marker_records(first)
    # One byte inside the image bytes of the middle record of the first non-empty shard.
    shards = sorted(
        p for p in glob.glob(os.path.join(first, "*", "*.tfrecord")) if os.path.getsize(p)
    )
    victim = shards[0]
    rel = os.path.relpath(victim, first)
    with open(os.path.join(first, ".imgrec", "shards", os.path.basename(rel)[:-9] + ".json")) as f:
        victim_records = json.load(f)["records"]
    middle = victim_records[len(victim_records) // 2]
    with open(victim, "r+b") as f:
        f.seek(middle[5] + middle[6] // 2)
        byte = f.read(1)
        f.seek(middle[5] + middle[6] // 2)
        f.write(bytes([byte[0] ^ 0x01]))

    source_reads.clear()
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    assert snapshot(second) == expected
    # The damaged shard was not copied whole (its sha256) and its records were not spliced
    # (the CRC): its files alone were read from source.
    assert c2["shard_copies_refused"] == 1
    assert c2["splice_refused_crc"] == len(victim_records)
    assert set(source_reads) - _rejected(first) == {r[0] for r in victim_records}
    assert len(records) == c1["written"]


def test_a_new_class_rebuilds_records_from_the_previous_image_bytes(corpus, tmp_path, source_reads):
    """A new class name sorting first moves every label id: no record's bytes carry over, each
    is rebuilt from the previous record's image bytes, still without reading its source."""
    src, _ = corpus
    root = str(tmp_path / "root")
    first, c1 = _run([*_input(src), "--output", root], versioned=True)
    os.makedirs(os.path.join(src, "aaa_new"))
    extra = str(tmp_path / "extra")
    build_corpus(extra, num_images=2, seed=5, long_side=(48, 80), broken=False)
    new = sorted(glob.glob(os.path.join(extra, "*", "*.jpg")))[0]
    shutil.copy(new, os.path.join(src, "aaa_new", "new.jpg"))

    source_reads.clear()
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    read = set(source_reads)
    fresh, _ = _run([*_input(src), "--output", str(tmp_path / "fresh")], versioned=False)
    assert snapshot(second) == snapshot(fresh)
    assert read - _rejected(first) == {os.path.join(src, "aaa_new", "new.jpg")}
    assert c2["records_rebuilt"] == c1["written"]
    assert c2.get("records_spliced", 0) == 0 and "shards_copied" not in c2


def test_other_options_read_sources_and_say_why(corpus, tmp_path, source_reads):
    """A previous version written with --compression gzip cannot serve byte ranges."""
    src, _ = corpus
    root = str(tmp_path / "root")
    _run([*_input(src), "--output", root, "--compression", "gzip"], versioned=True)
    source_reads.clear()
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    read = set(source_reads) - _rejected(second)
    fresh, _ = _run([*_input(src), "--output", str(tmp_path / "fresh")], versioned=False)
    assert snapshot(second) == snapshot(fresh)
    assert c2["splice_refused_settings"] >= 1 and "records_spliced" not in c2
    assert len(read) == c2["written"]


def _object_gets(requests: list[tuple[str, str]], prefix: str) -> list[str]:
    """The object names under `prefix` that GET requests named (GCS JSON API and media
    downloads: `.../o/<name>`; S3 path style: `/<bucket>/<name>`), one entry per request."""
    names = []
    for method, target in requests:
        path = urllib.parse.unquote(urllib.parse.urlsplit(target).path)
        at = path.find("/" + prefix)
        if method == "GET" and at >= 0:
            names.append(path[at + 1 :])
    return names


@pytest.mark.e2e  # conversions on the storage servers (minutes on 2 cores)
@pytest.mark.parametrize("store", ["gs", "s3"], indirect=True)
def test_bucket_rerun_gets_only_added_and_replaced_sources(store, tmp_path):
    """Input and versioned root on a bucket: after adding ~5 % and replacing ~3 % of the
    photos, the rerun's GETs on source objects (counted by the relay in front of the server)
    name only the added and replaced ones; the version equals a from-scratch conversion.
    Default options (analysis, report) but for test-sized shards."""
    src = tmp_path / "corpus"
    build_corpus(str(src), num_images=40, seed=6, long_side=(48, 72), broken=False)
    bucket = store.new_bucket("splice")
    names = put_corpus(store, bucket, src)
    uploaded = time.time()
    root = store.uri(bucket, "flowers")
    args = ["--input", store.uri(bucket, "photos/*/*.jpg"), *store.beam_args]
    _in_process_default(*args, "--output", root, "--versioned")

    extra = tmp_path / "extra"
    build_corpus(str(extra), num_images=2, seed=77, long_side=(48, 72), broken=False)
    added = []
    for path in sorted(extra.rglob("*.jpg"))[:2]:
        added.append(f"photos/{path.parent.name}/added_{path.name}")
        store.put(store.uri(bucket, added[-1]), path.read_bytes())
    replaced = "photos/" + names[3]
    data = bytearray(store.get(store.uri(bucket, replaced)))
    data[15] = 2 if data[15] != 2 else 3  # Other bytes, same size, still a valid JPEG.
    past_the_second(uploaded)  # S3 reports update times to the second.
    store.put(store.uri(bucket, replaced), bytes(data))

    store.relay.requests.clear()
    proc = _in_process_default(*args, "--output", root, "--versioned")
    gets = _object_gets(list(store.relay.requests), "photos/")
    assert sorted(set(gets)) == sorted([*added, replaced]), proc.stdout
    assert "  spliced " in proc.stdout and "not spliced" not in proc.stdout, proc.stdout
    v1, v2 = sorted(
        k.split("/")[1] for k in store.keys(bucket, "flowers/") if k.endswith("/version.json")
    )
    shard_gets = _object_gets(list(store.relay.requests), f"flowers/{v1}/train/")
    assert shard_gets, "the previous version's shards were read by range"

    fresh = str(tmp_path / "fresh")
    _in_process_default(*args, "--output", fresh)
    local = tmp_path / "v2"
    for key in store.keys(bucket, f"flowers/{v2}/"):
        rel = key.split("/", 2)[2]
        if rel.endswith((".tfrecord", ".jsonl", schema.DATASET_INFO)) and "/." not in "/" + rel:
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_bytes(store.get(store.uri(bucket, key)))
    assert snapshot(str(local)) == snapshot(fresh)


def test_spliced_records_keep_the_dali_index_exact(corpus, tmp_path, source_reads):
    """--dali_index: a shard written from spliced records has the index a fresh run writes."""
    src, _ = corpus
    root = str(tmp_path / "root")
    _run([*_input(src), "--output", root, "--dali_index"], versioned=True)
    added, changed = _add_remove_change(src, tmp_path)
    second, c2 = _run([*_input(src), "--output", root, "--dali_index"], versioned=True)
    fresh = str(tmp_path / "fresh")
    _run([*_input(src), "--output", fresh, "--dali_index"], versioned=False)
    assert c2["records_spliced"] == c2["written"] - len(added) - len(changed)
    assert snapshot(second) == snapshot(fresh)
    indexes = sorted(glob.glob(os.path.join(fresh, "*", "*.idx")))
    assert indexes
    for path in indexes:
        with (
            open(path, "rb") as f,
            open(os.path.join(second, os.path.relpath(path, fresh)), "rb") as g,
        ):
            assert f.read() == g.read(), path


def test_a_missing_previous_shard_is_read_from_source(corpus, tmp_path, source_reads):
    """A previous shard deleted by hand: neither copied nor spliced; its files are read from
    source, the summary counts them, and the version still equals the previous one."""
    src, _ = corpus
    root = str(tmp_path / "root")
    first, _ = _run([*_input(src), "--output", root], versioned=True)
    expected = snapshot(first)
    victim = sorted(
        p for p in glob.glob(os.path.join(first, "*", "*.tfrecord")) if os.path.getsize(p)
    )[0]
    marker = os.path.join(
        first, ".imgrec", "shards", os.path.basename(victim)[: -len(".tfrecord")] + ".json"
    )
    with open(marker) as f:
        victim_paths = {r[0] for r in json.load(f)["records"]}
    os.remove(victim)
    source_reads.clear()
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    assert set(source_reads) - _rejected(first) == victim_paths
    assert c2["splice_refused_missing"] == len(victim_paths)
    assert snapshot(second) == expected
