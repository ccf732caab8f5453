"""core/storage.py against real servers: the GCS emulator and moto's S3 server (tests/servers.py).

Its checks without a server (local disk, the outage breaker on fake stores) are in
tests/unit/test_storage.py."""

from __future__ import annotations

import os
import threading
import time

import pytest
from apache_beam.io.filesystems import FileSystems

from core import storage
from tests.unit.test_storage import fresh_breaker  # a fixture

# 9 MB: above boto3's 8 MB multipart threshold (copies) and Beam's 5 MB S3 part size.
BIG = 9 * 1024 * 1024 + 7


def _payload(n: int) -> bytes:
    return os.urandom(n)


@pytest.fixture
def bucket(store):
    return store.new_bucket()


@pytest.fixture
def short_gcs_client_deadline(monkeypatch):
    """Let Beam's GCS reads retry a failing download for 3 s instead of 120 s (the default).

    (Only the download takes Beam's retry object; the metadata lookup before it always uses
    the library's 120 s default, so tests fail downloads only.)"""
    from apache_beam.io.gcp import gcsio_retry

    monkeypatch.setattr(
        gcsio_retry,
        "DEFAULT_RETRY_WITH_THROTTLING_COUNTER",
        gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER.with_timeout(3.0),
    )


# ---------------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 5, BIG])
def test_read_bytes_returns_the_object(store, bucket, beam_filesystems, size):
    data = _payload(size)
    uri = store.uri(bucket, f"cat/{size}.bin")
    store.put(uri, data)
    assert storage.read_bytes(uri) == data


def test_a_bucket_read_is_one_request(store, bucket, beam_filesystems):
    """core/beam_clients.py's `read_object`: one GET of the object's bytes, not Beam's request
    for its metadata first (GCS: the blob's reload; S3: a HEAD for the size)."""
    data = _payload(BIG)
    uri = store.uri(bucket, "cat/once.bin")
    store.put(uri, data)
    store.relay.requests.clear()
    assert storage.read_bytes(uri) == data
    mine = [(m, t) for m, t in store.relay.requests if "once.bin" in t]
    assert [m for m, _ in mine] == ["GET"], mine


def test_read_missing_object_is_permanent_and_not_retried(store, bucket, beam_filesystems):
    uri = store.uri(bucket, "cat/missing_503.jpg")  # a status-like number in the name
    started = time.monotonic()
    with pytest.raises(storage.ReadError) as info:
        storage.read_bytes(uri)
    assert info.value.transient is False
    assert info.value.attempts == 1
    assert info.value.path == uri
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("status", [429, 503])
def test_read_rides_out_throttling_and_server_errors(store, bucket, beam_filesystems, status):
    data = _payload(1000)
    uri = store.uri(bucket, "dog/a.jpg")
    store.put(uri, data)
    store.relay.fail_next(2, status)
    assert storage.read_bytes(uri) == data
    assert store.relay.injected >= 2 and store.relay.failing == 0


def test_read_survives_a_server_outage(store, bucket, beam_filesystems):
    data = _payload(2000)
    uri = store.uri(bucket, "dog/b.jpg")
    store.put(uri, data)
    # Back 1 s after it went down: less than the shortest total back-off of storage's retries
    # (0.25 + 0.5 + 1.0 s before the 4th attempt), however slow the machine is.
    store.relay.down(for_s=1.0)
    try:
        assert storage.read_bytes(uri) == data
    finally:
        store.relay.heal()


def test_read_gives_up_on_a_persistent_transient_error_and_says_so(
    gcs, beam_filesystems, short_gcs_client_deadline
):
    bucket = gcs.new_bucket()
    uri = gcs.uri(bucket, "cat/c.jpg")
    gcs.put(uri, b"abc")
    gcs.relay.fail_next(10_000, 503, match=b"alt=media")
    try:
        with pytest.raises(storage.ReadError) as info:
            storage.read_bytes(uri)
    finally:
        gcs.relay.heal()
    assert info.value.transient is True
    assert "transient error" in info.value.detail
    assert "503" in info.value.detail


def test_read_many_keeps_order_and_yields_errors(store, bucket, beam_filesystems):
    uris = [store.uri(bucket, f"cls/{i}.jpg") for i in range(6)]
    blobs = {u: _payload(100 + i) for i, u in enumerate(uris)}
    for u, d in blobs.items():
        store.put(u, d)
    missing = store.uri(bucket, "cls/missing.jpg")
    order = uris[:3] + [missing] + uris[3:]
    got = list(storage.read_many(order, concurrency=4))
    assert [p for p, _ in got] == order
    for path, result in got:
        if path == missing:
            assert isinstance(result, storage.ReadError) and not result.transient
        else:
            assert result == blobs[path]


