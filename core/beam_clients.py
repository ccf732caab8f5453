"""Beam's cloud filesystems with one client per process and configuration, not one per operation.

Beam's S3 and GCS filesystems (`apache_beam.io.aws.s3filesystem.S3FileSystem`,
`apache_beam.io.gcp.gcsfilesystem.GCSFileSystem`) build a new `S3IO` / `GcsIO`, and with it a new
store client, for every call: open, exists, size, rename, delete, match. Each client brings a
fresh connection pool (a new TCP and TLS connection per file read), and a GCS client also starts a
background lookup of the bucket's metadata (google-cloud-storage's `BucketMetadataCache`, one per
client, so it never hits). `share_s3_clients` and `share_gcs_clients` keep Beam's per-operation
wrappers (they hold one download's or upload's state) and share the client under them.
`core.beam_compat.install()` applies both in every imgrec process; tests/unit/test_beam_clients.py
checks what they rely on.
"""

from __future__ import annotations

import os
import threading
import types

__all__ = ["GCS_MAX_POOL_CONNECTIONS", "S3_MAX_POOL_CONNECTIONS", "share_gcs_clients",
           "share_s3_clients"]  # fmt: skip

# Connections a shared S3 client keeps open (boto3's default is 10): storage.read_many's reads in
# flight plus the shard writers and renames of one worker, without "connection pool is full" churn.
S3_MAX_POOL_CONNECTIONS = 32


class _SharedS3Session:
    """Stands in for `boto3.session.Session()` inside Beam's S3 client wrapper: `.client(...)`
    returns one boto3 client per process and exact set of arguments (endpoint, region, keys, SSL
    options), created on first use. boto3 clients are thread-safe; sessions are not, so each
    client gets its own session. The process id is part of the key: a forked child never uses its
    parent's connections."""

    _lock = threading.Lock()
    _clients: dict[tuple, object] = {}

    def __init__(self, boto3_module):
        self._boto3 = boto3_module

    def client(self, *args, **kwargs):
        key = (
            os.getpid(),
            args,
            tuple(sorted(kwargs.items())),
        )  # names are unique: values never compared
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                if "config" not in kwargs:
                    from botocore.config import Config

                    kwargs["config"] = Config(max_pool_connections=S3_MAX_POOL_CONNECTIONS)
                client = self._boto3.session.Session().client(*args, **kwargs)
                self._clients[key] = client
            return client


class _SharedBoto3:
    """The `boto3` name inside `apache_beam.io.aws.clients.s3.boto3_client`: everything is the real
    module's except `session.Session`, which shares clients (`_SharedS3Session`)."""

    def __init__(self, boto3_module):
        self.real = boto3_module
        self.session = types.SimpleNamespace(Session=lambda: _SharedS3Session(boto3_module))

    def __getattr__(self, name):
        return getattr(self.real, name)


def share_s3_clients() -> bool:
    """Make Beam's S3 filesystem reuse boto3 clients instead of building one per operation.

    `apache_beam.io.aws.s3filesystem.S3FileSystem` makes a new `s3io.S3IO(options=...)` for every
    call (open, exists, size, rename, delete, match), and each builds a `boto3_client.Client`,
    whose constructor creates a boto3 session and client: ~100 ms, a fresh connection pool and,
    without keys in the options, a fresh walk of the credential chain. Beam's wrapper objects stay
    per operation (they hold one download's state); only the boto3 client under them is shared.
    Idempotent; returns False where Beam's AWS extra (boto3) is not installed.
    """
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return False
    real = getattr(boto3_client, "boto3", None)
    if real is None:
        return False
    if not isinstance(real, _SharedBoto3):
        boto3_client.boto3 = _SharedBoto3(real)
    return True


# Connections a shared GCS client keeps open per host (requests' default is 10), as for S3.
GCS_MAX_POOL_CONNECTIONS = 32

_gcs_lock = threading.Lock()
_gcs_clients: dict[tuple, object] = {}


