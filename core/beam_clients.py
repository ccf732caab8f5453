"""Whole-object reads from GCS and S3 in one request, through the client Beam's filesystem uses.

Beam's `FileSystems.open` asks for an object's metadata before its bytes; a whole-file read needs
neither. This reaches Beam's per-operation client wrappers (private attributes), so
`core/storage.py` falls back to `FileSystems.open` when they are not there.
"""

from __future__ import annotations

from apache_beam.io.aws import s3io
from apache_beam.io.aws.clients.s3 import boto3_client
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.gcp import gcsio

__all__ = ["ONE_REQUEST_SCHEMES", "read_object"]

# Schemes `read_object` reads in one request.
ONE_REQUEST_SCHEMES = frozenset({"gs", "s3"})


def read_object(path: str) -> bytes | None:
    """The whole object at a gs:// or s3:// `path`, in one request, through the client Beam's
    filesystem for that scheme uses; None where Beam's wrappers no longer have what this uses.

    GCS: `download_as_bytes` with Beam's raw download (no decompressive transcoding) and Beam's
    retry; S3: `get_object`. The clients' errors pass through as they are (google-api-core's
    `NotFound`, botocore's `ClientError`, connection errors): core/storage.py classifies them.

    Raises:
        ValueError: `path` is not on GCS or S3.
    """
    scheme = FileSystems.get_scheme(path)
    if scheme not in ONE_REQUEST_SCHEMES:
        raise ValueError(f"{path}: read_object reads gs:// and s3:// objects only")
    filesystem = FileSystems.get_filesystem(path)
    try:
        request = (
            _gcs_request(filesystem, path) if scheme == "gs" else _s3_request(filesystem, path)
        )
    except AttributeError:  # another Beam: its own reader will do
        return None
    return request()


def _gcs_request(filesystem, path: str):
    gcs = filesystem._gcsIO()  # Beam's per-operation GcsIO
    bucket, name = gcsio.parse_gcs_path(path)
    blob = gcs.client.bucket(bucket).blob(name)
    retry = gcs._storage_client_retry
    return lambda: blob.download_as_bytes(raw_download=True, retry=retry)


def _s3_request(filesystem, path: str):
    client = boto3_client.Client(options=filesystem._options).client
    bucket, key = s3io.parse_s3_path(path)
    return lambda: client.get_object(Bucket=bucket, Key=key)["Body"].read()