def test_read_many_mixes_bucket_and_local_paths_in_order(store, bucket, beam_filesystems, tmp_path):
    """Bucket objects are read on the pool, local files inline when their turn comes; the
    output keeps the input order either way, errors included."""
    local = []
    for i in range(4):
        p = tmp_path / f"{i}.bin"
        p.write_bytes(b"L" * (i + 1))
        local.append(str(p))
    remote = [store.uri(bucket, f"mix/{i}.jpg") for i in range(4)]
    for i, u in enumerate(remote):
        store.put(u, b"R" * (i + 1))
    order = [remote[0], local[0], local[1], remote[1], str(tmp_path / "gone.bin"), remote[2]]
    order += [local[2], remote[3], local[3]]
    got = list(storage.read_many(order, concurrency=2))
    assert [p for p, _ in got] == order
    for path, result in got:
        if path.endswith("gone.bin"):
            assert isinstance(result, storage.ReadError)
        else:
            n = int(path.rsplit("/", 1)[1].split(".")[0]) + 1
            assert result == (b"L" if path in local else b"R") * n


# ---------------------------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 5, BIG])
def test_write_bytes_atomic_writes_whole_object_and_no_temp(store, bucket, beam_filesystems, size):
    data = _payload(size)
    uri = store.uri(bucket, "out/rejected.jsonl")
    storage.write_bytes_atomic(uri, data)
    assert store.get(uri) == data
    assert store.keys(bucket) == ["out/rejected.jsonl"]
    if store.scheme == "s3":
        assert store.multipart_uploads(bucket) == []


def test_write_bytes_atomic_replaces_existing(store, bucket, beam_filesystems):
    uri = store.uri(bucket, "out/dataset_info.json")
    store.put(uri, b'{"old": true}')
    storage.write_bytes_atomic(uri, b'{"new": true}')
    assert store.get(uri) == b'{"new": true}'
    assert store.keys(bucket) == ["out/dataset_info.json"]


def test_delete_quietly_ignores_missing_objects(store, bucket, beam_filesystems, tmp_path):
    here = store.uri(bucket, "a/x")
    store.put(here, b"1")
    local = tmp_path / "y"
    local.write_bytes(b"2")
    storage.delete_quietly(
        [here, store.uri(bucket, "a/never"), str(local), str(tmp_path / "never")]
    )
    assert store.keys(bucket) == [] and not local.exists()


def test_names_with_pattern_characters_are_listed_and_deleted_literally(
    store, bucket, beam_filesystems, tmp_path
):
    """`match_under` and `delete` take "runs [1]/a?.txt" as that name, on each store: Beam's
    local and GCS deletes read a path as a pattern, S3's does not (core/storage.py)."""
    local = tmp_path / "bucket"
    for base, put in (
        (store.uri(bucket, ""), store.put),
        (f"{local}/", lambda p, d: (os.makedirs(os.path.dirname(p), exist_ok=True),
                                    open(p, "wb").write(d))),
    ):  # fmt: skip
        for name in ("runs [1]/a?.txt", "runs [1]/b*.txt", "runs 1/a?.txt", "runs 1/ab.txt"):
            put(base + name, name.encode())
        folder = base + "runs [1]"
        found = sorted(m.path for m in storage.match_under(folder, "*"))
        assert found == [base + "runs [1]/a?.txt", base + "runs [1]/b*.txt"], found
        storage.delete(base + "runs [1]/a?.txt")
        storage.delete_quietly([base + "runs [1]/b*.txt", base + "runs [1]/never"])
        assert storage.exists(base + "runs 1/a?.txt") and storage.exists(base + "runs 1/ab.txt")
        assert not storage.exists(base + "runs [1]/a?.txt")
        assert not storage.exists(base + "runs [1]/b*.txt")


def test_bucket_stores_list_folders_named_with_pattern_characters(store, bucket, beam_filesystems):
    """The fast rerun's bucket store and the reader's Beam store list "runs [1]" as that folder,
    not as "runs 1" (their listings build patterns from a folder's name too)."""
    from core import stores
    from pipeline.versions.rerun_stores import BucketStore

    for name in ("runs [1]/a.txt", "runs [1]/sub/b.txt", "runs 1/decoy.txt"):
        store.put(store.uri(bucket, name), b"x")
    folder = store.uri(bucket, "runs [1]")
    rerun = BucketStore()
    assert rerun.files(folder) == ["a.txt", "sub/b.txt"]
    reader = stores._BeamStore()  # FileSystems already reach the server (beam_filesystems)
    assert reader.listdir(folder) == ["a.txt"]  # objects directly in it
    assert sorted(reader.walk(folder)) == ["a.txt", "sub/b.txt"]
    rerun.remove_tree(folder)
    assert store.keys(bucket) == ["runs 1/decoy.txt"]