def _gcs_client(options):
    """One google-cloud-storage client per process and per what Beam builds a client from (the
    project, the job's audit headers, the emulator's address): `gcsio.create_storage_client`'s
    own client, built on first use. Credentials are Beam's, process-wide already."""
    from apache_beam.io.gcp import gcsio
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

    if options is None:
        options = PipelineOptions()
    elif isinstance(options, dict):
        options = PipelineOptions.from_dictionary(options)
    cloud = options.view_as(GoogleCloudOptions)
    key = (
        os.getpid(),  # a forked child never uses its parent's connections
        cloud.project,
        cloud.job_name,
        repr(cloud.gcs_custom_audit_entries),
        os.environ.get("STORAGE_EMULATOR_HOST"),
        os.environ.get("GOOGLE_CLOUD_PROJECT"),
    )
    with _gcs_lock:
        client = _gcs_clients.get(key)
        if client is None:
            import requests

            client = gcsio.create_storage_client(options)
            adapter = requests.adapters.HTTPAdapter(
                pool_connections=GCS_MAX_POOL_CONNECTIONS, pool_maxsize=GCS_MAX_POOL_CONNECTIONS
            )
            for prefix in ("https://", "http://"):
                client._http.mount(prefix, adapter)  # noqa: SLF001 - the client's own session
            _gcs_clients[key] = client
    return client, options


def share_gcs_clients() -> bool:
    """Make Beam's GCS filesystem reuse one google-cloud-storage client (its connections and its
    bucket metadata) instead of building one per operation.

    Each `GCSFileSystem` call still gets its own `GcsIO` (Beam's wrapper), built on the shared
    client. Idempotent; returns False where Beam's GCP extra is not installed.
    """
    try:
        from apache_beam.io.gcp import gcsfilesystem, gcsio
    except ImportError:
        return False
    if getattr(gcsfilesystem.GCSFileSystem._gcsIO, "_imgrec_shared", False):  # noqa: SLF001
        return True

    def _gcsIO(self):  # noqa: N802 - Beam's name
        client, options = _gcs_client(self._pipeline_options)  # noqa: SLF001
        return gcsio.GcsIO(storage_client=client, pipeline_options=options)

    _gcsIO._imgrec_shared = True
    _gcsIO.__wrapped__ = gcsfilesystem.GCSFileSystem._gcsIO  # noqa: SLF001 - Beam's own
    gcsfilesystem.GCSFileSystem._gcsIO = _gcsIO  # noqa: SLF001
    return True


# Schemes `read_object` reads in one request.
ONE_REQUEST_SCHEMES = frozenset({"gs", "s3"})


def read_object(path: str) -> bytes:
    """The whole object at a gs:// or s3:// `path`, in one request, through the client Beam's
    filesystem for that scheme uses (shared, above).

    Beam's `FileSystems.open` asks for an object's metadata before its bytes: GCS's
    `BeamBlobReader` reloads the blob (a metadata GET), S3's `S3Downloader` sends a HEAD for the
    size. A whole-file read needs neither: this is the one GET (GCS: `download_as_bytes` with
    Beam's raw download, no decompressive transcoding, and Beam's retry; S3: `get_object`). The
    clients' errors pass through as they are (google-api-core's `NotFound`, botocore's
    `ClientError`, connection errors): core/storage.py classifies them by status and type.

    Raises:
        ValueError: `path` is not on GCS or S3.
    """
    from apache_beam.io.filesystems import FileSystems

    scheme = FileSystems.get_scheme(path)
    filesystem = FileSystems.get_filesystem(path)
    if scheme == "gs":
        from apache_beam.io.gcp import gcsio

        gcs = filesystem._gcsIO()  # noqa: SLF001 - Beam's per-operation GcsIO, on the shared client
        bucket, name = gcsio.parse_gcs_path(path)
        blob = gcs.client.bucket(bucket).blob(name)
        return blob.download_as_bytes(raw_download=True, retry=gcs._storage_client_retry)  # noqa: SLF001
    if scheme == "s3":
        from apache_beam.io.aws import s3io
        from apache_beam.io.aws.clients.s3 import boto3_client

        client = boto3_client.Client(options=filesystem._options).client  # noqa: SLF001
        bucket, key = s3io.parse_s3_path(path)
        return client.get_object(Bucket=bucket, Key=key)["Body"].read()
    raise ValueError(f"{path}: read_object reads gs:// and s3:// objects only")
