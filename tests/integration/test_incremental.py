"""Incremental --versioned reruns: unchanged files are not read again, unchanged shards are
copied from the previous version, and every version is byte for byte what a from-scratch
conversion of the same input writes (after add / remove / change / relabel)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from core import rerun_record, schema, versions
from pipeline.builder import build_pipeline
from pipeline.demo import build_corpus
from pipeline.options import ConvertConfig, OptionError
from pipeline.versions import fast_rerun
from tests.runs import ROOT as ROOT_PATH
from tests.runs import in_process
from tests.servers import past_the_second, put_corpus

# Small shards: the 80-image corpus spreads over several, so that a small change leaves some
# shards' plans unchanged (copied) and changes others (written).
COMMON = ["--target_shard_mb", "0.02", "--no_analyze", "--max_bad_fraction", "0.5"]


def _run(args: list[str], versioned: bool) -> tuple[str, dict[str, int]]:
    """One in-process conversion on one in-memory worker -> (dataset folder, imgrec counters).

    A versioned run goes through the launcher's steps: plan the version (which picks the
    previous version to reuse), claim its folder, run the pipeline (which publishes it).
    """
    options = PipelineOptions(
        [*COMMON, *args, "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
        + (["--versioned"] if versioned else [])
    )
    config = ConvertConfig.from_options(options)
    if versioned:
        config, _ = versions.plan_run(config)
        config = versions.claim_run(config, {"argv": args})
    result = build_pipeline(config, options, {"test": True}).run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("imgrec"))["counters"]
    found: dict[str, int] = {}
    for c in counters:
        found[c.key.metric.name] = found.get(c.key.metric.name, 0) + c.committed
    return config.output, found


def snapshot(out: str) -> dict[str, str]:
    """Digest of every file a user reads: shards, rejected.jsonl, duplicates.jsonl, and
    dataset_info.json without its provenance."""
    found = {}
    names = glob.glob(os.path.join(out, "*", "*.tfrecord")) + [
        os.path.join(out, schema.REJECTED),
        os.path.join(out, schema.DUPLICATES),
    ]
    for path in sorted(names):
        with open(path, "rb") as f:
            found[os.path.relpath(path, out)] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        info = json.load(f)
    info.pop("provenance")
    found[schema.DATASET_INFO] = json.dumps(info, sort_keys=True)
    return found


def _changes(folder: str) -> dict:
    with open(os.path.join(folder, versions.CHANGES)) as f:
        return json.load(f)


def _nonempty_shards(folder: str) -> int:
    return sum(1 for p in glob.glob(os.path.join(folder, "*", "*.tfrecord")) if os.path.getsize(p))


def _unchanged_shards(before: str, after: str) -> list[str]:
    """Non-empty shards the two versions' dataset_info.json list with the same name and sha256:
    exactly those an incremental run may copy (equal bytes mean an equal plan)."""
    shards = []
    for folder in (before, after):
        with open(os.path.join(folder, schema.DATASET_INFO)) as f:
            info = json.load(f)
        shards.append(
            {
                s["file"]: s["sha256"]
                for split in info["splits"].values()
                for s in split["shards"]
                if s["num_bytes"]
            }
        )
    return sorted(name for name, sha in shards[1].items() if shards[0].get(name) == sha)


def _assert_copied_exactly(before: str, after: str, counters: dict[str, int]) -> None:
    """Every unchanged shard was copied (a hard link: the same inode), every other one written."""
    same = _unchanged_shards(before, after)
    assert counters.get("shards_copied", 0) == len(same)
    assert counters.get("shards_written", 0) == _nonempty_shards(after) - len(same)
    for name in same:
        a, b = os.stat(os.path.join(before, name)), os.stat(os.path.join(after, name))
        assert a.st_ino == b.st_ino, name


def _rewrite_same_size(path: str) -> None:
    """Other bytes, same size, still a valid JPEG (the JFIF X density byte)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    assert data[6:10] == b"JFIF"
    data[15] = 2 if data[15] != 2 else 3
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture
def corpus(tmp_path):
    d = str(tmp_path / "corpus")
    summary = build_corpus(d, num_images=80, seed=11, long_side=(48, 80))
    return d, summary


def _input(src: str) -> list[str]:
    return ["--input", f"{src}/*/*.jpg"]


