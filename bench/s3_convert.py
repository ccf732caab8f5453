"""The default command on an S3 bucket (moto's server on 127.0.0.1), whole process, with and
without one of imgrec's fixes to Beam's S3 filesystem (both on by default):
  --fix shared_client: Beam's S3 filesystem builds a boto3 session and client per operation;
    imgrec shares one (pipeline/launch/patches.share_s3_clients). The "off" runs switch it off
    (IMGREC_PATCHES_OFF=share_s3_clients).
  --fix one_request_reads: Beam's FileSystems.open sends a HEAD for an object's size before it
    GETs the bytes; imgrec reads a whole file in one GET (core/beam_clients.read_object). The
    "off" runs read through FileSystems.open (beam_clients.ONE_REQUEST_SCHEMES emptied).
  --fix both: the two together, against Beam's S3 filesystem as it ships.

    PYTHONPATH=. .venv/bin/python bench/s3_convert.py --num_images 100 --repeats 3 --fix FIX

Each run is `python -m pipeline convert --input s3://.../** --output s3://.../out` with default
options (analysis and report on) and the endpoint options, through the test suite's relay in front
of moto, which counts the requests (bench/_bucket_ab.py). Prints wall clock, CPU (the command and
the processes it waited for) and the requests moto saw, HEADs among them. moto is a Python server
on the same 2-core box: what a kept connection saves on a real bucket (a TLS handshake per file)
does not show here.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench import _bucket_ab  # noqa: E402


@contextlib.contextmanager
def _server(root: Path):
    """moto, with the tests' cloud_env in this process's env: fake keys, no metadata-server
    lookup, botocore's standard retries."""
    from tests.servers import FAKE_AWS_KEY, S3_REGION, _s3_server

    os.environ.update(
        AWS_ACCESS_KEY_ID=FAKE_AWS_KEY, AWS_SECRET_ACCESS_KEY=FAKE_AWS_KEY,
        AWS_DEFAULT_REGION=S3_REGION, AWS_EC2_METADATA_DISABLED="true", AWS_RETRY_MODE="standard",
    )  # fmt: skip
    with _s3_server(root) as store:
        yield store


def _describe(requests: list[tuple[str, str]], bucket: str) -> str:
    seen = collections.Counter(m for m, _ in requests)
    return f"{sum(seen.values())} requests ({seen['HEAD']} HEAD, {seen['GET']} GET)"


if __name__ == "__main__":
    _bucket_ab.main(
        __doc__,
        share_fix="share_s3_clients",
        filesystem="Beam's S3 filesystem",
        metadata_read="HEAD + GET per read",
        default_fix="both",
        server=_server,
        describe=_describe,
    )
