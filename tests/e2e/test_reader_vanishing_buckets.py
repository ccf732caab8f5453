"""A reader on gs:// or s3:// whose version is deleted under it stops with an error naming a
shard, in training and evaluation, instead of spinning forever (issue 30; local disk:
tests/unit/test_reader_vanishing.py)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from core import versions
from pipeline.demo import build_corpus
from tests.runs import ROOT, ok, tf_script
from tests.servers import wait_until
from tests.version_leases import _STARTUP_S, Place, convert


@pytest.fixture
def source(tmp_path) -> Path:
    src = tmp_path / "photos"
    build_corpus(str(src), num_images=24, broken=False)
    return src


# Two readers whose version is deleted under them, training and evaluation (repeated, so that
# each would run forever), each in its own thread of one training process, until iteration
# fails; each prints its error's last line. One process and one conversion for both (each is
# seconds of CPU: TensorFlow's import, GCS through the emulator).
_DOOMED = """
import os, sys, threading, time
from pipeline.reader import make_dataset
root, progress = sys.argv[1], sys.argv[2]
failed = []

def read(mode):
    ds = make_dataset(root, "train", global_batch_size=2, training=mode == "train", repeat=True,
                      image_size=(32, 32), seed=1)
    n = 0
    try:
        for _ in ds:
            n += 1
            with open(progress + mode, "w") as f:
                f.write(str(n))
            time.sleep(0.02)
    except Exception as e:
        print("FAILED", mode, type(e).__name__, str(e).replace("\\n", " ")[:2000], flush=True)
        failed.append(mode)

readers = [threading.Thread(target=read, args=(mode,)) for mode in ("train", "eval")]
for reader in readers:
    reader.start()
for reader in readers:
    reader.join()
sys.exit(3 if sorted(failed) == ["eval", "train"] else 1)
"""


def test_gcs_readers_fail_naming_a_shard_when_their_version_is_deleted(
    tmp_path, source, gcs, tensorflow_gcs_env, beam_filesystems
):
    from apache_beam.io.filesystems import FileSystems

    root = gcs.uri(gcs.new_bucket("doomed"), "root")
    ok(convert(Place(root, [], {}, gcs), source))
    version = versions.read_latest(root)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", **tensorflow_gcs_env)
    progress = tmp_path / "progress-"
    reading = [Path(f"{progress}{mode}") for mode in ("train", "eval")]
    proc = subprocess.Popen(
        tf_script(_DOOMED, root, str(progress)),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started = wait_until(
            lambda: all(p.exists() for p in reading) or proc.poll() is not None, _STARTUP_S, 0.2
        )
        assert started and proc.poll() is None
        gone = [m.path for m in FileSystems.match([f"{root}/{version}/**"])[0].metadata_list]
        FileSystems.delete(gone)
        deleted = time.monotonic()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, out[-3000:]
    for mode in ("train", "eval"):
        failed = [line for line in out.splitlines() if line.startswith(f"FAILED {mode} ")][-1]
        # Any of the version's shards (training shuffles the file order; a split may have 20+).
        assert re.search(
            rf"imgrec reader: shard {re.escape(root)}/{version}/train/train-\d{{5}}-of-", failed
        ), failed
        assert f"if version {version} was pruned (--keep_versions) or removed" in failed
    assert time.monotonic() - deleted < 60, "failed within seconds, not after a hang"


@pytest.mark.parametrize("training", [True, False])
def test_s3_reader_fails_naming_a_shard_when_its_version_is_deleted(
    tmp_path, source, s3, beam_filesystems, training
):
    """s3:// is read through the shard cache: a shard whose object is gone fails its download,
    naming it (shards already in the cache are read from there)."""
    import tensorflow as tf
    from apache_beam.io.filesystems import FileSystems

    from pipeline.reader import dataset as reader

    root = s3.uri(s3.new_bucket("doomed"), "root")
    ok(convert(Place(root, s3.beam_args, {}, s3), source))
    version = versions.read_latest(root)
    ds = reader.make_dataset(
        root, "train", 2, training=training, repeat=True, image_size=(32, 32),
        cache_dir=str(tmp_path / "cache"), s3_endpoint_url=s3.relay.url, lease=False,
    )  # fmt: skip
    gone = [m.path for m in FileSystems.match([f"{root}/{version}/**"])[0].metadata_list]
    FileSystems.delete(gone)
    started = time.monotonic()
    with pytest.raises(tf.errors.OpError) as raised:
        for _ in ds:
            assert time.monotonic() - started < 120, "still reading a deleted version"
    message = raised.value.message
    assert re.search(rf"shard {re.escape(root)}/{version}/train/train-\d{{5}}-of-", message), (
        message
    )
    assert "is missing from the store" in message
