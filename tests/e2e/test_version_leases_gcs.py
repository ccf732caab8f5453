"""A training reader's lease on the GCS emulator keeps its version through pruning runs (issue 30); the
scenario is tests/version_leases.py's, as on local disk (the SIGKILL expiry is checked there)."""

from __future__ import annotations

import os

from tests.runs import ROOT, ok
from tests.version_leases import Place, build_source, convert, scenario


def test_gcs_reader_keeps_its_version_through_pruning_runs(
    tmp_path, gcs, tensorflow_gcs_env, beam_filesystems
):
    source = build_source(tmp_path)
    place = Place(
        gcs.uri(gcs.new_bucket("leases"), "root"),
        [],
        dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", **tensorflow_gcs_env),
        gcs,
        stand_in_leases=True,
    )
    ok(convert(place, source))
    scenario(place, tmp_path, source)
