"""--resume: unchanged files reuse their inspection records, changed ones are read again, and
the result is byte for byte what a fresh run writes (also after a real kill -9)."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions

from core import schema
from pipeline.builder import build_pipeline
from pipeline.demo import build_corpus
from pipeline.options import ConvertConfig
from tests.runs import ROOT as ROOT_PATH
from tests.runs import in_process
from tests.servers import past_the_second, put_corpus

ROOT = str(ROOT_PATH)


def convert(*args: str) -> dict[str, int]:
    """An in-process conversion on one in-memory worker -> its imgrec counters."""
    options = PipelineOptions(
        [*args, "--direct_num_workers", "1", "--direct_running_mode", "in_memory"]
    )
    config = ConvertConfig.from_options(options)
    result = build_pipeline(config, options, {"test": True}).run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_namespace("imgrec"))["counters"]
    found: dict[str, int] = {}
    for c in counters:
        found[c.key.metric.name] = found.get(c.key.metric.name, 0) + c.committed
    return found


def snapshot(out: str) -> dict[str, str]:
    """Digest of every file a user reads (dataset_info.json without provenance)."""
    found = {}
    names = glob.glob(os.path.join(glob.escape(out), "*", "*.tfrecord")) + [
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


def interrupt(out: str) -> None:
    """What a crash leaves: no description, one shard missing."""
    os.remove(os.path.join(out, schema.DATASET_INFO))
    os.remove(sorted(glob.glob(os.path.join(glob.escape(out), "*", "*.tfrecord")))[0])


@pytest.fixture
def corpus(tmp_path):
    d = str(tmp_path / "corpus")
    summary = build_corpus(d, num_images=80, seed=11, long_side=(48, 80))
    return d, summary


def _args(src: str, out: str, *extra: str) -> list[str]:
    return ["--input", f"{src}/*/*.jpg", "--output", out, "--target_shard_mb", "0.05", *extra]


def test_unchanged_files_are_not_inspected_again(corpus, tmp_path):
    src, summary = corpus
    out = str(tmp_path / "out")
    first = convert(*_args(src, out, "--no_analyze"))
    good = summary["images"] + 2  # + the PNG named .jpg + the duplicate
    assert first["inspected_ok"] == good and "inspections_reused" not in first
    expected = snapshot(out)
    interrupt(out)
    resumed = convert(*_args(src, out, "--no_analyze", "--resume"))
    # Every good file comes from its record; only the rejected ones (no record) are read.
    assert resumed["inspections_reused"] == good
    assert resumed.get("inspected_ok", 0) == 0
    assert resumed["shards_written"] == 1 and resumed["shards_resumed"] >= 2
    assert snapshot(out) == expected

    interrupt(out)
    full = convert(*_args(src, out, "--no_analyze", "--resume", "--resume_verify", "full"))
    assert "inspections_reused" not in full and full["inspected_ok"] == good
    assert snapshot(out) == expected


def test_changed_files_are_read_again(corpus, tmp_path):
    """A file rewritten with other bytes of the same size and its old mtime still gets its new
    sha256 (its change time and stamp moved): the resumed run equals a fresh run of the new
    corpus, and differs from the old output."""
    src, _ = corpus
    out = str(tmp_path / "out")
    convert(*_args(src, out, "--no_analyze"))
    before = snapshot(out)
    victims = [p for p in sorted(glob.glob(os.path.join(src, "*", "*_0*.jpg")))][3:5]
    for victim in victims:
        st = os.stat(victim)
        data = bytearray(open(victim, "rb").read())
        assert data[6:10] == b"JFIF"
        data[15] = 2 if data[15] != 2 else 3  # JFIF X density: other bytes, same size, valid.
        with open(victim, "wb") as f:
            f.write(data)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(victim).st_size == st.st_size
    interrupt(out)
    resumed = convert(*_args(src, out, "--no_analyze", "--resume"))
    assert resumed["inspected_ok"] >= 2  # The two rewritten files were read again.
    fresh_out = str(tmp_path / "fresh")
    convert(*_args(src, fresh_out, "--no_analyze"))
    assert snapshot(out) == snapshot(fresh_out)
    assert snapshot(out) != before


def _shard_of(out: str, source: str) -> str:
    """The shard file (relative to `out`) whose records include `source`."""
    import tensorflow as tf

    spec = schema.feature_spec((schema.FILENAME,))
    for path in sorted(glob.glob(os.path.join(out, "*", "*.tfrecord"))):
        for record in tf.data.TFRecordDataset(path):
            if tf.io.parse_single_example(record, spec)[schema.FILENAME].numpy() == source.encode():
                return os.path.relpath(path, out)
    raise AssertionError(f"{source} is in no shard of {out}")


def test_a_changed_file_invalidates_its_shards_plan_and_only_that_one(corpus, tmp_path):
    """A run that finished every shard but not dataset_info.json, then one input rewritten
    with other bytes of the same size (its mtime put back): the new sha256 changes the plan
    digest of that file's shard, so --resume writes that shard again and keeps every other
    one untouched; the result equals a fresh run of the new corpus."""
    src, _ = corpus
    out = str(tmp_path / "out")
    first = convert(*_args(src, out, "--no_analyze"))
    shards = sorted(
        os.path.relpath(p, out) for p in glob.glob(os.path.join(out, "*", "*.tfrecord"))
    )
    assert len(shards) >= 3 and first["shards_written"] == len(shards)
    victim = sorted(glob.glob(os.path.join(src, "cat", "cat_0*.jpg")))[1]
    victim_shard = _shard_of(out, victim)
    before = {f: open(os.path.join(out, f), "rb").read() for f in shards}
    mtimes = {f: os.stat(os.path.join(out, f)).st_mtime_ns for f in shards}
    st = os.stat(victim)
    data = bytearray(open(victim, "rb").read())
    assert data[6:10] == b"JFIF"
    data[15] = 2 if data[15] != 2 else 3  # JFIF X density: other bytes, same size, valid.
    with open(victim, "wb") as f:
        f.write(data)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.remove(os.path.join(out, schema.DATASET_INFO))  # the crash: after the last shard

    resumed = convert(*_args(src, out, "--no_analyze", "--resume"))
    assert resumed["shards_written"] == 1, resumed
    assert resumed["shards_resumed"] == len(shards) - 1, resumed
    rewritten = [f for f in shards if os.stat(os.path.join(out, f)).st_mtime_ns != mtimes[f]]
    assert rewritten == [victim_shard]
    assert open(os.path.join(out, victim_shard), "rb").read() != before[victim_shard]
    fresh_out = str(tmp_path / "fresh")
    convert(*_args(src, fresh_out, "--no_analyze"))
    assert snapshot(out) == snapshot(fresh_out)


def test_records_without_statistics_are_inspected_for_them(corpus, tmp_path):
    """Records of a --no_analyze run hold no pixel statistics: a resumed run with analysis
    inspects the training images again and describes the dataset as a fresh analysed run."""
    src, _ = corpus
    out = str(tmp_path / "out")
    convert(*_args(src, out, "--no_analyze"))
    interrupt(out)
    resumed = convert(*_args(src, out, "--resume"))
    assert resumed["inspected_ok"] > 0 and resumed.get("inspections_reused", 0) > 0
    fresh_out = str(tmp_path / "fresh")
    convert(*_args(src, fresh_out))
    got, want = snapshot(out), snapshot(fresh_out)
    assert got == want
    assert json.loads(got[schema.DATASET_INFO])["statistics"]["pixel_mean"]
    # And the records now hold statistics: one more resume reads nothing.
    interrupt(out)
    again = convert(*_args(src, out, "--resume"))
    assert again.get("inspected_ok", 0) == 0
    assert snapshot(out) == want


def _cli(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "convert", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # Its own process group: kill -9 reaches Beam's workers too.
    )


@pytest.mark.e2e  # the real command line, killed with SIGKILL
def test_kill_9_then_resume_equals_a_fresh_run(tmp_path):
    """A real crash: the CLI is killed with SIGKILL once some shards are final; --resume keeps
    them and the dataset equals a fresh run byte for byte."""
    src = str(tmp_path / "corpus")
    build_corpus(src, num_images=240, seed=4, long_side=(64, 96), broken=False)
    args = _args(src, str(tmp_path / "out"), "--no_analyze", "--target_shard_mb", "0.02")
    args += ["--workers", "1"]
    out = str(tmp_path / "out")
    proc = _cli(*args)
    markers = os.path.join(out, ".imgrec", "shards", "*.json")
    deadline = time.monotonic() + 300
    while not glob.glob(markers) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    kept = len(glob.glob(markers))
    assert kept >= 1, "the run ended before any shard was written"
    assert not os.path.exists(os.path.join(out, schema.DATASET_INFO)), "killed too late"
    resumed = _cli(*args, "--resume")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err.decode()[-3000:]
    # The from-scratch reference runs in this process: it is compared with, not under test.
    fresh_out = str(tmp_path / "fresh")
    in_process("convert", *_args(src, fresh_out, "--no_analyze", "--target_shard_mb", "0.02"))
    assert snapshot(out) == snapshot(fresh_out)
    assert not glob.glob(os.path.join(out, "*", ".tmp-*"))
    shutil.rmtree(src)


@pytest.mark.e2e  # conversions on the storage servers (minutes on 2 cores)
@pytest.mark.parametrize("store", ["gs", "s3"], indirect=True)
def test_bucket_input_resume_uses_object_update_times(store, tmp_path):
    """Bucket listing stamps (object update times) on the GCS emulator and S3: an unchanged
    bucket resumes to the same bytes; an object rewritten with other bytes of the same size
    is inspected again, and the result equals a fresh run of the new bucket."""
    src = tmp_path / "corpus"
    build_corpus(str(src), num_images=30, seed=6, long_side=(48, 72), broken=False)
    bucket = store.new_bucket("resume")
    names = put_corpus(store, bucket, src)
    uploaded = time.time()
    pattern = store.uri(bucket, "photos/*/*.jpg")
    out = str(tmp_path / "out")
    args = ["--input", pattern, "--output", out, "--no_analyze", "--target_shard_mb", "0.05"]
    args += [*store.beam_args, "--workers", "1"]

    def run(*extra: str, output: str = out) -> None:
        in_process("convert", *[a if a != out else output for a in args], *extra)

    run()
    expected = snapshot(out)
    assert glob.glob(os.path.join(out, ".imgrec", "inspected", "*", "*.jsonl"))
    interrupt(out)
    run("--resume")
    assert snapshot(out) == expected

    victim = store.uri(bucket, "photos/" + names[2])
    data = bytearray(store.get(victim))
    assert data[6:10] == b"JFIF"
    data[15] = 2 if data[15] != 2 else 3  # Other bytes, same size, still a valid JPEG.
    past_the_second(uploaded)  # S3 reports update times to the second.
    store.put(victim, bytes(data))
    interrupt(out)
    run("--resume")
    fresh = str(tmp_path / "fresh")
    run(output=fresh)
    assert snapshot(out) == snapshot(fresh) != expected
