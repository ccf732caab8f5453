"""Where a quiet run's log goes (pipeline/quiet.py), on a machine several users share.

The log folder was <tmp>/imgrec-logs for everyone: the first user's folder (mode 755) refused
the next user's log file, whose run stopped with a PermissionError traceback before doing
anything. Now each user has <tmp>/imgrec-logs-<uid>, and a folder that cannot take the log
gives way to a private temp folder.
"""

from __future__ import annotations

import os

from pipeline import quiet


def test_each_user_has_a_log_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(quiet.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(quiet.os, "getuid", lambda: 1001)
    first = quiet.log_dir()
    monkeypatch.setattr(quiet.os, "getuid", lambda: 1002)
    assert first == str(tmp_path / "imgrec-logs-1001") != quiet.log_dir()
    assert quiet.log_dir(str(tmp_path / "mine")) == str(tmp_path / "mine")


def test_an_unusable_log_folder_gives_way_to_a_private_one(monkeypatch, tmp_path):
    in_the_way = tmp_path / "not-a-folder"
    in_the_way.write_text("x")
    fd, path = quiet._open_log("convert", str(in_the_way))
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
