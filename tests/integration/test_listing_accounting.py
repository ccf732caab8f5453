"""Listing accounts for everything a pattern matches: backslashes in names, dangling links,
unreadable folders, folders named like images and special files end written or rejected."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from core import schema
from core.rejects import LISTING_REASONS
from pipeline.builder import build_pipeline
from pipeline.demo import build_corpus
from pipeline.options import ConvertConfig
from tests.runs import ROOT as ROOT_PATH
from transforms import list_images
from transforms.match_local import match_local

ROOT = str(ROOT_PATH)
# Enough good images that the hostile entries stay under the default --max_bad_fraction (5 %).
NUM_GOOD = 100


def run_cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pipeline", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def convert_in_process(*args: str) -> dict:
    """One in-memory DirectRunner worker, so monkeypatches apply to the listing."""
    options = PipelineOptions(
        [*args, "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    )
    config = ConvertConfig.from_options(options)
    build_pipeline(config, options, {}).run().wait_until_finish()
    with open(os.path.join(config.output, schema.DATASET_INFO)) as f:
        return json.load(f)


def rejects(out: str) -> dict[str, tuple[str, str]]:
    with open(os.path.join(out, schema.REJECTED)) as f:
        rows = [json.loads(line) for line in f]
    return {r["path"]: (r["reason"], r["detail"]) for r in rows}


def stored_labels(out: str, info: dict) -> dict[str, str]:
    """image/filename -> image/class/text of every written record."""
    import tensorflow as tf

    found = {}
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for raw in tf.data.TFRecordDataset(os.path.join(out, shard["file"])):
                ex = tf.train.Example.FromString(raw.numpy())
                f = ex.features.feature
                found[f[schema.FILENAME].bytes_list.value[0].decode()] = (
                    f[schema.LABEL_TEXT].bytes_list.value[0].decode()
                )
    return found


def assert_accounted(info: dict) -> None:
    assert info["num_listed"] == (
        info["num_written"] + info["num_rejected"] + info["num_duplicates"]
    )


@pytest.fixture(scope="module")
def good_images(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("good"))
    build_corpus(d, num_images=NUM_GOOD, seed=5, long_side=(48, 72), broken=False)
    return d


def _copy_good(good: str, dst: str) -> int:
    shutil.copytree(good, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.json"))
    return sum(len(files) for _, _, files in os.walk(dst))


def _one_image(good: str) -> bytes:
    for dirpath, _, files in os.walk(good):
        for name in sorted(files):
            if name.endswith(".jpg"):
                return open(os.path.join(dirpath, name), "rb").read()
    raise AssertionError("no image in the corpus")


def test_listing_reasons_are_documented():
    for reason in ("broken_link", "unreadable_dir", "not_a_file"):
        assert LISTING_REASONS[reason]
    text = open(os.path.join(ROOT, "docs", "resume.md")).read()
    for reason in LISTING_REASONS:
        assert f"`{reason}`" in text, reason


@pytest.mark.skipif(os.sep != "/", reason="POSIX naming rules")
def test_parent_name_keeps_backslashes_on_posix():
    assert list_images._parent_name("/d/back\\slash/x.jpg") == "back\\slash"
    assert list_images._parent_name("/d/plain/file\\with.jpg") == "plain"
    assert list_images._parent_name("gs://b/a\\b/x.jpg") == "a\\b"
    assert list_images._parent_name("s3://b/c/x\\y.jpg") == "c"


@pytest.mark.skipif(os.sep != "/", reason="POSIX naming rules")
def test_backslash_names_keep_their_labels(good_images, tmp_path):
    """Through the real listing and writer: both examples of the issue, by pattern and manifest."""
    src = tmp_path / "src"
    n_good = _copy_good(good_images, str(src))
    data = _one_image(good_images)
    os.makedirs(src / "back\\slash")
    (src / "back\\slash" / "x.jpg").write_bytes(data + b"\0")  # Distinct bytes: no duplicate.
    os.makedirs(src / "plain")
    (src / "plain" / "file\\with.jpg").write_bytes(data + b"\0\0")
    out = str(tmp_path / "out")
    info = convert_in_process("--input", f"{src}/*/*.jpg", "--output", out, "--no_analyze")
    assert_accounted(info)
    assert info["num_listed"] == n_good + 2 and info["num_rejected"] == 0
    assert {"back\\slash", "plain"} <= set(info["label_names"])
    assert "slash" not in info["label_names"] and "with" not in info["label_names"]
    labels = stored_labels(out, info)
    assert labels[f"{src}/back\\slash/x.jpg"] == "back\\slash"
    assert labels[f"{src}/plain/file\\with.jpg"] == "plain"

    manifest = tmp_path / "m.csv"
    manifest.write_text("path,label\nback\\slash/x.jpg,\nplain/file\\with.jpg,\n")
    shutil.copy(manifest, src / "m.csv")
    out2 = str(tmp_path / "out2")
    info = convert_in_process(
        "--manifest", str(src / "m.csv"), "--label_from", "parent", "--output", out2, "--no_analyze"
    )
    assert_accounted(info)
    assert info["num_written"] == 2 and info["label_names"] == ["back\\slash", "plain"]
    labels = stored_labels(out2, info)
    assert labels == {
        f"{src}/back\\slash/x.jpg": "back\\slash",
        f"{src}/plain/file\\with.jpg": "plain",
    }


def _hostile_tree(good: str, src: str) -> tuple[int, dict[str, str]]:
    """Good images plus entries Beam's local match drops; returns (good count, expected rejects)."""
    n_good = _copy_good(good, src)
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    first = os.path.join(src, classes[0])
    os.symlink(os.path.join(src, "gone.jpg"), os.path.join(first, "dangling.jpg"))
    os.makedirs(os.path.join(first, "folder.jpg"))
    os.mkfifo(os.path.join(first, "pipe.jpg"))
    locked = os.path.join(src, "locked")
    os.makedirs(locked)
    with open(os.path.join(locked, "hidden.jpg"), "wb") as f:
        f.write(b"never seen")
    expected = {
        os.path.join(first, "dangling.jpg"): "broken_link",
        os.path.join(first, "folder.jpg"): "not_a_file",
        os.path.join(first, "pipe.jpg"): "not_a_file",
        locked: "unreadable_dir",
    }
    return n_good, expected


