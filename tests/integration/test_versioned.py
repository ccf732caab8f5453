"""`imgrec convert --versioned`: versions, the LATEST pointer, changes.json, pruning, resume.

Fast tests check the version logic on hand-made folders; conversions run `imgrec convert` in
process (tests/runs.py) on local disk and on moto's S3 server; the kill -9 test runs the real
command line in a fresh process, as a scheduler would (marked e2e).
"""

from __future__ import annotations

import datetime
import gc
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import changes, retention, schema, versions
from pipeline.demo import build_corpus
from tests.runs import ROOT, in_process, tf_script

CONVERT_ARGS = [
    "--no_analyze",
    "--splits", "train=0.6,validation=0.4",
    "--target_shard_mb", "0.01",
    "--max_bad_fraction", "0.5",
    "--workers", "1",
]  # fmt: skip
RUN_TIMEOUT_S = 600


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")


def convert(*args: str) -> subprocess.CompletedProcess:
    """`imgrec convert ARGS --versioned` in this process (tests/runs.py)."""
    return in_process("convert", *args, "--versioned", *CONVERT_ARGS, check=False)


def imgrec(*args: str) -> subprocess.CompletedProcess:
    return in_process(*args, check=False)


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def _latest(root: Path) -> str:
    return (root / versions.LATEST).read_text().strip()


def _version_dirs(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def _shards(folder: Path) -> dict[str, bytes]:
    info = json.loads((folder / schema.DATASET_INFO).read_text())
    return {
        s["file"]: (folder / s["file"]).read_bytes()
        for entry in info["splits"].values()
        for s in entry["shards"]
    }


def _write_manifest(path: Path, rows: list[tuple[Path, str]]) -> Path:
    path.write_text("path,label\n" + "".join(f"{p},{label}\n" for p, label in rows))
    return path


# ---------------------------------------------------------------------------------------------
# Names, pointer, resolution (no pipeline)
# ---------------------------------------------------------------------------------------------


def test_version_names_sort_by_time_and_never_repeat():
    t = datetime.datetime(2026, 12, 1, 3, 0, 0, 500_000, tzinfo=datetime.UTC)
    assert versions.version_name(t) == "v20261201T030000Z"
    # Same second as an existing version, or a clock behind it: one second past the newest.
    assert versions.next_version_name(["v20261201T030000Z"], t) == "v20261201T030001Z"
    assert versions.next_version_name(["v20261201T040000Z", None], t) == "v20261201T040001Z"
    assert versions.next_version_name(["v20261130T000000Z"], t) == "v20261201T030000Z"
    assert versions.next_version_name(["not-a-version"], t) == "v20261201T030000Z"


def test_claim_moves_to_the_next_second_when_the_folder_exists(tmp_path):
    (tmp_path / "v20261201T030000Z").mkdir()
    assert versions.claim_version(str(tmp_path), "v20261201T030000Z", {}) == "v20261201T030001Z"
    marker = json.loads((tmp_path / "v20261201T030001Z" / versions.VERSION_MARKER).read_text())
    assert marker["version"] == "v20261201T030001Z"


def _fake_version(root: Path, name: str, finished: bool = True) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / versions.VERSION_MARKER).write_text(json.dumps({"version": name}))
    if finished:
        (folder / schema.DATASET_INFO).write_text(json.dumps({"schema_version": 1}))
    return folder


def test_resolve_reads_latest_once_with_either_filesystem(tmp_path):
    root = tmp_path / "root"
    _fake_version(root, "v20261201T030000Z")
    _fake_version(root, "v20261202T030000Z", finished=False)  # a run still writing
    for fs in ("gfile", "beam"):
        assert versions.resolve_dataset_dir(str(root), fs=fs) == str(root)  # no LATEST yet
    versions.write_pointer(str(root), "v20261201T030000Z")
    assert (root / versions.LATEST).read_text() == "v20261201T030000Z\n"
    for fs in ("gfile", "beam"):
        assert versions.resolve_dataset_dir(str(root) + "/", fs=fs) == str(
            root / "v20261201T030000Z"
        )
        explicit = str(root / "v20261202T030000Z")
        assert versions.resolve_dataset_dir(explicit, fs=fs) == explicit
    plain = tmp_path / "plain"
    plain.mkdir()
    assert versions.resolve_dataset_dir(str(plain)) == str(plain)
    assert versions.list_versions(str(root)) == ["v20261201T030000Z", "v20261202T030000Z"]
    assert not list(root.glob(".tmp-*")), "the pointer's temporary file must be renamed away"