def test_a_no_change_rerun_reads_nothing_and_copies_every_shard(corpus, tmp_path):
    src, summary = corpus
    root = str(tmp_path / "root")
    good = summary["images"] + 2  # + the PNG named .jpg + the duplicate (inspected, then dropped)

    first, c1 = _run([*_input(src), "--output", root], versioned=True)
    assert c1["inspected_ok"] == good and "inspections_reused" not in c1
    assert "shards_copied" not in c1

    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    assert second != first and versions.read_latest(root) == os.path.basename(second)
    # Not one accepted file was read for inspection, and no shard was written anew.
    assert c2.get("inspected_ok", 0) == 0 and c2["inspections_reused"] == good
    assert c2.get("shards_written", 0) == 0
    assert c2["shards_copied"] == _nonempty_shards(first) >= 3
    assert snapshot(second) == snapshot(first)
    _assert_copied_exactly(first, second, c2)
    change = _changes(second)
    assert change["headline"] == "no change"
    assert change["previous_version"] == os.path.basename(first)

    # The second version recorded the records it reused: a third run, whose only source is
    # the second version, still reads nothing; pruning the first version breaks nothing.
    shutil.rmtree(first)
    third, c3 = _run([*_input(src), "--output", root], versioned=True)
    assert c3.get("inspected_ok", 0) == 0 and c3["inspections_reused"] == good
    assert c3["shards_copied"] == _nonempty_shards(second)
    assert snapshot(third) == snapshot(second)

    # --resume_verify full reads every file again, and still copies the unchanged shards.
    fourth, c4 = _run([*_input(src), "--output", root, "--resume_verify", "full"], versioned=True)
    assert c4["inspected_ok"] == good and "inspections_reused" not in c4
    assert c4["shards_copied"] == _nonempty_shards(third)
    assert snapshot(fourth) == snapshot(third)


def test_incremental_equals_from_scratch_after_add_remove_and_change(corpus, tmp_path):
    src, summary = corpus
    root = str(tmp_path / "root")
    good = summary["images"] + 2
    first, _ = _run([*_input(src), "--output", root], versioned=True)

    extra = str(tmp_path / "extra")
    build_corpus(extra, num_images=6, seed=99, long_side=(48, 80), broken=False)
    added = sorted(glob.glob(os.path.join(extra, "*", "*.jpg")))
    for path in added:
        label = os.path.basename(os.path.dirname(path))
        shutil.copy(path, os.path.join(src, label, "added_" + os.path.basename(path)))
    removed = sorted(glob.glob(os.path.join(src, "*", "*_00001*.jpg")))[:3]
    for path in removed:
        os.remove(path)
    changed = sorted(glob.glob(os.path.join(src, "*", "*_00004*.jpg")))[:2]
    for path in changed:
        _rewrite_same_size(path)

    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    fresh, _ = _run([*_input(src), "--output", str(tmp_path / "fresh")], versioned=False)
    assert snapshot(second) == snapshot(fresh)
    assert snapshot(second) != snapshot(first)
    # Only the new and the rewritten files were read; the rest came from the first version.
    assert c2["inspected_ok"] == len(added) + len(changed)
    assert c2["inspections_reused"] == good - len(removed) - len(changed)
    # A handful of files moved: the shards they do not touch were copied, the others written.
    _assert_copied_exactly(first, second, c2)
    assert c2["shards_copied"] >= 1 and c2["shards_written"] >= 1
    change = _changes(second)
    assert change["added"]["count"] == len(added)
    assert change["removed"]["count"] == len(removed)
    assert change["changed"]["count"] == len(changed)

    # --full reuses nothing and writes the same bytes.
    full, c3 = _run([*_input(src), "--output", root, "--full"], versioned=True)
    assert "inspections_reused" not in c3 and "shards_copied" not in c3
    assert c3["inspected_ok"] == good - len(removed) + len(added)
    assert snapshot(full) == snapshot(fresh)
    assert _changes(full)["headline"] == "no change"


def _manifest(path: str, rows: list[tuple[str, str]]) -> str:
    with open(path, "w") as f:
        f.write("path,label\n")
        for file, label in rows:
            f.write(f"{file},{label}\n")
    return path


