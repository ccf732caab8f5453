"""The real command line, in fresh processes, as a user runs it: `python -m pipeline convert` with
default options end to end (then `verify`, `inspect`, `preview`), exit statuses 0/1/2/3 with one
`imgrec:` line and other libraries' output kept off the terminal.

tests/integration/test_convert.py checks the conversions themselves in process; this file checks what
only a fresh process shows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pipeline.demo import build_corpus
from tests.runs import ROOT, cli, cli_env, script_facts
from tests.servers import ProxyTrap


def _imgrec_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, dict]:
    src = str(tmp_path_factory.mktemp("cli_corpus"))
    # 3 broken files of 65: under the default --max_bad_fraction (5 %).
    return src, build_corpus(src, num_images=60, seed=2, long_side=(48, 96))


@pytest.fixture(scope="module")
def default_run(corpus, tmp_path_factory):
    """The default conversion, behind a proxy that notes whoever calls out (tests/servers.py),
    with a temp dir of its own (TMPDIR)."""
    src, _ = corpus
    out = str(tmp_path_factory.mktemp("cli") / "ds")
    temp = str(tmp_path_factory.mktemp("cli_temp"))
    with ProxyTrap() as trap:
        env = {**trap.env, "TMPDIR": temp}
        proc = cli("convert", "--input", f"{src}/*/*.jpg", "--output", out, env=env)
    return out, proc, trap.calls, temp


def test_default_options_convert_with_a_quiet_terminal(default_run, corpus):
    out, proc, network_calls, temp = default_run
    _, summary = corpus
    assert network_calls == []  # nothing downloaded at run time (no Prism binary from GitHub)
    # Nothing left in the temp dir but the command's log folder (pipeline/quiet.py): no TFT
    # scratch, no hand-off folder, no TensorFlow autograph file from the analysis process.
    assert [n for n in os.listdir(temp) if not n.startswith("imgrec-logs-")] == []
    with open(os.path.join(out, "dataset_info.json")) as f:
        info = json.load(f)
    assert info["num_written"] == summary["images"] + 1
    assert info["statistics"]["pixel_mean"]  # analysis is on by default
    for name in ("report.html", "transform_fn", "train", "validation", "rejected.jsonl"):
        assert os.path.exists(os.path.join(out, name)), name
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"imgrec: converted {info['num_listed']} listed files in ")
    assert any(line.split()[:2] == ["written", str(info["num_written"])] for line in lines)
    assert f"report      {out}/report.html" in proc.stdout
    # Nothing from TensorFlow, Beam or libjpeg (the corpus has a truncated JPEG) on stderr.
    assert not [ln for ln in _imgrec_lines(proc.stderr) if not ln.startswith("imgrec")], (
        proc.stderr[-3000:]
    )


def test_verify_inspect_and_preview_commands(default_run, tmp_path):
    out = default_run[0]
    with open(os.path.join(out, "dataset_info.json")) as f:
        info = json.load(f)
    verified = cli("verify", out)
    assert "OK" in verified.stdout and f"{info['num_written']} records" in verified.stdout
    shown = cli("inspect", out)
    assert "written" in shown.stdout and str(info["num_written"]) in shown.stdout
    page = tmp_path / "r.html"
    assert f"imgrec: report {page}" in cli("preview", out, "--out", str(page)).stdout
    assert page.read_text(encoding="utf-8").startswith("<!doctype html>")

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = info["splits"]["train"]["shards"][0]["file"]
    data = bytearray((copy / shard).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / shard).write_bytes(bytes(data))
    broken = cli("verify", str(copy), check=False)
    assert broken.returncode == 1
    assert f"{shard}: record" in broken.stderr and "sha256 differs" in broken.stderr


def test_bad_option_exits_2_with_one_line_and_writes_nothing(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "o"
    proc = cli(
        "convert", "--input", f"{src}/*/*.jpg", "--output", str(out), "--splits", "train=0.5",
        check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert _imgrec_lines(proc.stderr) == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith("imgrec: ") and "sum to 0.5" in proc.stderr
    assert not out.exists()
    unknown = cli("--input", f"{src}/*/*.jpg", "--output", str(out), "--nope", "1", check=False)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "imgrec: unknown option --nope; see `imgrec convert --help`"


# The `imgrec` program (`program.run`) with argv from the command line; as it exits, it prints whether
# TensorFlow was imported and how many processes it forked.
_WATCHED_PROGRAM = """
import json, os, sys
from pipeline.launch import program as imgrec
program, forks = os.getpid(), []
real_fork, real_exit = os.fork, os._exit
def fork():
    forks.append(1)
    return real_fork()
