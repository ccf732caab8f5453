"""Training on a versioned root while the schedule reruns and prunes it, on local disk (issue 30): a
running reader's lease keeps its version through `--keep_versions 1` runs, the version goes once
the reader exits, and a lease left by a reader killed with SIGKILL stops counting once it expires.
The bucket variants: test_version_leases_gcs.py, test_version_leases_s3.py (a file each, so xdist
runs them beside this one)."""

from __future__ import annotations

import os

from tests.runs import ROOT, cli, ok
from tests.version_leases import Place, build_source, scenario


def test_local_reader_keeps_its_version_through_pruning_runs(tmp_path):
    source = build_source(tmp_path)
    root = str(tmp_path / "root")
    # The first version with the default options, as a user's first run makes it.
    ok(cli("convert", "--input", f"{source}/**", "--output", root, "--versioned"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    scenario(Place(root, [], env), tmp_path, source, kill=True)