def test_a_torn_pointer_is_an_error_naming_it(tmp_path):
    _fake_version(tmp_path, "v20261201T030000Z")
    (tmp_path / versions.LATEST).write_text("v2026120")
    with pytest.raises(versions.VersionError, match=r"LATEST: expected one version name"):
        versions.resolve_dataset_dir(str(tmp_path))
    from pipeline.verify import verify_dataset

    report = verify_dataset(str(tmp_path))
    assert not report.ok and "LATEST" in report.problems[0]


def test_publish_never_moves_latest_back(tmp_path):
    root = str(tmp_path)
    assert versions.publish(root, "v20261202T000000Z") == (True, None)
    assert versions.publish(root, "v20261201T000000Z") == (False, "v20261202T000000Z")
    assert versions.publish(root, "v20261202T000000Z") == (False, "v20261202T000000Z")
    assert versions.read_latest(root) == "v20261202T000000Z"


def test_prune_keeps_latest_newer_runs_and_the_newest_complete_ones(tmp_path):
    names = {
        "v20261201T000000Z": True,  # oldest complete: goes
        "v20261201T010000Z": False,  # abandoned, older than every kept version: goes
        "v20261202T000000Z": True,  # kept (keep=3: LATEST + 2 older complete)
        "v20261202T010000Z": False,  # unfinished between kept versions: stays
        "v20261203T000000Z": True,  # kept
        "v20261204T000000Z": True,  # LATEST
        "v20261205T000000Z": False,  # newer than LATEST, still being written: stays
    }
    for name, finished in names.items():
        _fake_version(tmp_path, name, finished)
    removed = retention.prune(str(tmp_path), 3, "v20261204T000000Z")
    assert removed == ["v20261201T000000Z", "v20261201T010000Z"]
    assert _version_dirs(tmp_path) == sorted(set(names) - set(removed))
    assert retention.prune(str(tmp_path), 1, "v20261204T000000Z") == [
        "v20261202T000000Z",
        "v20261202T010000Z",
        "v20261203T000000Z",
    ]
    assert _version_dirs(tmp_path) == ["v20261204T000000Z", "v20261205T000000Z"]


def test_changes_name_every_category_and_count_deltas():
    def w(sha, split, label):
        return {"status": "written", "sha256": sha, "split": split, "label": label}

    before = {
        "a": w("1", "train", "cat"),
        "b": w("2", "train", "cat"),
        "c": w("3", "validation", "dog"),
        "d": {"status": "rejected", "reason": "truncated"},
        "e": w("5", "train", "dog"),
        "gone": w("6", "train", "dog"),
    }
    after = {
        "a": w("1", "train", "cat"),  # same
        "b": w("2b", "train", "cat"),  # changed bytes
        "c": w("3", "validation", "cat"),  # relabeled
        "d": w("4", "train", "dog"),  # no longer rejected
        "e": {"status": "rejected", "reason": "not_an_image"},  # newly rejected
        "new": w("7", "validation", "bird"),
    }
    c = changes.compute_changes(before, after, version="v2", previous_version="v1")
    assert c["added"]["items"] == ["new"] and c["removed"]["items"] == ["gone"]
    assert c["changed"]["items"] == ["b"]
    assert c["relabeled"]["items"] == [{"path": "c", "from": "dog", "to": "cat"}]
    assert c["newly_rejected"]["items"] == [{"path": "e", "reason": "not_an_image"}]
    assert c["no_longer_rejected"]["items"] == [{"path": "d", "status": "written"}]
    assert c["splits"]["train"] == {"previous": 4, "current": 3, "delta": -1}
    assert c["classes"]["bird"] == {"previous": 0, "current": 1, "delta": 1}
    assert c["headline"] == (
        "+1 added, -1 removed, 1 changed, 1 relabeled, 1 newly rejected, 1 no longer rejected"
    )
    first = changes.compute_changes(None, after, version="v1", previous_version=None)
    assert first["added"]["count"] == len(after) and first["headline"] == "+6 added"
    same = changes.compute_changes(after, after, version="v3", previous_version="v2")
    assert same["headline"] == "no change"


