"""core/storage.py on local disk and on fake stores; against the GCS emulator and moto's S3 server
in tests/integration/test_storage_servers.py."""

from __future__ import annotations

import contextlib
import os
import threading

import pytest

from core import storage

# ---------------------------------------------------------------------------------------------
# Reads
# ---------------------------------------------------------------------------------------------


def test_read_many_on_local_files(tmp_path):
    paths = []
    for i in range(5):
        p = tmp_path / f"{i}.bin"
        p.write_bytes(bytes([i]) * i)
        paths.append(str(p))
    assert [d for _, d in storage.read_many(paths, concurrency=3)] == [
        bytes([i]) * i for i in range(5)
    ]


# ---------------------------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------------------------


def test_write_bytes_atomic_local(tmp_path):
    path = str(tmp_path / "sub" / "x.json")
    os.makedirs(tmp_path / "sub")
    storage.write_bytes_atomic(path, b"")
    storage.write_bytes_atomic(path, b"12345")
    assert open(path, "rb").read() == b"12345"
    assert os.listdir(tmp_path / "sub") == ["x.json"]


# ---------------------------------------------------------------------------------------------
# Classification and names
# ---------------------------------------------------------------------------------------------


def test_is_transient_ignores_numbers_in_paths():
    assert not storage.is_transient(FileNotFoundError(2, "Not found: gs://b/img_503.jpg"))
    assert not storage.is_transient(ValueError("bad header in s3://b/429/x.png"))
    assert storage.is_transient(ConnectionResetError(104, "Connection reset by peer"))
    assert storage.is_transient(TimeoutError("read timed out"))


def test_temp_sibling_is_hidden_next_to_the_target():
    for base in ("gs://b/out/train", "s3://b/out/train", "/tmp/out/train"):
        tmp = storage.temp_sibling(base + "/train-00000-of-00004.tfrecord")
        head, _, tail = tmp.rpartition("/")
        assert head == base
        assert tail.startswith(storage.TEMP_PREFIX + "train-00000-of-00004.tfrecord-")
    assert storage.join("gs://b/out", "train", "x") == "gs://b/out/train/x"
    assert storage.join("s3://b/out/", "x") == "s3://b/out/x"


# ---------------------------------------------------------------------------------------------
# A store that stays down
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_breaker(monkeypatch):
    """A new outage breaker per test, and no backoff sleeps between our retries."""
    monkeypatch.setattr(storage, "_BREAKER", storage._OutageBreaker())
    monkeypatch.setattr(storage, "BACKOFF_BASE_S", 0.0)


class _FakeStores:
    """Reads from fake buckets (FileSystems.open, and beam_clients.read_object, which reads
    gs:// and s3:// objects): a path with "down" in it is refused (transient), one with "gone"
    is missing (permanent), anything else answers b"ok". Counts the opens."""

    def __init__(self):
        self.opens = 0
        self._lock = threading.Lock()

    def open(self, path, compression_type=None):
        import io

        with self._lock:
            self.opens += 1
        if "down" in path:
            raise ConnectionRefusedError(111, "Connection refused")
        if "gone" in path:
            raise FileNotFoundError(path)
        return io.BytesIO(b"ok")

    def read_object(self, path):
        return self.open(path).read()


@pytest.fixture
def fake_stores(monkeypatch, fresh_breaker):
    fake = _FakeStores()
    monkeypatch.setattr(storage.FileSystems, "open", fake.open)
    monkeypatch.setattr(storage.beam_clients, "read_object", fake.read_object)
    return fake


def test_a_store_that_stays_down_stops_the_job_after_a_bounded_number_of_reads(fake_stores):
    paths = [f"gs://down/img/{i}.jpg" for i in range(1000)]
    concurrency = 8
    with pytest.raises(storage.StoreOutageError) as info:
        for _ in storage.read_many(paths, concurrency=concurrency):
            pass
    message = str(info.value)
    assert message.startswith("imgrec-error: gs://down looks down: 16 reads in a row")
    assert "Connection refused" in message and "--resume" in message
    # The reads that tripped it and those already in flight then, not 1,000 files' worth of
    # retries (4 attempts per read): no read starts after the trip. Before that rule, a loaded
    # machine saw up to 26 (the caller took earlier results first, each starting a new read).
    reads = fake_stores.opens / storage.MAX_ATTEMPTS
    assert storage.OUTAGE_THRESHOLD <= reads <= storage.OUTAGE_THRESHOLD + concurrency - 1, reads


def test_sporadic_failures_and_missing_objects_never_stop_the_job(fake_stores):
    """A success in between resets the count; a missing object says nothing about the store."""
    paths = [f"gs://flaky/{'down' if i % 4 else 'up'}-{i}.jpg" for i in range(200)]
    paths += [f"gs://flaky/gone-{i}.jpg" for i in range(100)]
    results = dict(storage.read_many(paths, concurrency=1))
    failed = {p for p, r in results.items() if isinstance(r, storage.ReadError)}
    assert failed == {p for p in paths if "/up-" not in p}
    assert all(results[p].transient == ("/down-" in p) for p in failed)


def test_outages_are_counted_per_store(fake_stores):
    """Successes on one bucket do not hide that another is down."""
    threshold = storage.OUTAGE_THRESHOLD
    down = [f"gs://down-a/{i}" for i in range(threshold - 1)]
    other = [f"gs://down-b/{i}" for i in range(threshold - 1)]
    healthy = [f"gs://up/{i}" for i in range(50)]
    for path in down + other + healthy:
        with contextlib.suppress(storage.ReadError):
            storage.read_bytes(path)
    with pytest.raises(storage.StoreOutageError, match="gs://down-a looks down"):
        storage.read_bytes("gs://down-a/last")
    # Tripping starts the count over: a retried bundle probes the store again.
    with pytest.raises(storage.ReadError):
        storage.read_bytes("gs://down-a/again")


def test_cli_reports_an_outage_in_one_line(monkeypatch, capsys):
    """`imgrec inspect|verify` on a bucket that stays down: one line, exit 1, no traceback."""
    from pipeline import cli

    def down(argv):
        raise storage.StoreOutageError(
            "gs://dead", 16, storage.ReadError("gs://dead/x", "transient error: 503", True, 4)
        )

    monkeypatch.setattr(cli, "_inspect", down)
    assert cli.main(["inspect", "gs://dead/ds"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("imgrec: gs://dead looks down: 16 reads in a row") and "--resume" in err
    assert err.count("\n") == 1
