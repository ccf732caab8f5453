"""A quiet run's log folder on a machine several users share (pipeline/quiet.py), for real: the
command in a fresh process without the capability that overrides permissions. The folder choice
itself is checked in tests/unit/test_quiet_logs.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.test_listing_accounting import _without_dac_override
from tests.runs import ROOT, cli_env


def test_a_log_folder_another_user_owns_does_not_stop_the_command(tmp_path):
    """The shared-machine case, for real: the log folder exists, owned by another user (nobody),
    mode 755; `imgrec inspect` runs as a user that cannot write there."""
    prefix = _without_dac_override()
    if prefix is None:
        pytest.fail("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE to test")
    theirs = tmp_path / "logs"
    theirs.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(theirs, 65534, 65534)
    else:
        theirs.chmod(0o555)
    env = cli_env(IMGREC_LOG_DIR=str(theirs), TMPDIR=str(tmp_path))
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "pipeline", "inspect", str(tmp_path / "nothing")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]  # no dataset there: one line, no traceback
    assert proc.stderr.startswith("imgrec: ") and "Traceback" not in proc.stderr, proc.stderr
    assert list(theirs.iterdir()) == []
