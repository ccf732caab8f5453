"""A training reader's lease on moto's S3 server keeps its version through pruning runs (issue 30); the
scenario is tests/version_leases.py's, as on local disk (the SIGKILL expiry is checked there)."""

from __future__ import annotations

import os

from tests.runs import ROOT, ok
from tests.version_leases import Place, build_source, convert, scenario


def test_s3_reader_keeps_its_version_through_pruning_runs(tmp_path, s3, beam_filesystems):
    source = build_source(tmp_path)
    place = Place(
        s3.uri(s3.new_bucket("leases"), "root"),
        s3.beam_args,
        dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            TF_CPP_MIN_LOG_LEVEL="2",
            AWS_ENDPOINT_URL_S3=s3.relay.url,
            TMPDIR=str(tmp_path),  # the shard cache of this test's own
        ),
        s3,
    )
    ok(convert(place, source))
    scenario(place, tmp_path, source)