def leave(status):
    if os.getpid() == program:  # not the forked children's exits
        seen = {"status": status, "tensorflow": "tensorflow" in sys.modules, "forks": len(forks)}
        print(json.dumps(seen), flush=True)
    real_exit(status)
os.fork, os._exit = fork, leave
sys.argv = ["imgrec", *sys.argv[1:]]
imgrec.run()
"""


def test_a_bad_option_or_path_is_answered_before_tensorflow_is_imported(corpus, tmp_path):
    """A typo costs ~0.7 s, not the ~2 s of TensorFlow's import and the analysis process's and
    the zygote's forks first (cli._convert parses, and on local paths runs the preflight,
    before them: launcher.read_request and prepare)."""
    src, _ = corpus
    out = str(tmp_path / "o")
    done = tmp_path / "done"
    done.mkdir()
    (done / "dataset_info.json").write_text("{}")
    cases = (
        (["--input", f"{src}/*/*.jpg", "--output", out, "--nope", "1"], "unknown option --nope"),
        (["--input", f"{src}/*/*.jpg", "--output", out, "--splits", "train=0.5"], "sum to 0.5"),
        (["--input", str(tmp_path / "none" / "*.jpg"), "--output", out], "matched no files"),
        (["--manifest", str(tmp_path / "none.csv"), "--output", out], "no such file"),
        (["--input", f"{src}/*/*.jpg", "--output", str(done)], "already holds a dataset"),
    )
    for argv, says in cases:
        proc = subprocess.run(
            [sys.executable, "-c", _WATCHED_PROGRAM, "convert", *argv],
            cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        assert seen == {"status": 2, "tensorflow": False, "forks": 0}, argv
        assert proc.stderr.startswith("imgrec: ") and len(proc.stderr.splitlines()) == 1
        assert says in proc.stderr, proc.stderr
    assert not os.path.exists(out)
    # The watch sees both in a run that goes on: the zygote for its two workers; and a run
    # that uses neither the analysis process nor worker processes forks nothing.
    argv = ["convert", "--input", f"{src}/*/*.jpg", "--no_analyze", "--no_report"]
    good = script_facts(_WATCHED_PROGRAM, *argv, "--output", out, "--workers", "2")
    assert good["status"] == 0 and good["tensorflow"] and good["forks"] >= 1, good
    alone = script_facts(_WATCHED_PROGRAM, *argv, "--output", f"{out}-1", "--workers", "1")
    assert alone == {"status": 0, "tensorflow": True, "forks": 0}, alone


def test_existing_dataset_exits_2_naming_overwrite(default_run, corpus):
    out = default_run[0]
    src, _ = corpus
    proc = cli("convert", "--input", f"{src}/*/*.jpg", "--output", out, check=False)
    assert proc.returncode == 2
    assert "already holds a dataset" in proc.stderr and "--overwrite" in proc.stderr


def test_too_many_rejects_exits_3(tmp_path):
    src = tmp_path / "bad" / "x"
    os.makedirs(src)
    for i in range(4):
        (src / f"t{i}.jpg").write_bytes(b"not an image")
    build_corpus(str(tmp_path / "good"), num_images=3, seed=3, long_side=(64, 80), broken=False)
    for p in (tmp_path / "good").glob("*/*.jpg"):
        shutil.copy(p, src)
    out = tmp_path / "o"
    proc = cli(
        "convert", "--input", f"{tmp_path}/bad/*/*.jpg", "--output", str(out), "--no_analyze",
        check=False,
    )  # fmt: skip
    assert proc.returncode == 3
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("imgrec: ") and "4 of 7 listed files were rejected" in proc.stderr
    assert (out / "rejected.jsonl").exists() and not (out / "dataset_info.json").exists()