def test_vanishing_entries_are_rejected_in_process(good_images, tmp_path, monkeypatch):
    """Root reads any folder, so the unreadable one is made unreadable where the walker opens
    it: os.scandir raises PermissionError for it, as it does for a chmod 000 folder."""
    src = str(tmp_path / "src")
    n_good, expected = _hostile_tree(good_images, src)
    locked = os.path.join(src, "locked")
    real_scandir = os.scandir

    def scandir(path="."):
        if isinstance(path, str) and os.path.realpath(path) == os.path.realpath(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    out = str(tmp_path / "out")
    info = convert_in_process("--input", f"{src}/*/*.jpg", "--output", out, "--no_analyze")
    got = rejects(out)
    assert {p: r for p, (r, _) in got.items()} == expected
    assert "Permission denied" in got[locked][1] and "permissions" in got[locked][1]
    (dangling,) = [p for p, r in expected.items() if r == "broken_link"]
    assert "does not resolve" in got[dangling][1] and "gone.jpg" in got[dangling][1]
    assert info["num_listed"] == n_good + len(expected)
    assert info["num_written"] == n_good and info["num_rejected"] == len(expected)
    assert info["rejected_by_reason"] == {"broken_link": 1, "not_a_file": 2, "unreadable_dir": 1}
    assert_accounted(info)


def _without_dac_override() -> tuple[str, ...] | None:
    """A command prefix under which chmod 000 really denies this process; None if none works."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    caps = "-dac_override,-dac_read_search"
    return (setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}")


@pytest.mark.e2e  # the real command line under setpriv (a fresh process by necessity)
def test_vanishing_entries_are_rejected_by_the_cli(good_images, tmp_path):
    """The real command line with default options, a real chmod 000 folder (as root, the
    process runs without the capability that overrides permissions)."""
    prefix = _without_dac_override()
    if prefix is None:
        pytest.fail("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE to test")
    src = str(tmp_path / "src")
    n_good, expected = _hostile_tree(good_images, src)
    locked = os.path.join(src, "locked")
    os.chmod(locked, 0)
    try:
        out = str(tmp_path / "out")
        proc = run_cli("convert", "--input", f"{src}/*/*.jpg", "--output", out, prefix=prefix)
    finally:
        os.chmod(locked, 0o755)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    got = rejects(out)
    assert {p: r for p, (r, _) in got.items()} == expected
    assert info["num_listed"] == n_good + 4 and info["num_rejected"] == 4
    assert_accounted(info)
    assert "unreadable_dir 1" in proc.stdout and "broken_link 1" in proc.stdout


def test_match_local_walks_what_can_match(tmp_path):
    d = tmp_path / "d"
    os.makedirs(d / "a" / "deep" / "er")
    (d / "a" / "x.jpg").write_bytes(b"1")
    (d / "a" / "deep" / "y.jpg").write_bytes(b"2")
    (d / "a" / "deep" / "er" / "z.jpg").write_bytes(b"3")
    os.symlink(d / "a", d / "linked")  # A symlinked folder is followed ...
    os.symlink(d, d / "a" / "deep" / "loop")  # ... but a link to a parent is not walked twice.
    by_star = [(e.path, e.reason) for e in match_local(f"{d}/*/*.jpg")]
    assert by_star == [(f"{d}/a/x.jpg", None), (f"{d}/linked/x.jpg", None)]
    # `**` reaches every depth and reports no folder: its last name is only wildcards.
    everything = [e.path for e in match_local(f"{d}/**")]
    assert f"{d}/a/deep/er/z.jpg" in everything and f"{d}/a/deep" not in everything
    assert all(e.reason is None for e in match_local(f"{d}/**"))
    # A named path that is a folder is not a file.
    (entry,) = match_local(f"{d}/a")
    assert entry.reason == "not_a_file"
    # Pruning: an unreadable folder deeper than the pattern reaches is not reported.
    assert [e.path for e in match_local(f"{d}/a/*.jpg")] == [f"{d}/a/x.jpg"]
