"""pipeline/launch/patches.py's share_gcs_clients: Beam's GCS filesystem shares one client per
process and configuration; with it and core/beam_clients.py's `read_object`, a conversion on a
bucket looks the bucket up once and reads each photo in one request."""

from __future__ import annotations

import os

import pytest

from pipeline.launch import patches


def _gcsio(project: str):
    from apache_beam.io.gcp.gcsfilesystem import GCSFileSystem
    from apache_beam.options.pipeline_options import PipelineOptions

    return GCSFileSystem(PipelineOptions([f"--project={project}"]))._gcsIO()  # noqa: SLF001


def test_beam_gcs_operations_share_one_client_per_configuration(cloud_env, monkeypatch):
    """Beam's GCS filesystem builds a GcsIO, and a google-cloud-storage client with its own
    connection pool and bucket-metadata lookup, per operation; once shared, operations with the
    same configuration reuse one client, other projects or another emulator get their own, and
    Beam's GcsIO stays per operation."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:1")
    assert patches.share_gcs_clients() is True
    assert patches.share_gcs_clients() is True  # idempotent
    a, b, other = _gcsio("p"), _gcsio("p"), _gcsio("q")
    assert a is not b  # Beam's wrapper
    assert a.client is b.client  # the client under it
    assert other.client is not a.client
    adapter = a.client._http.get_adapter("http://127.0.0.1:1/")  # noqa: SLF001
    assert adapter._pool_maxsize == patches._MAX_POOL_CONNECTIONS  # noqa: SLF001
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:2")
    moved = _gcsio("p")
    assert moved.client is not a.client and "127.0.0.1:2" in moved.client._connection.API_BASE_URL  # noqa: SLF001

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked worker builds its own client, never its parent's connections
        os.write(write, b"1" if _gcsio("p").client is not moved.client else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"


@pytest.mark.e2e  # a whole conversion on the storage servers
def test_a_bucket_conversion_looks_the_bucket_up_once_and_reads_a_photo_in_one_request(
    gcs, tmp_path
):
    """The GCS emulator behind the test's relay: a conversion reads and writes through one
    client, so google-cloud-storage's background lookup of the bucket's metadata runs once (it
    ran once per operation: 78 times for these 24 photos); and each read of a photo is one GET of
    its bytes, not Beam's metadata GET first (core/beam_clients.py's `read_object`). (The
    emulator closes every connection after its answer, so connection reuse cannot be seen here.)"""
    from pipeline.demo import build_corpus
    from tests.runs import in_process
    from tests.servers import put_corpus

    # The `imgrec` program installs its patches (pipeline/launch/services.py); in_process runs
    # the command as a library caller, which gets none: the client sharing under test, as the
    # program runs it.
    assert patches.share_gcs_clients() is True

    src = tmp_path / "photos"
    build_corpus(str(src), num_images=24, broken=False)
    bucket = gcs.new_bucket("clients")
    put_corpus(gcs, bucket, src)
    gcs.relay.requests.clear()
    in_process(
        "convert", "--input", gcs.uri(bucket, "photos/*/*.jpg"), "--output", gcs.uri(bucket, "ds"),
        "--no_analyze", "--no_report", "--workers", "1", *gcs.beam_args,
    )  # fmt: skip
    requests = list(gcs.relay.requests)
    lookups = [t for m, t in requests if m == "GET" and t.startswith(f"/storage/v1/b/{bucket}?")]
    assert len(lookups) <= 1, lookups
    photo = f"/b/{bucket}/o/photos%2F"
    media = [t for m, t in requests if m == "GET" and photo in t and "alt=media" in t]
    metadata = [t for m, t in requests if m == "GET" and photo in t and "alt=media" not in t]
    # Each photo is read twice (inspected, then streamed into its shard), one request a read.
    assert len(media) == 2 * 24, media
    assert metadata == []
