"""Read access to the stores datasets live in: TensorFlow's gfile (local, gs://), boto3 (s3://),
Apache Beam's FileSystems for any other scheme (imported only for such data).

Must stay importable without Apache Beam (the reader imports it through shard_cache).
"""

from __future__ import annotations

import functools
import os
import posixpath
import secrets
from collections.abc import Iterator
from typing import IO

import tensorflow as tf

from core import schema

__all__ = ["Store", "open_store", "tensorflow_reads"]

# Shards downloading at once per make_dataset call: S3 serves each stream at a bounded rate, so
# several keep a fast VM's network busy, without opening hundreds of connections.
_DOWNLOAD_THREADS = 8
# Schemes TensorFlow reads itself (tf.io.gfile.get_registered_schemes(): "", "file", "gs", ...).
_TF_SCHEMES = frozenset(tf.io.gfile.get_registered_schemes())


def _scheme(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else ""


def tensorflow_reads(path: str) -> bool:
    """True when TensorFlow opens `path` itself (local, gs://)."""
    return _scheme(path) in _TF_SCHEMES


class Store:
    """Read access to one store: what the reader needs before and while caching."""

    def open(self, uri: str, first_bytes: int | None = None) -> IO[bytes]:
        """A binary stream of the object's bytes (only its first `first_bytes` when given and
        the store can ask for a range; callers stop reading there either way)."""
        raise NotImplementedError

    def listdir(self, folder: str) -> list[str]:
        """Names directly under `folder` ([] when there are none)."""
        raise NotImplementedError

    def exists(self, uri: str) -> bool:
        raise NotImplementedError

    def walk(self, folder: str) -> list[str]:
        """Every object under `folder`, as paths relative to it."""
        raise NotImplementedError

    def read_bytes(self, uri: str) -> bytes:
        with self.open(uri) as f:
            return f.read()

    def write_bytes(self, uri: str, data: bytes) -> None:
        """Write a small object whole (the reader's version lease, core/leases.py)."""
        raise NotImplementedError

    def delete(self, uri: str) -> None:
        """Delete an object; one that is already gone is not an error."""
        raise NotImplementedError

    def load_dataset_info(self, data_dir: str) -> dict:
        """dataset_info.json of `data_dir`, checked (schema.DatasetInfoError otherwise)."""
        path = data_dir.rstrip("/") + "/" + schema.DATASET_INFO
        try:
            text = self.read_bytes(path).decode("utf-8")
        except FileNotFoundError:
            raise schema.DatasetInfoError(
                f"{path} not found: {data_dir!r} is not a converted dataset "
                "(run `imgrec convert --output DIR` first, or check the path)"
            ) from None
        except (OSError, UnicodeDecodeError) as e:
            raise schema.DatasetInfoError(f"{path} is unreadable ({e}); check the store") from e
        return schema.parse_dataset_info(text, path)


class _TensorFlowStore(Store):
    """Local paths and gs://, through tf.io.gfile (what the reader has always used)."""

    def open(self, uri: str, first_bytes: int | None = None) -> IO[bytes]:
        return tf.io.gfile.GFile(uri, "rb")

    def listdir(self, folder: str) -> list[str]:
        try:
            return tf.io.gfile.listdir(folder)
        except tf.errors.NotFoundError:
            return []

    def exists(self, uri: str) -> bool:
        return tf.io.gfile.exists(uri)

    def walk(self, folder: str) -> list[str]:
        out = []
        for root, _, files in tf.io.gfile.walk(folder):
            rel = root[len(folder.rstrip("/")) :].lstrip("/")
            out += [posixpath.join(rel, f) if rel else f for f in files]
        return out

    def load_dataset_info(self, data_dir: str) -> dict:
        return schema.load_dataset_info(data_dir)

    def write_bytes(self, uri: str, data: bytes) -> None:
        if "://" in uri:  # gs://: an object appears whole once its upload completes
            with tf.io.gfile.GFile(uri, "wb") as f:
                f.write(data)
            return
        os.makedirs(os.path.dirname(uri), exist_ok=True)
        tmp = f"{uri}.tmp-{secrets.token_hex(4)}"  # a reader of the folder sees old or new
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, uri)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def delete(self, uri: str) -> None:
        try:
            tf.io.gfile.remove(uri)
        except tf.errors.NotFoundError:
            pass


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


