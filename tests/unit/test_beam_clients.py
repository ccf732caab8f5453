"""pipeline/launch/patches.py's share_s3_clients: Beam's S3 filesystem shares one boto3 client per
process and configuration, and still builds Beam's own per-operation wrapper on it (GCS:
tests/integration/test_beam_clients.py)."""

from __future__ import annotations

from pipeline.launch import patches


def _s3io(endpoint: str, **more: str):
    from apache_beam.io.aws import s3io
    from apache_beam.options.pipeline_options import PipelineOptions

    flags = [f"--s3_endpoint_url={endpoint}", "--s3_region_name=us-east-1"]
    flags += [f"--{k}={v}" for k, v in more.items()]
    return s3io.S3IO(options=PipelineOptions(flags))


def test_beam_s3_operations_share_one_boto3_client_per_configuration():
    """Beam's S3 filesystem builds an S3IO (and its boto3 client) per operation; once shared,
    operations with the same options reuse one boto3 client (other options get their own), while
    Beam's per-operation wrapper (it holds one download's state) stays per operation."""
    assert patches.share_s3_clients() is True
    assert patches.share_s3_clients() is True  # idempotent
    a, b = _s3io("http://127.0.0.1:1"), _s3io("http://127.0.0.1:1")
    other = _s3io("http://127.0.0.1:2")
    keyed = _s3io("http://127.0.0.1:1", s3_access_key_id="k", s3_secret_access_key="s")
    assert a.client is not b.client  # Beam's wrapper, with its download state
    assert a.client.client is b.client.client  # the boto3 client under it
    assert other.client.client is not a.client.client
    assert keyed.client.client is not a.client.client
    assert a.client.client.meta.endpoint_url == "http://127.0.0.1:1"
    assert other.client.client.meta.endpoint_url == "http://127.0.0.1:2"
    assert keyed.client.client._request_signer._credentials.access_key == "k"  # noqa: SLF001
    config = a.client.client.meta.config
    assert config.max_pool_connections == patches._MAX_POOL_CONNECTIONS  # noqa: SLF001