def test_write_through_an_outage_never_shows_a_partial_object(store, bucket, beam_filesystems):
    """The server dies halfway through the upload and comes back 1 s later; a watcher reading
    the final name directly from the server sees nothing, then the whole object."""
    data = _payload(BIG)
    uri = store.uri(bucket, "train/train-00000-of-00001.tfrecord")
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                seen.add(len(store.get(uri)))
            except Exception:  # noqa: BLE001 - absent (404) is an observation too
                seen.add(-1)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # Back 1 s after the cut (timed from the cut itself): shorter than the shortest total
    # back-off before storage's last attempt, so the write must succeed on any machine.
    store.relay.cut_after(BIG // 2, down_for=1.0)
    try:
        storage.write_bytes_atomic(uri, data)
    finally:
        stop.set()
        watcher.join()
        store.relay.heal()  # never leave a fault (or a pending come-back) to the next test
    assert store.relay.uploaded >= BIG // 2, "the cut never happened"
    assert seen <= {-1, len(data)}, f"partial sizes observed: {sorted(seen)}"
    assert store.get(uri) == data
    leftovers = [k for k in store.keys(bucket) if k != "train/train-00000-of-00001.tfrecord"]
    assert leftovers == []


def test_write_to_a_dead_s3_server_fails_transient_and_leaves_nothing(s3, beam_filesystems):
    bucket = s3.new_bucket()
    uri = s3.uri(bucket, "out/dataset_info.json")
    s3.relay.down()
    try:
        with pytest.raises(storage.ReadError) as info:
            storage.write_bytes_atomic(uri, b"{}", attempts=2)
    finally:
        s3.relay.heal()
    assert info.value.transient is True and info.value.attempts == 2
    assert "gave up after 2 attempts" in info.value.detail
    assert s3.keys(bucket) == []


# ---------------------------------------------------------------------------------------------
# What Beam itself does (each test pins a finding the code above works around or relies on;
# when one fails after a Beam upgrade, revisit the workaround it names).
# ---------------------------------------------------------------------------------------------


def test_beam_s3_cannot_write_an_empty_object(s3, beam_filesystems):
    """Why write_bytes_atomic puts empty S3 objects itself."""
    bucket = s3.new_bucket()
    with pytest.raises(Exception, match="MalformedXML"):  # noqa: PT011 - Beam's own S3ClientError
        with FileSystems.create(s3.uri(bucket, "empty.jsonl")):
            pass
    assert s3.keys(bucket) == []


def test_beam_s3_publishes_partial_object_when_writer_raises(s3, beam_filesystems):
    """Why writers must not stream into the final name: on S3 an exception inside
    `with FileSystems.create(...)` still completes the upload."""
    bucket = s3.new_bucket()
    uri = s3.uri(bucket, "train/shard")
    with pytest.raises(ValueError):
        with FileSystems.create(uri) as f:
            f.write(b"x" * 1000)
            raise ValueError("writer failed halfway")
    assert s3.get(uri) == b"x" * 1000


def test_beam_gcs_does_not_publish_partial_object_when_writer_raises(gcs, beam_filesystems):
    bucket = gcs.new_bucket()
    uri = gcs.uri(bucket, "train/shard")
    with pytest.raises(ValueError):
        with FileSystems.create(uri) as f:
            f.write(b"x" * 1000)
            raise ValueError("writer failed halfway")
    assert gcs.keys(bucket) == []


def test_match_double_star_semantics(store, bucket, beam_filesystems, tmp_path):
    """`root/**` matches every file below root; `root/**/*.jpg` only files at least one
    directory below root (the same on local disk, GCS and S3)."""
    keys = ["root/top.jpg", "root/cat/a.jpg", "root/cat/deep/b.jpg", "other/c.jpg"]
    for k in keys:
        store.put(store.uri(bucket, k), b"x")
        (tmp_path / k).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / k).write_bytes(b"x")

    def match(base: str, pattern: str) -> list[str]:
        found = FileSystems.match([base + pattern])[0].metadata_list
        return sorted(m.path[len(base) :] for m in found)

    for base in (store.uri(bucket), str(tmp_path) + "/"):
        assert match(base, "root/**") == ["root/cat/a.jpg", "root/cat/deep/b.jpg", "root/top.jpg"]
        assert match(base, "root/**/*.jpg") == ["root/cat/a.jpg", "root/cat/deep/b.jpg"]
        assert match(base, "root/*") == ["root/top.jpg"]
        assert match(base, "nothing/**") == []


# ---------------------------------------------------------------------------------------------
# A store that stays down
# ---------------------------------------------------------------------------------------------


def test_a_dead_gcs_bucket_stops_the_reads_with_one_clear_error(
    gcs, beam_filesystems, short_gcs_client_deadline, fresh_breaker
):
    """Against the GCS emulator answering 503 to every download: the reads stop after two
    rounds (not 40 files x the client's retry deadline) with an error naming the bucket."""
    bucket = gcs.new_bucket()
    uris = [gcs.uri(bucket, f"cat/{i}.jpg") for i in range(40)]
    for uri in uris:
        gcs.put(uri, b"abc")
    gcs.relay.fail_next(10_000, 503, match=b"alt=media")
    start = time.monotonic()
    try:
        with pytest.raises(storage.StoreOutageError) as info:
            list(storage.read_many(uris, concurrency=8))
    finally:
        gcs.relay.heal()
    assert f"gs://{bucket} looks down" in str(info.value)
    assert "503" in str(info.value)
    assert time.monotonic() - start < 60
    assert storage.read_bytes(uris[0]) == b"abc"  # healed: the store reads again