# ---------------------------------------------------------------------------------------------
# The command line, local disk
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    build_corpus(str(d), num_images=12, seed=5, long_side=(48, 80))
    return d


def test_versions_changes_reader_verify_inspect_and_pruning(corpus, tmp_path):
    images = sorted(
        p for p in corpus.rglob("*.jpg") if "broken" not in p.name and "copy_of" not in p.name
    )
    broken = sorted(p for p in corpus.rglob("broken_*.jpg"))
    work = tmp_path / "files"
    work.mkdir()
    rows = []
    for i, p in enumerate(images[:8]):
        copy = work / f"img{i}.jpg"
        copy.write_bytes(p.read_bytes())
        rows.append((copy, p.parent.name))
    bad = work / "bad.jpg"
    bad.write_bytes(broken[0].read_bytes())
    root = tmp_path / "root"
    m1 = _write_manifest(tmp_path / "m1.csv", [*rows, (bad, "cat")])
    first = _ok(convert("--manifest", str(m1), "--output", str(root)))
    v1 = _latest(root)
    assert f"writing new version {v1} of {root}" in first.stdout
    assert f"{v1} is LATEST of {root}; changes: +9 added (first version)" in first.stdout
    c1 = json.loads((root / v1 / versions.CHANGES).read_text())
    assert c1["previous_version"] is None and c1["added"]["count"] == 9
    index_text = gzip.decompress((root / v1 / versions.FILE_INDEX).read_bytes())
    index = [json.loads(x) for x in index_text.splitlines()]
    info1 = json.loads((root / v1 / schema.DATASET_INFO).read_text())
    assert len(index) == info1["num_written"] and {r["path"] for r in index} <= {
        str(p) for p, _ in rows
    }

    # The reader, verify and inspect accept the root and the explicit version.
    from pipeline.reader.dataset import make_dataset, split_files, steps_per_epoch

    n_train = info1["splits"]["train"]["num_examples"]
    assert steps_per_epoch(str(root), "train", 1) == n_train
    _, shards = split_files(str(root), "train")
    assert all(s.path.startswith(str(root / v1) + "/") for s in shards)
    ds = make_dataset(str(root), "train", 1, image_size=16)
    assert sum(1 for _ in ds) == n_train
    # A live dataset holds a lease on v1 (docs/scheduling.md): let it go, so the prune below
    # may delete v1.
    assert len(os.listdir(root / v1 / ".imgrec" / "leases")) == 1
    del ds
    gc.collect()
    assert os.listdir(root / v1 / ".imgrec" / "leases") == []
    assert "OK" in _ok(imgrec("verify", str(root), "--no_decode")).stdout
    assert "OK" in _ok(imgrec("verify", str(root / v1), "--no_decode")).stdout
    shown = _ok(imgrec("inspect", str(root))).stdout
    assert f"version     {v1}: +9 added" in shown

    # A newer version being written (claimed, one shard, no dataset_info.json): readers keep v1.
    partial = _fake_version(root, "v29991231T235959Z", finished=False)
    (partial / "train").mkdir()
    (partial / "train" / "train-00000-of-00001.tfrecord").write_bytes(b"half a shard")
    assert steps_per_epoch(str(root), "train", 1) == n_train
    assert sum(1 for _ in make_dataset(str(root), "train", 1, image_size=16)) == n_train
    shutil.rmtree(partial)

    # Second run: one file changed, one relabeled, one removed, one added, the broken file
    # fixed (no longer rejected), a good file broken (newly rejected).
    rows[0][0].write_bytes(images[9].read_bytes())  # changed bytes, same path
    rows2 = list(rows)
    rows2[1] = (rows[1][0], "relabeled")
    removed = rows2.pop(2)
    added = work / "added.jpg"
    added.write_bytes(images[10].read_bytes())
    bad.write_bytes(images[11].read_bytes())
    rows[3][0].write_bytes(broken[1].read_bytes())
    m2 = _write_manifest(tmp_path / "m2.csv", [*rows2, (added, "dog"), (bad, "cat")])
    second = _ok(
        convert(
            "--manifest", str(m2), "--output", str(root), "--keep_versions", "2", "--keep_for", "0"
        )
    )
    v2 = _latest(root)
    assert v2 > v1 and _version_dirs(root) == [v1, v2]
    c2 = json.loads((root / v2 / versions.CHANGES).read_text())
    assert c2["previous_version"] == v1
    assert c2["added"]["items"] == [str(added)]
    assert c2["removed"]["items"] == [str(removed[0])]
    assert c2["changed"]["items"] == [str(rows[0][0])]
    assert c2["relabeled"]["items"] == [
        {"path": str(rows[1][0]), "from": rows[1][1], "to": "relabeled"}
    ]
    assert [r["path"] for r in c2["newly_rejected"]["items"]] == [str(rows[3][0])]
    assert c2["no_longer_rejected"]["items"] == [{"path": str(bad), "status": "written"}]
    assert c2["headline"] in second.stdout
    info2 = json.loads((root / v2 / schema.DATASET_INFO).read_text())
    for split, entry in info2["splits"].items():
        assert c2["splits"][split]["current"] == entry["num_examples"]
    assert sum(c["current"] for c in c2["classes"].values()) == info2["num_written"]
    assert c2["classes"]["relabeled"] == {"previous": 0, "current": 1, "delta": 1}

    # A third run of the same input: no change, same shards; --keep_versions 2 prunes v1.
    third = _ok(
        convert(
            "--manifest", str(m2), "--output", str(root), "--keep_versions", "2", "--keep_for", "0"
        )
    )
    v3 = _latest(root)
    assert "changes: no change" in third.stdout
    assert _version_dirs(root) == [v2, v3]
    assert _shards(root / v3) == _shards(root / v2)


