"""Where a quiet run's log goes (pipeline/quiet.py), on a machine several users share.

The log folder was <tmp>/imgrec-logs for everyone: the first user's folder (mode 755) refused
the next user's log file, whose run stopped with a PermissionError traceback before doing
anything. Now each user has <tmp>/imgrec-logs-<uid>, and a folder that cannot take the log
gives way to a private temp folder.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline import quiet
from tests.integration.test_listing_accounting import _without_dac_override
from tests.runs import ROOT, cli_env


def test_each_user_has_a_log_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(quiet.LOG_DIR_ENV, raising=False)
    monkeypatch.setattr(quiet.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(quiet.os, "getuid", lambda: 1001)
    first = quiet.log_dir()
    monkeypatch.setattr(quiet.os, "getuid", lambda: 1002)
    assert first == str(tmp_path / "imgrec-logs-1001") != quiet.log_dir()
    monkeypatch.setenv(quiet.LOG_DIR_ENV, str(tmp_path / "mine"))
    assert quiet.log_dir() == str(tmp_path / "mine")


def test_an_unusable_log_folder_gives_way_to_a_private_one(monkeypatch, tmp_path):
    in_the_way = tmp_path / "not-a-folder"
    in_the_way.write_text("x")
    monkeypatch.setenv(quiet.LOG_DIR_ENV, str(in_the_way))
    fd, path = quiet._open_log("convert")
    os.close(fd)
    assert os.path.isfile(path) and not path.startswith(str(in_the_way))
    assert os.path.basename(path).startswith("imgrec-convert-")


def test_without_any_writable_folder_the_run_shows_everything(monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(quiet, "_open_log", refuse)
    with quiet.Capture(verbose=False, command="convert") as capture:
        assert capture.verbose and capture.log_path is None
    assert "imgrec: no log file" in capsys.readouterr().err


@pytest.mark.e2e  # a fresh process without the capability that overrides permissions
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
