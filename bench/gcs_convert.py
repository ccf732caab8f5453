"""The default command on a GCS bucket (gcp-storage-emulator on 127.0.0.1), whole process, with
and without one of imgrec's fixes to Beam's GCS filesystem (both on by default):
  --fix shared_client: Beam's GCS filesystem builds a google-cloud-storage client per operation;
    imgrec shares one (pipeline/launch/patches.share_gcs_clients). The "off" runs switch it off
    (IMGREC_PATCHES_OFF=share_gcs_clients).
  --fix one_request_reads: Beam's FileSystems.open asks for an object's metadata before its
    bytes; imgrec reads a whole file in one GET (core/beam_clients.read_object). The "off" runs
    read through FileSystems.open (beam_clients.ONE_REQUEST_SCHEMES emptied).
  --fix both: the two together, against Beam's GCS filesystem as it ships.

    PYTHONPATH=. .venv/bin/python bench/gcs_convert.py --num_images 100 --repeats 3 --fix FIX

Each run is `python -m pipeline convert --input gs://.../** --output gs://.../out` with default
options (analysis and report on), through the test suite's relay in front of the emulator, which
counts the requests (bench/_bucket_ab.py). Prints wall clock, CPU (the command and the processes
it waited for) and the requests the emulator saw, bucket-metadata lookups among them. The
emulator is a Python server on the same 2-core box, and closes each connection after answering:
what a kept connection saves on a real bucket (a TLS handshake per file) does not show here.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench import _bucket_ab  # noqa: E402


@contextlib.contextmanager
def _server(root: Path):
    """The emulator, with the tests' fake credentials and project in this process's env."""
    from tests.servers import _FAKE_ADC, TEST_PROJECT, _gcs_server

    adc = root / "adc.json"
    adc.write_text(json.dumps(_FAKE_ADC))
    os.environ.update(GOOGLE_APPLICATION_CREDENTIALS=str(adc), GOOGLE_CLOUD_PROJECT=TEST_PROJECT)
    (root / "gcs").mkdir()
    with _gcs_server(root / "gcs") as store:
        yield store


def _describe(requests: list[tuple[str, str]], bucket: str) -> str:
    lookups = sum(m == "GET" and t.startswith(f"/storage/v1/b/{bucket}?") for m, t in requests)
    return f"{len(requests)} requests ({lookups} bucket lookups)"


if __name__ == "__main__":
    _bucket_ab.main(
        __doc__,
        share_fix="share_gcs_clients",
        filesystem="Beam's GCS filesystem",
        metadata_read="metadata + bytes per read",
        default_fix="shared_client",
        server=_server,
        describe=_describe,
    )
