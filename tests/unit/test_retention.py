"""Retention of old versions (issue 30): durations, leases a reader writes and removes, and the
choice `--keep_versions` + leases + `--keep_for` make, on hand-made local roots."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import time

import pytest

from core import leases, retention, schema, shard_cache, versions
from pipeline.reader import dataset as reader
from tests.unit.test_reader import IMAGE_SIZE, write_dataset

V1, V2, V3 = "v20261201T030000Z", "v20261202T030000Z", "v20261203T030000Z"


def _root(tmp_path, names=(V1, V2, V3)) -> str:
    """A versioned root of tiny complete versions; LATEST names the last."""
    root = str(tmp_path / "root")
    for name in names:
        write_dataset(os.path.join(root, name), splits={"train": (6, 2)})
        with open(os.path.join(root, name, versions.VERSION_MARKER), "w") as f:
            json.dump({"version": name}, f)
    with open(os.path.join(root, versions.LATEST), "w") as f:
        f.write(names[-1] + "\n")
    return root


def _published(root: str, name: str, when: float) -> None:
    path = os.path.join(root, name, *versions.PUBLISHED.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(versions.published_record(when))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("90s", 90), ("30m", 1800), ("12h", 43200), ("1d", 86400), ("2w", 1209600),
     ("1.5h", 5400), ("45", 45)],
)  # fmt: skip
def test_durations(text, seconds):
    assert retention.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "-1d", "1y", "d", "1 day", "forever"])
def test_bad_durations_name_the_option_and_the_forms(text):
    with pytest.raises(ValueError, match=r"--keep_for must be a duration such as 0, 90s, 30m"):
        retention.parse_duration(text)


def test_keep_for_option_is_parsed_and_checked():
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.options import ConvertConfig, OptionError

    base = ["--input", "x/*.jpg", "--output", "out", "--versioned", "--keep_versions", "1"]
    assert ConvertConfig.from_options(PipelineOptions(base)).keep_for_s == 86400
    assert ConvertConfig.from_options(PipelineOptions([*base, "--keep_for", "0"])).keep_for_s == 0
    with pytest.raises(OptionError, match="--keep_for must be a duration such as"):
        ConvertConfig.from_options(PipelineOptions([*base, "--keep_for", "soon"]))


def test_keep_for_counts_from_when_the_next_version_was_published(tmp_path):
    root = _root(tmp_path)
    now = time.time()
    _published(root, V2, now - 3 * 3600)  # V1 superseded 3 h ago
    _published(root, V3, now - 60)  # V2 superseded a minute ago
    names = [V1, V2, V3]
    held = retention.retention_holds(root, [V1, V2], names, V3, 4 * 3600, now)
    assert set(held) == {V1, V2}
    assert held[V1].startswith("superseded 3h ago; --keep_for 4h keeps it until ")
    held = retention.retention_holds(root, [V1, V2], names, V3, 2 * 3600, now)
    assert set(held) == {V2}
    assert retention.retention_holds(root, [V1, V2], names, V3, 0, now) == {}
    # prune follows: only V1 goes with --keep_for 2h; V2 goes on a later run.
    assert retention.prune(root, 1, V3, 2 * 3600, now) == [V1]
    assert sorted(versions.list_versions(root)) == [V2, V3]


def test_a_live_lease_holds_its_version_and_an_expired_one_does_not(tmp_path):
    root = _root(tmp_path)
    folder = leases.lease_folder(os.path.join(root, V1))
    os.makedirs(folder)
    now = time.time()
    lease = {"host": "trainer", "pid": 7, "expires_unix": now + 60, "acquired_unix": now}
    with open(os.path.join(folder, "trainer-7-ab.json"), "w") as f:
        json.dump(lease, f)
    with open(os.path.join(folder, "junk.json"), "w") as f:
        f.write("{not json")
    held = retention.retention_holds(root, [V1, V2], [V1, V2, V3], V3, 0, now)
    assert list(held) == [V1] and held[V1].startswith("held by 1 reader(s) (trainer-7; lease ")
    assert retention.prune(root, 1, V3, 0, now) == [V2]
    # The holder was killed: nobody renews; once the expiry is past, the next prune takes it.
    assert retention.prune(root, 1, V3, 0, now + 61) == [V1]
    assert versions.list_versions(root) == [V3]


def test_make_dataset_holds_a_lease_while_its_dataset_lives(tmp_path):
    root = _root(tmp_path, (V1,))
    folder = leases.lease_folder(os.path.join(root, V1))
    ds = reader.make_dataset(root, "train", 2, image_size=IMAGE_SIZE)
    again = reader.make_dataset(root, "train", 2, image_size=IMAGE_SIZE)
    files = os.listdir(folder)
    assert len(files) == 1, "one lease per version per process"
    with open(os.path.join(folder, files[0])) as f:
        lease = json.load(f)
    assert lease["pid"] == os.getpid() and lease["version"] == V1
    assert lease["expires_unix"] > time.time() + leases.DEFAULT_TTL_S / 2
    assert [d["file"] for d in leases.live_leases(os.path.join(root, V1))] == files
    it = iter(ds)
    next(it)
    del ds, again
    gc.collect()
    assert os.listdir(folder) == files, "an iterator keeps its dataset, and the lease"
    del it
    gc.collect()
    assert os.listdir(folder) == []
    reader.make_dataset(root, "train", 2, image_size=IMAGE_SIZE, lease=False)
    assert os.listdir(folder) == []


def test_a_reader_that_cannot_write_its_lease_says_so_once_and_reads(tmp_path, caplog):
    root = _root(tmp_path, (V1,))

    class ReadOnly:  # a store with read-only credentials
        def __init__(self):
            self.inner = shard_cache.open_store(root)
            self.writes = 0

        def write_bytes(self, uri, data):
            self.writes += 1
            raise PermissionError(f"403 Forbidden: {uri}")

        def delete(self, uri):
            raise PermissionError("403 Forbidden")

    store = ReadOnly()
    with caplog.at_level(logging.WARNING):
        lease = leases.hold(os.path.join(root, V1), store, ttl_s=0.3)
        leases.attach(lease, store)  # renewed while `store` lives
        # Renewals, each refused (waited for, not slept: a loaded machine may delay them).
        deadline = time.monotonic() + 60
        while store.writes < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    warnings = [r for r in caplog.records if "cannot write the lease" in r.getMessage()]
    assert store.writes >= 2 and len(warnings) == 1
    assert "give the reader write access to" in warnings[0].getMessage()
    del store
    gc.collect()
    ds = reader.make_dataset(root, "train", 2, image_size=IMAGE_SIZE)
    assert sum(int(labels.shape[0]) for _, labels in ds) == 6


def test_retention_line_says_which_versions_stay_and_why(tmp_path):
    root = _root(tmp_path)
    _published(root, V2, time.time() - 60)
    _published(root, V3, time.time() - 30)
    line = retention.retention_line(root, 1, 3600)
    # 60 s ago when written; a loaded machine may take a few seconds more to get here.
    assert re.match(rf"  kept        {V1}: superseded 1(\.\d)?m ago; --keep_for 1h ", line), line
    assert line.splitlines()[0].endswith("; a later run prunes it")
    assert retention.retention_line(root, 1, 0) is None
    assert schema.DATASET_INFO in os.listdir(os.path.join(root, V1))


def test_imgrec_versions_lists_latest_sizes_and_readers(tmp_path):
    from tests.runs import in_process

    root = _root(tmp_path)
    unfinished = "v20261204T030000Z"
    os.makedirs(os.path.join(root, unfinished))
    with open(os.path.join(root, unfinished, versions.VERSION_MARKER), "w") as f:
        json.dump({"version": unfinished}, f)
    lease = leases.hold(os.path.join(root, V2), shard_cache.open_store(root), ttl_s=600)
    try:
        out = in_process("versions", root).stdout.splitlines()
    finally:
        leases.release_unused(lease)
    assert out[0] == f"{root}: 4 version(s)"
    rows = {line.split()[0]: line for line in out[2:]}
    size = sum(
        os.path.getsize(os.path.join(root, V3, "train", n))
        for n in os.listdir(os.path.join(root, V3, "train"))
    )
    assert rows[V3].split()[1:4] == ["LATEST", "6", f"{size / 1e3:.1f}"]
    assert rows[V1].split()[1:3] == ["superseded", "6"] and rows[V1].endswith("  -")
    assert f"  1 ({os.uname().nodename}-{os.getpid()}; lease expires in " in rows[V2]
    assert rows[unfinished].split()[1] == "unfinished"
    assert in_process("versions", str(tmp_path / "nothing"), check=False).returncode == 1