def test_incremental_equals_from_scratch_after_a_relabel(corpus, tmp_path):
    """A manifest relabel changes the shards holding the relabeled files (labels are part of
    the shard plan); a new class shifts every label id, so no shard may be copied then."""
    src, _ = corpus
    root = str(tmp_path / "root")
    files = sorted(glob.glob(os.path.join(src, "*", "*_0*.jpg")))
    rows = [(p, os.path.basename(os.path.dirname(p))) for p in files]
    labels = sorted({label for _, label in rows})
    manifest = str(tmp_path / "manifest.csv")
    first, _ = _run(["--manifest", _manifest(manifest, rows), "--output", root], versioned=True)

    # Two files move to another existing class.
    relabeled = dict(rows)
    for path in files[:2]:
        relabeled[path] = next(lb for lb in labels if lb != relabeled[path])
    _manifest(manifest, sorted(relabeled.items()))
    second, c2 = _run(["--manifest", manifest, "--output", root], versioned=True)
    fresh, _ = _run(["--manifest", manifest, "--output", str(tmp_path / "f1")], versioned=False)
    assert snapshot(second) == snapshot(fresh)
    _assert_copied_exactly(first, second, c2)
    assert c2["shards_copied"] >= 1 and c2["shards_written"] >= 1
    assert _changes(second)["relabeled"]["count"] == 2

    # A new class name sorting first: every label id moves by one.
    relabeled[files[2]] = "aaa_new_class"
    _manifest(manifest, sorted(relabeled.items()))
    third, c3 = _run(["--manifest", manifest, "--output", root], versioned=True)
    fresh2, _ = _run(["--manifest", manifest, "--output", str(tmp_path / "f2")], versioned=False)
    assert snapshot(third) == snapshot(fresh2)
    assert "shards_copied" not in c3 and not _unchanged_shards(second, third)


def test_a_corrupt_previous_shard_is_written_anew_not_copied(corpus, tmp_path):
    src, _ = corpus
    root = str(tmp_path / "root")
    first, _ = _run([*_input(src), "--output", root], versioned=True)
    expected = snapshot(first)
    shards = glob.glob(os.path.join(first, "*", "*.tfrecord"))
    victim = sorted(p for p in shards if os.path.getsize(p))[0]
    with open(victim, "r+b") as f:  # same size, other bytes: only the sha256 can tell
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0xFF]))
    second, c2 = _run([*_input(src), "--output", root], versioned=True)
    assert c2["shard_copies_refused"] == 1 and c2["shards_written"] == 1
    assert snapshot(second) == expected
    assert not glob.glob(os.path.join(second, "*", ".tmp-*"))


def test_full_needs_versioned():
    with pytest.raises(OptionError, match="--full needs --versioned"):
        ConvertConfig.from_options(
            PipelineOptions(["--input", "x/*.jpg", "--output", "o", "--full"])
        )


ROOT = str(ROOT_PATH)


def _cli(*args: str) -> subprocess.CompletedProcess:
    """`imgrec convert ARGS` in this process (tests/runs.py), asserting exit 0."""
    return in_process("convert", *args, *COMMON, "--workers", "1")


@pytest.mark.e2e  # conversions on the storage servers (minutes on 2 cores)
@pytest.mark.parametrize("store", ["gs", "s3"], indirect=True)
def test_bucket_root_copies_shards_server_side(store, tmp_path):
    """Input and versioned root on a bucket (GCS emulator, S3): a no-change rerun reads no
    file and copies every shard (server-side copy, checked, renamed); after a rewrite the
    version equals a from-scratch conversion."""
    src = tmp_path / "corpus"
    build_corpus(str(src), num_images=30, seed=6, long_side=(48, 72), broken=False)
    bucket = store.new_bucket("incremental")
    names = put_corpus(store, bucket, src)
    uploaded = time.time()
    root = store.uri(bucket, "flowers")
    args = ["--input", store.uri(bucket, "photos/*/*.jpg"), *store.beam_args]

    _cli(*args, "--output", root, "--versioned")
    v1 = store.get(store.uri(bucket, "flowers/LATEST")).decode().strip()
    proc = _cli(*args, "--output", root, "--versioned")
    v2 = store.get(store.uri(bucket, "flowers/LATEST")).decode().strip()
    assert v2 > v1 and "changes: no change" in proc.stdout
    # Same command, same listing: the version is made from v1 without running the pipeline.
    assert "nothing changed: the pipeline did not run" in proc.stdout, proc.stdout
    info = json.loads(store.get(store.uri(bucket, f"flowers/{v1}/{schema.DATASET_INFO}")))
    shards = [
        shard["file"]
        for split in info["splits"].values()
        for shard in split["shards"]
        if shard["num_bytes"]
    ]
    assert len(shards) >= 2
    expected = f"{len(names)}   unchanged files not read again, {len(shards)} shards copied"
    assert expected in proc.stdout, proc.stdout
    for shard in shards:
        one = store.get(store.uri(bucket, f"flowers/{v1}/{shard}"))
        assert one == store.get(store.uri(bucket, f"flowers/{v2}/{shard}"))
    assert not [k for k in store.keys(bucket, "flowers/") if "/.tmp-" in k]

    victim = store.uri(bucket, "photos/" + names[2])
    data = bytearray(store.get(victim))
    data[15] = 2 if data[15] != 2 else 3  # Other bytes, same size, still a valid JPEG.
    past_the_second(uploaded)  # S3 reports update times to the second.
    store.put(victim, bytes(data))
    proc = _cli(*args, "--output", root, "--versioned")
    assert "1 changed" in proc.stdout
    fresh = str(tmp_path / "fresh")
    _cli(*args, "--output", fresh)
    v3 = store.get(store.uri(bucket, "flowers/LATEST")).decode().strip()
    local = tmp_path / "v3"
    for key in store.keys(bucket, f"flowers/{v3}/"):
        rel = key.split("/", 2)[2]
        if rel.endswith((".tfrecord", ".jsonl", schema.DATASET_INFO)) and "/." not in "/" + rel:
            (local / rel).parent.mkdir(parents=True, exist_ok=True)
            (local / rel).write_bytes(store.get(store.uri(bucket, key)))
    assert snapshot(str(local)) == snapshot(fresh)