class _S3Store(Store):
    """s3:// with boto3: credentials, region and endpoint from boto3's usual chain
    (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, ...), or the
    endpoint passed in."""

    def __init__(self, endpoint_url: str | None):
        import boto3  # Only for s3:// data.
        from botocore.config import Config

        self.endpoint_url = endpoint_url
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url or None,
            config=Config(
                # One connection per download thread, plus listing and dataset_info.json.
                max_pool_connections=_DOWNLOAD_THREADS + 2,
                retries={"mode": "standard"},
            ),
        )

    def open(self, uri: str, first_bytes: int | None = None) -> IO[bytes]:
        from botocore.exceptions import ClientError

        bucket, key = _split_s3(uri)
        extra = {"Range": f"bytes=0-{first_bytes - 1}"} if first_bytes else {}
        try:
            return self._client.get_object(Bucket=bucket, Key=key, **extra)["Body"]
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(f"{uri} not found") from e
            raise OSError(f"{uri}: {e}") from e

    def _list(self, folder: str, delimiter: str) -> Iterator[str]:
        bucket, prefix = _split_s3(folder.rstrip("/") + "/")
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, Delimiter=delimiter
        )
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"][len(prefix) :]
            for sub in page.get("CommonPrefixes", []):
                yield sub["Prefix"][len(prefix) :].rstrip("/")

    def listdir(self, folder: str) -> list[str]:
        return list(self._list(folder, "/"))

    def walk(self, folder: str) -> list[str]:
        return list(self._list(folder, ""))

    def write_bytes(self, uri: str, data: bytes) -> None:
        bucket, key = _split_s3(uri)
        self._client.put_object(Bucket=bucket, Key=key, Body=data)

    def delete(self, uri: str) -> None:
        bucket, key = _split_s3(uri)
        self._client.delete_object(Bucket=bucket, Key=key)  # no error when already gone

    def exists(self, uri: str) -> bool:
        from botocore.exceptions import ClientError

        bucket, key = _split_s3(uri)
        try:
            self._client.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return False
            raise


class _BeamStore(Store):
    """Any other scheme Apache Beam's FileSystems reads (imported only for such data)."""

    def __init__(self, s3_endpoint_url: str | None = None):
        from apache_beam.io.filesystems import FileSystems

        self._fs = FileSystems
        if s3_endpoint_url:
            from apache_beam.options.pipeline_options import PipelineOptions

            FileSystems.set_options(PipelineOptions([f"--s3_endpoint_url={s3_endpoint_url}"]))

    def open(self, uri: str, first_bytes: int | None = None) -> IO[bytes]:
        from apache_beam.io.filesystem import BeamIOError, CompressionTypes

        try:
            # UNCOMPRESSED: the default (AUTO) would gunzip .gz shards, and the hash is of the
            # stored bytes.
            return self._fs.open(uri, compression_type=CompressionTypes.UNCOMPRESSED)
        except BeamIOError as e:
            if not self.exists(uri):
                raise FileNotFoundError(f"{uri} not found") from e
            raise

    def _match(self, folder: str, wildcard: str) -> list[str]:
        """Paths `wildcard` matches below `folder`, whatever characters the folder's name holds."""
        from apache_beam.io.filesystem import BeamIOError

        from core.storage import glob_escape

        try:
            pattern = glob_escape(folder.rstrip("/")) + "/" + wildcard
            return [m.path for m in self._fs.match([pattern])[0].metadata_list]
        except BeamIOError:
            return []

    def listdir(self, folder: str) -> list[str]:
        base = folder.rstrip("/") + "/"
        return sorted({p[len(base) :].split("/", 1)[0] for p in self._match(folder, "*")})

    def walk(self, folder: str) -> list[str]:
        base = folder.rstrip("/") + "/"
        return [p[len(base) :] for p in self._match(folder, "**")]

    def exists(self, uri: str) -> bool:
        return self._fs.exists(uri)

    def write_bytes(self, uri: str, data: bytes) -> None:
        with self._fs.create(uri, mime_type="application/json") as f:
            f.write(data)

    def delete(self, uri: str) -> None:
        from apache_beam.io.filesystem import BeamIOError

        try:
            self._fs.delete([uri])
        except BeamIOError:
            if self._fs.exists(uri):
                raise


def open_store(data_dir: str, s3_endpoint_url: str | None = None, beam: bool = False) -> Store:
    """The store `data_dir` lives in: TensorFlow's for local and gs://, boto3 for s3://, Beam's
    FileSystems for other schemes (or for s3:// too with `beam=True`, for comparisons)."""
    scheme = _scheme(data_dir)
    if scheme in _TF_SCHEMES:
        return _TensorFlowStore()
    if scheme == "s3" and not beam:
        return _s3_store(s3_endpoint_url or None)
    return _BeamStore(s3_endpoint_url)


@functools.lru_cache(maxsize=8)
def _s3_store(endpoint_url: str | None) -> _S3Store:
    """One client per endpoint per process: making one loads botocore's service model, and
    steps_per_epoch plus two make_dataset calls would pay for it three times. boto3 clients
    are thread-safe."""
    return _S3Store(endpoint_url)