def test_refuses_a_root_holding_an_unversioned_dataset(tmp_path):
    (tmp_path / schema.DATASET_INFO).write_text("{}")
    proc = convert("--input", str(tmp_path / "*.jpg"), "--output", str(tmp_path))
    assert proc.returncode == 2
    assert "holds an unversioned dataset" in proc.stderr
    assert "choose another --output" in proc.stderr


@pytest.mark.e2e  # the real command line in a fresh process, killed
def test_kill_9_leaves_latest_and_resume_completes_the_same_version(tmp_path_factory, tmp_path):
    corpus = tmp_path_factory.mktemp("bigger")
    build_corpus(str(corpus), num_images=60, seed=11, long_side=(64, 96))
    root = tmp_path / "root"
    args = ("--input", f"{corpus}/**", "--output", str(root), "--target_shard_mb", "0.002")
    _ok(convert(*args))
    v1 = _latest(root)

    # --full: the same command on the same input would be served from v1 without the
    # pipeline (pipeline/versions/fast_rerun.py), too fast to kill; this run must write shards.
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", *args, "--full", "--versioned",
         *CONVERT_ARGS],
        cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        newer = []
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                newer = [p for p in root.glob("v*/*/*-of-*.tfrecord*") if p.parts[-3] != v1]
            except FileNotFoundError:
                # The preflight's output probe makes the new version's folder and removes it
                # again (launcher: a folder it created), so a scan can see it vanish.
                continue
            if newer:
                break
            time.sleep(0.01)
        assert newer, "the second run wrote no shard before it ended"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    v2 = newer[0].parts[-3]
    assert _latest(root) == v1, "a killed run must not move LATEST"
    assert not (root / v2 / schema.DATASET_INFO).exists()
    assert versions.resolve_dataset_dir(str(root)) == str(root / v1)

    resumed = _ok(convert(*args, "--resume"))
    assert f"continuing unfinished version {v2}" in resumed.stdout
    assert _latest(root) == v2 and _version_dirs(root) == [v1, v2]
    # Same input as v1: the resumed version's shards equal those of the uninterrupted run.
    assert _shards(root / v2) == _shards(root / v1)
    assert json.loads((root / v2 / versions.CHANGES).read_text())["headline"] == "no change"


