"""End to end: a normal run prints only imgrec's own lines, with live progress (pipe and pty)."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from core import schema
from pipeline.demo import build_corpus
from tests.runs import ROOT as ROOT_PATH
from tests.servers import ProxyTrap

ROOT = str(ROOT_PATH)
# The summary block's lines after its `imgrec: converted ...` head (pipeline/report/summary.py, format_summary).
_SUMMARY = re.compile(
    r"^  (written|rejected|duplicates|near-duplicates:|transcoded|shards|reasons per file:|"
    r"warning:|report) "
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CPP", "IMGREC_"))}
    # No TF_CPP_MIN_LOG_LEVEL: TensorFlow's C++ notices are on, as on a fresh machine.
    env.update(PYTHONPATH=ROOT, IMGREC_LOG_DIR=extra.pop("log_dir"), **extra)
    return env


def _foreign(text: str) -> list[str]:
    """Lines that are not imgrec's own."""
    return [
        ln
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith("imgrec") and not _SUMMARY.match(ln)
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("corpus"))
    # Broken files included: libjpeg's "Premature end of JPEG data" comes from the truncated one.
    build_corpus(d, num_images=40, seed=5, long_side=(96, 160))
    return d


def _convert_args(src: str, out: str, *extra: str, workers: int = 2) -> list[str]:
    """Two workers by default: a multi-process DirectRunner, whose worker processes' own output
    must stay off the terminal too."""
    return [
        sys.executable,
        "-m",
        "pipeline",
        "convert",
        "--input",
        f"{src}/*/*.jpg",
        "--output",
        out,
        "--workers",
        str(workers),
        *extra,
    ]


@pytest.fixture(scope="module")
def piped(corpus, tmp_path_factory):
    """Two workers, behind a proxy that notes whoever calls out (tests/servers.py): the worker
    processes' gRPC channels to the runner at localhost must not go through it (they hung)."""
    tmp = tmp_path_factory.mktemp("piped")
    out = str(tmp / "ds")
    with ProxyTrap() as trap:
        proc = subprocess.run(
            _convert_args(corpus, out, "--max_bad_fraction", "0.2"),
            cwd=ROOT,
            env=_env(log_dir=str(tmp / "logs"), IMGREC_PROGRESS_EVERY_S="0.5", **trap.env),
            capture_output=True,
            text=True,
            timeout=300,
        )
    return proc, out, tmp, trap.calls


def test_demo_prints_only_imgrec_lines_and_progress_when_piped(piped):
    proc, out, tmp, network_calls = piped
    assert proc.returncode == 0, proc.stderr
    assert network_calls == []
    assert _foreign(proc.stdout) == [] and _foreign(proc.stderr) == [], proc.stderr
    assert proc.stdout.startswith("imgrec: converted 45 listed files")
    assert f"  report      {out}/report.html" in proc.stdout
    assert os.path.exists(os.path.join(out, "report.html"))
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("imgrec: progress: ")]
    assert progress, proc.stderr
    last = dict(re.findall(r"(listed|inspected|written|rejected|duplicates) (\d+)", progress[-1]))
    assert all(0 <= int(v) <= 45 for v in last.values())
    # The other libraries' output is not lost: it is in the run's log file.
    (log,) = os.listdir(tmp / "logs")
    text = (tmp / "logs" / log).read_text()
    assert "imgrec: converted 45 listed files" in text  # our own lines are copied there too
    assert re.search(r"oneDNN|cuda|absl|Premature end of JPEG|semi_persistent|Discarding", text)
    # Both worker processes were given the start-up plugin (their options are logged) and
    # imported it (Beam logs a warning for a plugin that fails to import).
    given = re.findall(r"beam_plugins\\': \[\\'pipeline\.launch\.worker_start\\'\]", text)
    assert len(given) == 2, [ln for ln in text.splitlines() if "Pipeline_options" in ln]
    assert "Failed to import beam-plugin" not in text


def test_workers_report_progress_while_the_job_runs(piped):
    proc, _, _, _ = piped
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("imgrec: progress: ")]
    counts = [dict(re.findall(r"(listed|inspected|written) (\d+)", ln)) for ln in lines]
    # Some poll saw files listed (by a worker process) before all of them were written.
    assert any(int(c["listed"]) > 0 and int(c["written"]) < 41 for c in counts), lines


def test_failing_run_is_one_line_with_the_fix_and_the_log(corpus, tmp_path):
    proc = subprocess.run(
        _convert_args(corpus, str(tmp_path / "ds"), "--max_bad_fraction", "0.01"),
        cwd=ROOT,
        env=_env(log_dir=str(tmp_path / "logs")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 3, proc.stderr
    assert _foreign(proc.stdout) == [] and _foreign(proc.stderr) == [], proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if not ln.startswith("imgrec: progress")]
    assert "--max_bad_fraction" in line and "--resume" in line and "--overwrite" in line
    log = re.search(r"full log: (\S+)\)", line).group(1)
    assert os.path.exists(log) and "TooManyRejectsError" in open(log).read()


def test_verbose_shows_other_libraries(piped, tmp_path):
    _, out, _, _ = piped
    cmd = [sys.executable, "-m", "pipeline", "preview", out, "--out", str(tmp_path / "r.html")]
    env = _env(log_dir=str(tmp_path / "logs"))
    quiet = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    loud = subprocess.run(
        cmd[:3] + ["-v"] + cmd[3:], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert quiet.returncode == 0 and loud.returncode == 0, quiet.stderr + loud.stderr
    assert _foreign(quiet.stdout + quiet.stderr) == []
    assert quiet.stdout.strip() == f"imgrec: report {tmp_path / 'r.html'}"
    assert _foreign(loud.stderr), "TensorFlow's start-up notices should show with -v"


def test_progress_redraws_one_line_on_a_terminal(corpus, tmp_path):
    """One in-process worker: worker processes get the log file's descriptors whether the
    terminal is a pipe or a pty (pipeline/quiet.py), and the piped run above has them."""
    out = str(tmp_path / "ds")
    main, child = pty.openpty()
    proc = subprocess.Popen(
        _convert_args(corpus, out, "--no_report", "--max_bad_fraction", "0.2", workers=1),
        cwd=ROOT,
        env=_env(log_dir=str(tmp_path / "logs"), TERM="xterm-256color", COLUMNS="160"),
        stdin=child,
        stdout=child,
        stderr=child,
    )
    os.close(child)
    chunks, deadline = [], time.time() + 600
    while time.time() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(main)
    raw = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, raw
    assert "\r" in raw and "\x1b[" in raw, "a terminal gets a line redrawn in place"
    assert "inspected" in raw and "images/s" in raw and "ETA" in raw
    assert "imgrec: progress:" not in raw  # plain lines are for pipes only
    # What stays on the screen: the progress line is erased, the summary remains, nothing else.
    final = [_ANSI.sub("", ln.split("\r")[-1]) for ln in raw.replace("\r\n", "\n").split("\n")]
    assert _foreign("\n".join(final)) == [], final
    assert any(ln.startswith("imgrec: converted 45 listed files") for ln in final)
    assert os.path.exists(os.path.join(out, schema.DATASET_INFO))