# -- The no-change rerun (pipeline/versions/fast_rerun.py) ------------------------------------------------

# The `imgrec` program (program.run, as `python -m pipeline` runs it), then which heavy modules it
# imported: run() calls the exit handlers before it leaves the interpreter.
_PROBE = """
import atexit, sys
def heavy():
    loaded = (m for m in ("apache_beam", "tensorflow", "tensorflow_transform") if m in sys.modules)
    print("heavy modules:", ",".join(sorted(loaded)) or "none")
atexit.register(heavy)
sys.argv[0] = "imgrec"
from pipeline.launch.program import run
run()
"""


# Default options (analysis and report on) but for a test-sized shard target and bad fraction.
DEFAULT_EXTRA = ("--target_shard_mb", "0.02", "--max_bad_fraction", "0.5", "--workers", "1")


def _cli_default(*args: str) -> subprocess.CompletedProcess:
    """`imgrec convert ARGS` with default options (analysis and report on), one worker,
    reporting which heavy modules the process imported."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, "convert", *args, *DEFAULT_EXTRA],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def _in_process_default(*args: str) -> subprocess.CompletedProcess:
    """What _cli_default runs, through tests/runs.py in this process."""
    return in_process("convert", *args, *DEFAULT_EXTRA)


def _masked_report(folder: str) -> str:
    with open(os.path.join(folder, "report.html")) as f:
        text = f.read()
    return re.sub(r"Written [^<]* by imgrec preview", "Written - by imgrec preview", text)


def _info_without_times(folder: str) -> dict:
    with open(os.path.join(folder, schema.DATASET_INFO)) as f:
        info = json.load(f)
    for key in ("started", "finished"):
        info["provenance"].pop(key)
    return info


FAST = "nothing changed: the pipeline did not run"


@pytest.mark.e2e  # four default-option conversions; the fast rerun is the real command
def test_a_no_change_rerun_is_made_from_the_previous_version_without_beam(corpus, tmp_path):
    """Default options: the rerun imports neither Beam nor TensorFlow, hard-links every shard,
    carries the TFT export, and writes what a from-scratch conversion writes (the report
    byte for byte but its "Written" time, dataset_info.json but its start and finish times).
    The no-change rerun runs in a fresh process, where "imports nothing heavy" can be seen; the
    runs around it are the same entry point in this process (tests/runs.py)."""
    from pipeline.report.page import build_report

    src, summary = corpus
    root = str(tmp_path / "root")
    args = [*_input(src), "--output", root, "--versioned"]
    first = _in_process_default(*args)
    assert FAST not in first.stdout
    v1 = os.path.join(root, versions.read_latest(root))
    assert os.path.exists(os.path.join(v1, rerun_record.RERUN_RECORD))

    second = _cli_default(*args)
    assert FAST in second.stdout and "changes: no change" in second.stdout
    assert "heavy modules: none" in second.stdout, second.stdout
    v2 = os.path.join(root, versions.read_latest(root))
    assert v2 != v1
    assert snapshot(v2) == snapshot(v1)
    _assert_copied_exactly(v1, v2, {"shards_copied": _nonempty_shards(v1)})
    # Every file of v1 is in v2; those that are not rewritten are the same bytes.
    own = {
        schema.DATASET_INFO,
        versions.CHANGES,
        versions.VERSION_MARKER,
        "report.html",
        versions.PUBLISHED,
    }
    files = sorted(
        os.path.relpath(os.path.join(d, n), v1) for d, _, names in os.walk(v1) for n in names
    )
    for rel in files:
        with open(os.path.join(v1, rel), "rb") as a, open(os.path.join(v2, rel), "rb") as b:
            assert rel in own or a.read() == b.read(), rel
    assert os.path.exists(os.path.join(v2, "transform_fn", "saved_model.pb"))
    info1, info2 = _info_without_times(v1), _info_without_times(v2)
    assert info2 == info1 and info2["statistics"]["num_images"] > 0
    change = _changes(v2)
    assert change["headline"] == "no change" and change["version"] == os.path.basename(v2)
    with open(os.path.join(v2, versions.VERSION_MARKER)) as f:
        assert json.load(f)["version"] == os.path.basename(v2)
    # The report is what `imgrec preview` builds for the new folder.
    masked = re.sub(r"Written [^<]* by imgrec preview", "Written - by imgrec preview",
                    build_report(v2))  # fmt: skip
    assert _masked_report(v2) == masked

    # v1, the root's first run, is itself a from-scratch conversion of the same input; v2 equals
    # it (above). After a change, a from-scratch conversion into a folder is the reference (it
    # runs in this process: it is compared with, not under test).

    # A file rewritten with its old size and mtime has another listing stamp (ctime): the
    # pipeline runs again, reading that file only, and still writes the from-scratch bytes.
    victim = sorted(glob.glob(os.path.join(src, "*", "*_00004*.jpg")))[0]
    st = os.stat(victim)
    _rewrite_same_size(victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    third = _in_process_default(*args)
    assert FAST not in third.stdout and "1 changed" in third.stdout
    v3 = os.path.join(root, versions.read_latest(root))
    fresh3 = str(tmp_path / "fresh3")
    _in_process_default(*_input(src), "--output", fresh3)
    assert snapshot(v3) == snapshot(fresh3) != snapshot(v2)


def test_the_no_change_rerun_falls_back_to_the_pipeline(corpus, tmp_path):
    """Another option, a damaged previous shard or an added file: the pipeline runs, no
    half-made version is left behind, and the output is the from-scratch one."""
    src, _ = corpus
    root = str(tmp_path / "root")
    args = [*_input(src), "--output", root, "--versioned"]
    _cli(*args)
    v1 = os.path.join(root, versions.read_latest(root))
    expected = snapshot(v1)

    # Another option (even one that changes no byte) runs the pipeline.
    proc = _cli(*args, "--seed", "0")
    assert FAST not in proc.stdout
    _cli(*args)  # the record of the version just written names the other command line
    proc = _cli(*args)
    assert FAST in proc.stdout
    latest = os.path.join(root, versions.read_latest(root))

    shards = sorted(
        p for p in glob.glob(os.path.join(latest, "*", "*.tfrecord")) if os.path.getsize(p)
    )
    with open(shards[0], "r+b") as f:  # same size, other bytes: only the sha256 can tell
        f.seek(20)
        byte = f.read(1)
        f.seek(20)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = set(os.listdir(root))
    proc = _cli(*args)
    assert FAST not in proc.stdout
    new = set(os.listdir(root)) - before
    assert len(new) == 1, new  # the fast path removed the folder it had claimed
    rebuilt = os.path.join(root, versions.read_latest(root))
    assert snapshot(rebuilt) == expected
    assert not glob.glob(os.path.join(rebuilt, "*", ".tmp-*"))

    extra = str(tmp_path / "extra")
    build_corpus(extra, num_images=2, seed=98, long_side=(48, 80), broken=False)
    for path in glob.glob(os.path.join(extra, "*", "*.jpg")):
        label = os.path.basename(os.path.dirname(path))
        shutil.copy(path, os.path.join(src, label, "added_" + os.path.basename(path)))
    proc = _cli(*args)
    assert FAST not in proc.stdout and "+2 added" in proc.stdout
    fresh = str(tmp_path / "fresh")
    _cli(*_input(src), "--output", fresh)
    assert snapshot(os.path.join(root, versions.read_latest(root))) == snapshot(fresh)


def test_no_change_reruns_prune_like_pipeline_runs(corpus, tmp_path):
    """--keep_versions prunes after a no-change rerun too; each rerun's only source is the
    version before it (the one it was made from may be pruned next)."""
    src, _ = corpus
    root = str(tmp_path / "root")
    args = [
        *_input(src),
        "--output",
        root,
        "--versioned",
        "--keep_versions",
        "2",
        "--keep_for",
        "0",
    ]
    _cli(*args)
    first = os.path.join(root, versions.read_latest(root))
    expected = snapshot(first)
    for _ in range(3):
        proc = _cli(*args)
        assert FAST in proc.stdout
    names = versions.list_versions(root)
    assert len(names) == 2 and names[-1] == versions.read_latest(root)
    assert not os.path.exists(first)
    assert snapshot(os.path.join(root, names[-1])) == expected