# ---------------------------------------------------------------------------------------------
# A bucket (moto S3)
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e  # conversions on the storage servers (minutes on 2 cores)
def test_versioned_runs_on_s3(s3, corpus, beam_filesystems_s3):
    source, dest = s3.new_bucket("src"), s3.new_bucket("dst")
    for p in sorted(corpus.rglob("*.jpg")):
        s3.put(s3.uri(source, "in/" + str(p.relative_to(corpus))), p.read_bytes())
    root = s3.uri(dest, "flowers")
    args = ("--input", s3.uri(source, "in/**"), "--output", root, *s3.beam_args)
    _ok(convert(*args))
    v1 = s3.get(s3.uri(dest, "flowers/LATEST")).decode().strip()
    extra = sorted(corpus.rglob("*.jpg"))[0]
    s3.put(s3.uri(source, "in/new/extra.jpg"), extra.read_bytes() + b"\0")
    proc = _ok(convert(*args, "--keep_versions", "1", "--keep_for", "0"))
    v2 = s3.get(s3.uri(dest, "flowers/LATEST")).decode().strip()
    assert v2 > v1 and "changes: +1 added" in proc.stdout
    keys = s3.keys(dest, "flowers/")
    assert not [k for k in keys if k.startswith(f"flowers/{v1}/")], "v1 pruned"
    assert not [k for k in keys if "/.tmp-" in k]
    assert versions.resolve_dataset_dir(root, fs="beam") == f"{root}/{v2}"
    change = json.loads(s3.get(s3.uri(dest, f"flowers/{v2}/{versions.CHANGES}")))
    assert change["added"]["items"] == [s3.uri(source, "in/new/extra.jpg")]
    from pipeline.verify import verify_dataset

    report = verify_dataset(root, decode=False)
    assert report.ok, report.problems
    assert report.data_dir == f"{root}/{v2}"


