"""setup.py: the sdist Beam stages for --setup_file, and the offline editable install bootstrap does."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from pipeline.launcher import VERSION
from tests.runs import ROOT

# Building an sdist or an editable wheel takes ~1 s; a minute means something waits on a network.
BUILD_TIMEOUT_S = 120
# What setup.py needs to build: the source tree without tests, benchmarks and outputs.
SOURCE_ITEMS = (
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "requirements.txt",
    "constraints.txt",
    "configs",
    "core",
    "pipeline",
    "transforms",
)


def _pinned_requirements() -> list[Requirement]:
    lines = (
        ln.split("#", 1)[0].strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()
    )
    return [Requirement(ln) for ln in lines if ln]


def _copy_source(dest: Path) -> Path:
    """A copy of what setup.py packages, so builds never write into the working tree."""
    dest.mkdir()
    for item in SOURCE_ITEMS:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / item)
    return dest


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """Build the sdist the way Beam's stager does when `build` is not installed (offline)."""
    work = tmp_path_factory.mktemp("sdist")
    src = _copy_source(work / "src")
    _run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(work / "dist")], cwd=src)
    (tarball,) = (work / "dist").glob("*.tar.gz")
    return tarball


def test_sdist_is_named_for_the_launcher_version(sdist):
    assert sdist.name == f"imgrec-{VERSION}.tar.gz"
    assert VERSION == "0.1.0"


def test_sdist_holds_every_module_config_and_the_requirements(sdist):
    prefix = f"imgrec-{VERSION}/"
    with tarfile.open(sdist) as tar:
        names = {n[len(prefix) :] for n in tar.getnames() if n.startswith(prefix)}
    expected = {
        p.relative_to(ROOT).as_posix()
        for pattern in ("core/**/*.py", "pipeline/**/*.py", "transforms/**/*.py", "configs/*.yaml")
        for p in ROOT.glob(pattern)
    }
    expected |= {"setup.py", "requirements.txt", "MANIFEST.in", "README.md"}
    assert "configs/example.yaml" in expected
    assert {
        "pipeline/launcher.py",
        "pipeline/runners/dataflow.py",
        "core/schema.py",
        "transforms/write_shards.py",
        "transforms/images/check.py",
    } <= expected
    assert sorted(expected - names) == []
    assert not [n for n in names if n.startswith(("tests/", "bench/", "examples/", "out/"))]


def test_sdist_metadata_pins_requirements_txt_and_the_console_script(sdist):
    egg = f"imgrec-{VERSION}/imgrec.egg-info/"
    with tarfile.open(sdist) as tar:
        requires = tar.extractfile(egg + "requires.txt").read().decode()
        entry_points = tar.extractfile(egg + "entry_points.txt").read().decode()
    assert [Requirement(ln) for ln in requires.split()] == _pinned_requirements()
    assert {r.name for r in _pinned_requirements()} >= {
        "apache-beam",
        "tensorflow",
        "tensorflow-transform",
        "google-cloud-storage",
        "pillow",
        "pyyaml",
    }
    assert re.search(r"^imgrec = pipeline\.launch\.program:run$", entry_points, re.M), entry_points


def test_unpacked_sdist_builds_again(sdist, tmp_path):
    """What every Dataflow worker does with the staged workflow.tar.gz: run its setup.py."""
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
    proc = _run([sys.executable, "setup.py", "--version"], cwd=tmp_path / f"imgrec-{VERSION}")
    assert proc.stdout.strip().splitlines()[-1] == VERSION


def test_editable_install_works_offline_with_the_venvs_own_setuptools(tmp_path):
    """scripts/bootstrap.sh: `pip install --no-deps --no-build-isolation -e .`, here with
    --no-index, into a scratch venv that sees this environment's packages (pip, setuptools,
    wheel) through a .pth file, so the shared venv is left alone."""
    src = _copy_source(tmp_path / "src")
    venv = tmp_path / "venv"
    _run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    (venv_site,) = venv.glob("lib/python*/site-packages")
    (venv_site / "zz_outer_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(src),
        ],
        cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(venv / "bin" / "imgrec"), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: imgrec COMMAND"), proc.stdout
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import pipeline.cli, transforms; print(pipeline.cli.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert where.stdout.strip() == str(src / "pipeline" / "cli.py"), where.stderr


def test_example_config_is_a_valid_convert_config():
    from pipeline.launcher import parse_convert_args

    _, config, _ = parse_convert_args(["--config", str(ROOT / "configs" / "example.yaml")])
    assert config.splits == (("train", 0.8), ("validation", 0.1), ("test", 0.1))
    assert config.target_shard_mb == 128.0
    assert config.inputs and all(p.startswith("gs://") for p in config.inputs)
    assert config.output.startswith("gs://")
    # Every option the file sets reaches the per-image checks too.
    assert config.check.resize_filter == "lanczos"
    assert config.check.jpeg_verify == "dct"

    _, config, _ = parse_convert_args(
        ["--config", str(ROOT / "configs" / "example.yaml"), "--resize_filter", "bilinear",
         "--jpeg_verify", "strict"]
    )  # fmt: skip
    assert config.check.resize_filter == "bilinear"
    assert config.check.jpeg_verify == "strict"


_FAKE_PYTHON = """#!/bin/bash
# Stands in for the venv's python: `pip install -r ...` fails until the FAIL_UNTIL-th try.
case "$*" in
  *requirements.txt*)
    n=$(( $(cat "$0.tries" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$0.tries"
    echo "fake pip: try $n" >&2
    [ "$n" -ge "${FAIL_UNTIL}" ] ;;
  *) exit 0 ;;
esac
"""


def _bootstrap_with_fake_pip(
    tmp_path: Path, fail_until: int
) -> tuple[subprocess.CompletedProcess, Path]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(_FAKE_PYTHON)
    python.chmod(0o755)
    env = dict(
        os.environ, IMGREC_VENV=str(venv), IMGREC_PIP_RETRY_SLEEP_S="0", FAIL_UNTIL=str(fail_until)
    )
    proc = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'scripts' / 'bootstrap.sh'} && echo sourced"],
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    return proc, venv


def test_bootstrap_tries_the_dependency_install_again_after_a_dropped_download(tmp_path):
    """A registry connection that drops mid-wheel (CI, 2026-12-04: DALI at 289.7 of 424.5 MB)
    costs a retry, not the run: the third try's success installs and stamps the venv."""
    proc, venv = _bootstrap_with_fake_pip(tmp_path, fail_until=3)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "sourced"
    assert (venv / "bin" / "python.tries").read_text().strip() == "3"
    assert "trying again (attempt 3 of 3)" in proc.stderr
    assert (venv / ".imgrec-installed").is_file()


def test_bootstrap_gives_up_after_three_failed_installs_with_a_message(tmp_path):
    proc, venv = _bootstrap_with_fake_pip(tmp_path, fail_until=99)
    assert proc.returncode == 1
    assert "sourced" not in proc.stdout
    assert (venv / "bin" / "python.tries").read_text().strip() == "3"
    assert "failed 3 times" in proc.stderr and "package registry" in proc.stderr
    assert re.search(r"need ~4.4 GB and \d+ MB are free there", proc.stderr), proc.stderr
    assert not (venv / ".imgrec-installed").exists()