@pytest.fixture
def beam_filesystems_s3(s3):
    """Beam FileSystems in this process pointed at the S3 server (restored after)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    previous = FileSystems._pipeline_options  # noqa: SLF001 - restored below
    FileSystems.set_options(PipelineOptions(s3.beam_args))
    try:
        yield
    finally:
        FileSystems._pipeline_options = previous  # noqa: SLF001


_RESOLVE_ON_GCS = """
import sys
from core.versions import resolve_dataset_dir
print(resolve_dataset_dir(sys.argv[1]))
print(resolve_dataset_dir(sys.argv[1] + "/v20261201T030000Z"))
assert "apache_beam" not in sys.modules, "the reader's resolution imported Beam"
"""


@pytest.mark.e2e  # a fresh TensorFlow process (MirroredStrategy or TF's own filesystem)
def test_reader_resolves_a_gcs_root_through_tensorflows_filesystem(gcs, tensorflow_gcs_env):
    """The reader's path (tf.io.gfile, no Beam) reads LATEST on gs://."""
    bucket = gcs.new_bucket("versions")
    gcs.put(gcs.uri(bucket, "flowers/LATEST"), b"v20261202T030000Z\n")
    gcs.put(gcs.uri(bucket, "flowers/v20261202T030000Z/version.json"), b"{}")
    env = dict(_env(), **tensorflow_gcs_env)
    root = gcs.uri(bucket, "flowers")
    proc = subprocess.run(tf_script(_RESOLVE_ON_GCS, root), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [f"{root}/v20261202T030000Z", f"{root}/v20261201T030000Z"]


def test_an_s3_root_resolves_through_beam_where_tensorflow_has_no_s3(s3, beam_filesystems_s3):
    bucket = s3.new_bucket("versions")
    s3.put(s3.uri(bucket, "flowers/LATEST"), b"v20261202T030000Z\n")
    root = s3.uri(bucket, "flowers")
    for fs in ("gfile", "beam"):
        assert versions.resolve_dataset_dir(root, fs=fs) == f"{root}/v20261202T030000Z"
    s3.put(s3.uri(bucket, "flowers/LATEST"), b"garbage")
    with pytest.raises(versions.VersionError, match="flowers/LATEST: expected one version"):
        versions.resolve_dataset_dir(root)


def test_resume_rewrites_a_shard_whose_labels_changed(corpus, tmp_path):
    """A scheduled `--versioned --resume` continues a version with tonight's input: a shard
    whose files kept their bytes but not their label (or label id) must not be kept."""
    import tensorflow as tf

    files = sorted(p for p in corpus.glob("*/*_0000*.jpg") if "copy_of" not in p.name)[:5]
    m1 = _write_manifest(tmp_path / "m1.csv", [(p, "a") for p in files])
    m2 = _write_manifest(tmp_path / "m2.csv", [(p, "z" if i == 0 else "a")
                                                for i, p in enumerate(files)])  # fmt: skip
    root = tmp_path / "root"
    _ok(convert("--manifest", str(m1), "--output", str(root)))
    v1 = _latest(root)
    # An interrupted run of the relabeled manifest: v1's shards and markers, never published.
    v2 = versions.next_version_name([v1], datetime.datetime.now(datetime.UTC))
    shutil.copytree(root / v1, root / v2)
    (root / v2 / schema.DATASET_INFO).unlink()
    resumed = _ok(convert("--manifest", str(m2), "--output", str(root), "--resume"))
    assert f"continuing unfinished version {v2}" in resumed.stdout
    assert _latest(root) == v2
    labels = {}
    for name in _shards(root / v2):
        for record in tf.data.TFRecordDataset(str(root / v2 / name)):
            f = tf.train.Example.FromString(record.numpy()).features.feature
            labels[f[schema.FILENAME].bytes_list.value[0].decode()] = (
                f[schema.LABEL_TEXT].bytes_list.value[0].decode(),
                f[schema.LABEL].int64_list.value[0],
            )
    assert labels[str(files[0])] == ("z", 1)
    assert all(labels[str(p)] == ("a", 0) for p in files[1:])
    change = json.loads((root / v2 / versions.CHANGES).read_text())
    assert change["relabeled"]["items"] == [{"path": str(files[0]), "from": "a", "to": "z"}]


def test_a_version_without_any_written_file_has_an_empty_file_index(tmp_path):
    """Every input rejected: no shard was planned, so nothing reaches the file index's combine;
    publishing writes the empty index, and the next run compares against it."""
    src = tmp_path / "in" / "cat"
    src.mkdir(parents=True)
    for name in ("a.jpg", "b.jpg"):
        (src / name).write_bytes(b"not an image")
    root = tmp_path / "root"
    args = ("convert", "--input", f"{tmp_path / 'in'}/*/*.jpg", "--output", str(root))
    args += ("--versioned", "--no_analyze", "--workers", "1", "--max_bad_fraction", "1.0")
    _ok(imgrec(*args))
    v1 = _latest(root)
    assert gzip.decompress((root / v1 / versions.FILE_INDEX).read_bytes()) == b""
    _ok(imgrec(*args, "--full"))
    change = json.loads((root / _latest(root) / versions.CHANGES).read_text())
    assert change["headline"] == "no change" and change["previous_version"] == v1
