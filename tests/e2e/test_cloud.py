"""Conversions from and to buckets (GCS emulator, moto S3), most through the CLI as a user runs
them (`run_cli`); those whose subject is only the storage run in this process (`convert_here`).

Each conversion must keep the local invariants (accounting, every record decodes, shard sizes
and hashes as described) and put every image in the same split, shard and position as a local
conversion of the same files: split and shard keys are relative to the input root, so only
`image/filename` differs. Fault tests stop the storage server in the middle of a run.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core import schema
from pipeline.demo import build_corpus
from tests.runs import ROOT, in_process, tf_script
from tests.servers import put_corpus

# Small images and a tiny shard target: several shards per split from a 2-core-friendly corpus.
CONVERT_ARGS = [
    "--no_analyze",
    "--splits", "train=0.6,validation=0.4",
    "--target_shard_mb", "0.006",  # ~22 KB per split: 3-4 shards each (checked in `reference`)
    "--max_bad_fraction", "0.5",
]  # fmt: skip
# A conversion of this corpus takes ~10-20 s (TensorFlow import, DirectRunner start-up).
RUN_TIMEOUT_S = 600
NUM_IMAGES = 15


def run_cli(*args: str, workers: int = 1) -> subprocess.CompletedProcess:
    """`python -m pipeline convert ARGS` in a fresh process (inherits the servers' env)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    command = ["-m", "pipeline", "convert"]
    return subprocess.run(
        [sys.executable, *command, *args, *CONVERT_ARGS, "--workers", str(workers)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip


def convert_here(*args: str) -> subprocess.CompletedProcess:
    """The same conversion in this process (tests.runs.in_process: one in-memory worker), for
    runs whose subject is the storage, not the command line: a fresh process costs ~5 s of CPU."""
    return in_process("convert", *args, *CONVERT_ARGS, "--workers", "1")


def _ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def _records(data: bytes) -> list[bytes]:
    """Every record of a TFRecord file, CRCs checked (raises on a torn or corrupt file)."""
    from core.tfrecord import read_record

    f, out = io.BytesIO(data), []
    while True:
        record = read_record(f)
        if record is None:
            return out
        out.append(record)


def check_dataset(
    get: Callable[[str], bytes], names: list[str], input_root: str, expected_listed: int
) -> dict[str, tuple[str, str, int]]:
    """Check one converted dataset; return {key: (split, shard file, position in shard)}.

    Args:
        get: reads a file of the output by its name relative to the output directory.
        names: every file name under the output directory (relative).
        input_root: what each `image/filename` must start with; keys are relative to it.
        expected_listed: how many input files the corpus has.
    """
    import tensorflow as tf

    assert not [n for n in names if n.rsplit("/", 1)[-1].startswith(".tmp-")], names
    info = json.loads(get(schema.DATASET_INFO))
    assert info["num_listed"] == expected_listed
    assert info["num_listed"] == (info["num_written"] + info["num_rejected"]
                                  + info["num_duplicates"])  # fmt: skip
    rejected = [json.loads(x) for x in get(schema.REJECTED).decode().splitlines() if x]
    duplicates = [json.loads(x) for x in get(schema.DUPLICATES).decode().splitlines() if x]
    assert len(rejected) == info["num_rejected"] and len(duplicates) == info["num_duplicates"]
    assert all(r["path"].startswith(input_root) and r["reason"] for r in rejected)
    placement = {}
    written = 0
    for split, entry in info["splits"].items():
        for shard in entry["shards"]:
            assert shard["file"] in names
            data = get(shard["file"])
            assert len(data) == shard["num_bytes"]
            assert hashlib.sha256(data).hexdigest() == shard["sha256"]
            records = _records(data)
            assert len(records) == shard["num_examples"]
            for position, record in enumerate(records):
                ex = tf.train.Example.FromString(record).features.feature
                encoded = ex[schema.ENCODED].bytes_list.value[0]
                image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
                assert image.shape[0] == ex[schema.HEIGHT].int64_list.value[0]
                assert hashlib.sha256(encoded).hexdigest() == (
                    ex[schema.SHA256].bytes_list.value[0].decode()
                )
                filename = ex[schema.FILENAME].bytes_list.value[0].decode()
                assert filename.startswith(input_root), (filename, input_root)
                placement[filename[len(input_root) :]] = (split, shard["file"], position)
                written += 1
    assert written == info["num_written"] == len(placement)
    return placement


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict, int]:
    """A small local corpus: healthy JPEGs in <label>/ folders plus broken files."""
    d = tmp_path_factory.mktemp("corpus")
    summary = build_corpus(str(d), num_images=NUM_IMAGES, seed=3, long_side=(48, 80))
    listed = summary["images"] + len(summary["broken"]) + 2  # + png-as-jpg + duplicate
    return d, summary, listed


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> dict[str, tuple[str, str, int]]:
    """Placement of every image by a local -> local conversion (in this process: it is what the
    bucket runs are compared with, not what is under test)."""
    src, _, listed = corpus
    out = tmp_path_factory.mktemp("reference") / "ds"
    in_process(
        "convert", "--input", f"{src}/*/*.jpg", "--output", str(out), *CONVERT_ARGS,
        "--workers", "1",
    )  # fmt: skip
    placement = check_dataset(*_local_reader(out), input_root=f"{src}/", expected_listed=listed)
    # Placement comparisons mean something only with several shards per split, each used: with
    # one shard per split, a shard chosen by the wrong hash would place every image the same.
    info = json.loads((out / schema.DATASET_INFO).read_text())
    for split, entry in info["splits"].items():
        assert entry["num_shards"] >= 3, (split, entry["num_shards"])
        used = {shard for s, shard, _ in placement.values() if s == split}
        assert len(used) >= 3, (split, used)
    return placement


def _local_reader(out: Path) -> tuple[Callable[[str], bytes], list[str]]:
    names = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    return (lambda name: (out / name).read_bytes()), names


def _bucket_reader(store, bucket: str, prefix: str) -> tuple[Callable[[str], bytes], list[str]]:
    names = [k[len(prefix) :] for k in store.keys(bucket, prefix)]
    return (lambda name: store.get(store.uri(bucket, prefix + name))), names


# ---------------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------------


def test_bucket_to_bucket_matches_local_placement(store, corpus, reference):
    """One in-memory worker: worker processes, which must learn the S3 endpoint from the options
    (and the GCS emulator from the environment they inherit), are test_cloud_analyze's bucket ->
    bucket runs (two workers, default options, the same placement check)."""
    src, _, listed = corpus
    source, dest = store.new_bucket("src"), store.new_bucket("dst")
    put_corpus(store, source, src, "photos/")
    proc = _ok(
        run_cli(
            "--input",
            store.uri(source, "photos/*/*.jpg"),
            "--output",
            store.uri(dest, "ds"),
            *store.beam_args,
        )
    )
    assert store.uri(dest, "ds") in proc.stdout
    placement = check_dataset(
        *_bucket_reader(store, dest, "ds/"),
        input_root=store.uri(source, "photos/"),
        expected_listed=listed,
    )
    assert placement == reference


@pytest.fixture(scope="module")
def gcs_dataset(gcs, corpus) -> tuple[str, str]:
    """A local corpus converted into a bucket: (bucket, prefix of the dataset)."""
    src, _, _ = corpus
    dest = gcs.new_bucket("dst")
    convert_here("--input", f"{src}/**", "--output", gcs.uri(dest, "from-local"))
    return dest, "from-local/"


def test_local_to_gcs_and_back_to_local_keep_placement(gcs, gcs_dataset, corpus, reference,
                                                       tmp_path):  # fmt: skip
    src, _, listed = corpus
    dest, prefix = gcs_dataset
    placement = check_dataset(
        *_bucket_reader(gcs, dest, prefix), input_root=f"{src}/", expected_listed=listed
    )
    assert placement == reference

    source = gcs.new_bucket("src")
    put_corpus(gcs, source, src, "deep/copy/")
    out = tmp_path / "ds"
    convert_here("--input", gcs.uri(source, "deep/copy/**"), "--output", str(out))
    placement = check_dataset(
        *_local_reader(out), input_root=gcs.uri(source, "deep/copy/"), expected_listed=listed
    )
    assert placement == reference


_READ_ALL = """
import faulthandler, json, sys
faulthandler.dump_traceback_later(150, exit=True)  # a hang shows where, before the test's timeout
from pipeline.reader import make_dataset, steps_per_epoch
data_dir, counts = sys.argv[1], {}
for split in ("train", "validation"):
    ds = make_dataset(data_dir, split, global_batch_size=2, image_size=(32, 32))
    counts[split] = sum(int(labels.shape[0]) for _, labels in ds)
counts["steps"] = steps_per_epoch(data_dir, "train", global_batch_size=2)
print(json.dumps(counts))
"""


def test_reader_reads_the_dataset_from_gcs_with_tensorflows_filesystem(
    gcs, gcs_dataset, tensorflow_gcs_env, googleapis_front
):
    """pipeline/reader/dataset.py on gs:// goes through TensorFlow's GCS filesystem (not Beam)."""
    dest, prefix = gcs_dataset
    data_dir = gcs.uri(dest, prefix.rstrip("/"))
    info = json.loads(gcs.get(gcs.uri(dest, prefix + schema.DATASET_INFO)))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2", **tensorflow_gcs_env)
    # A healthy read takes seconds. It used to hang (1 run in 5 under xdist): TensorFlow's first
    # request stuck before any byte, as when the proxy stops accepting (its accept loop returned
    # on an accept() error; it now keeps serving, as Relay does). Should it recur, the child
    # dumps its stacks at 150 s and the message gives the relay's and the proxy's state.
    proc = subprocess.run(tf_script(_READ_ALL, data_dir), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=200)  # fmt: skip
    relay = gcs.relay
    state = f"relay up={relay._listener is not None} accepted={relay.accepted}; "  # noqa: SLF001
    state += googleapis_front.state()
    assert proc.returncode == 0, f"{state}\n{proc.stderr[-6000:]}"
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["train"] == info["splits"]["train"]["num_examples"]
    assert counts["validation"] == info["splits"]["validation"]["num_examples"]
    assert counts["steps"] == info["splits"]["train"]["num_examples"] // 2


def test_s3_to_local_with_manifest_in_the_bucket(s3, corpus, reference, tmp_path):
    """A JSONL manifest of relative paths next to the images; keys are relative to it."""
    src, _, listed = corpus
    source = s3.new_bucket("src")
    put_corpus(s3, source, src, "set/")
    rows = [
        {"path": str(p.relative_to(src)), "label": p.parent.name}
        for p in sorted(src.rglob("*"))
        if p.is_file()
    ]
    s3.put(
        s3.uri(source, "set/manifest.jsonl"), "".join(json.dumps(r) + "\n" for r in rows).encode()
    )
    out = tmp_path / "ds"
    convert_here("--manifest", s3.uri(source, "set/manifest.jsonl"), "--output", str(out),
                 *s3.beam_args)  # fmt: skip
    placement = check_dataset(
        *_local_reader(out), input_root=s3.uri(source, "set/"), expected_listed=listed
    )
    assert placement == reference


def test_clean_corpus_on_s3_writes_empty_reports(s3, tmp_path):
    """No rejects, no duplicates: rejected.jsonl and duplicates.jsonl are empty objects, which
    Beam's S3 writer cannot create (storage.write_bytes_atomic puts them itself)."""
    src = tmp_path / "clean"
    summary = build_corpus(str(src), num_images=5, seed=4, long_side=(40, 60), broken=False)
    source, dest = s3.new_bucket("src"), s3.new_bucket("dst")
    put_corpus(s3, source, src, "p/")
    convert_here("--input", s3.uri(source, "p/**"), "--output", s3.uri(dest, "ds"), *s3.beam_args)
    assert s3.get(s3.uri(dest, "ds/" + schema.REJECTED)) == b""
    assert s3.get(s3.uri(dest, "ds/" + schema.DUPLICATES)) == b""
    check_dataset(
        *_bucket_reader(s3, dest, "ds/"),
        input_root=s3.uri(source, "p/"),
        expected_listed=summary["images"],
    )
    assert s3.multipart_uploads(dest) == []


def test_s3_options_reach_the_preflight_listing(s3, corpus, tmp_path):
    src, _, listed = corpus
    source = s3.new_bucket("src")
    put_corpus(s3, source, src, "photos/")
    out = tmp_path / "ds"
    _ok(run_cli("--input", s3.uri(source, "photos/*/*.jpg"), "--output", str(out), *s3.beam_args))
    check_dataset(*_local_reader(out), input_root=s3.uri(source, "photos/"), expected_listed=listed)


# ---------------------------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------------------------


class _Watcher(threading.Thread):
    """Polls the output prefix directly on the server (not through the relay) during a run and
    keeps every version of every final-named file it sees."""

    def __init__(self, store, bucket: str, prefix: str):
        super().__init__(daemon=True)
        self.store, self.bucket, self.prefix = store, bucket, prefix
        self.seen: dict[str, set[bytes]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for key in self.store.keys(self.bucket, self.prefix):
                    name = key[len(self.prefix) :]
                    if name.rsplit("/", 1)[-1].startswith(".") or name.startswith(".imgrec/"):
                        continue  # temporary and bookkeeping files: not part of the dataset
                    self.seen.setdefault(name, set()).add(
                        self.store.get(self.store.uri(self.bucket, key))
                    )
            except Exception:  # noqa: BLE001 - the server is down for a while on purpose
                pass
            time.sleep(0.05)


# The outage starts after the run's first dozen connections to the server (past start-up and
# preflight, while listing and inspecting) and lasts 4 s: longer than one client retry, shorter
# than the clients' retry budgets (GCS: 120 s per call; S3: Beam's minutes-long backoff).
OUTAGE_AFTER_CONNECTIONS = 12
OUTAGE_S = 4.0


def _run_with_outage(store, corpus, stop: Callable[[], None], start: Callable[[], None]):
    """Convert bucket -> bucket with the server taken down for a while in the middle."""
    src, _, listed = corpus
    source, dest = store.new_bucket("src"), store.new_bucket("dst")
    put_corpus(store, source, src, "photos/")
    watcher = _Watcher(store, dest, "ds/")
    watcher.start()
    done = threading.Event()
    hit = []

    failed: list[BaseException] = []

    def outage() -> None:
        base = store.relay.accepted
        while store.relay.accepted < base + OUTAGE_AFTER_CONNECTIONS and not done.is_set():
            time.sleep(0.02)
        if done.is_set():
            return
        try:
            stop()
            hit.append(time.monotonic())
            time.sleep(OUTAGE_S)
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            failed.append(e)
        try:
            start()
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            failed.append(e)

    fault = threading.Thread(target=outage, daemon=True)
    fault.start()
    try:
        proc = run_cli(
            "--input",
            store.uri(source, "photos/*/*.jpg"),
            "--output",
            store.uri(dest, "ds"),
            *store.beam_args,
        )
    finally:
        done.set()
        fault.join()
        watcher.stop.set()
        watcher.join()
    assert not failed, f"the outage could not be staged: {failed[0]!r}"
    assert hit, "the run ended before the outage began"
    return proc, source, dest, listed, watcher.seen


def _assert_outcome(store, proc, source, dest, listed, seen, reference) -> None:
    """The run rode the outage out: exit 0 and a complete dataset, never a partial file in view.

    The outage (OUTAGE_S) is shorter than every retry budget (imgrec's ~7 s per read, the
    clients' own), so failing is a bug here, not an acceptable outcome: a store that stays down
    is tests/integration/test_storage_servers.py's (the outage breaker; its one line naming
    --resume: tests/unit/test_storage.py).
    """
    for name, versions in seen.items():
        if name.endswith(".tfrecord"):
            for data in versions:
                _records(data)  # whole files only: a torn shard fails its CRC/length checks
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    root = store.uri(source, "photos/")
    rejected = store.get(store.uri(dest, "ds/" + schema.REJECTED)).decode().splitlines()
    lost = {
        r["path"][len(root) :] for r in map(json.loads, rejected) if r["reason"] == "unreadable"
    }
    placement = check_dataset(
        *_bucket_reader(store, dest, "ds/"), input_root=root, expected_listed=listed
    )
    # Every image of the local run is written here too, or rejected as unreadable (with the
    # reason): an outage may cost images, never silently.
    assert set(reference) <= set(placement) | lost
    if not lost:
        assert placement == reference
    info = store.get(store.uri(dest, "ds/" + schema.DATASET_INFO))
    assert seen.get(schema.DATASET_INFO, {info}) == {info}


def test_gcs_server_restart_mid_run(own_gcs, corpus, reference):
    """The emulator process itself is stopped and started again on the same port (its objects
    are kept on disk; it is stopped between two of its own metadata writes, see
    `GcsServer.stop_process`)."""
    outcome = _run_with_outage(own_gcs, corpus, own_gcs.stop_process, own_gcs.start_process)
    _assert_outcome(own_gcs, *outcome, reference)


def test_s3_link_down_mid_run(s3, corpus, reference):
    """moto keeps its state in memory, so its link is cut instead (refused connections, open
    ones reset)."""
    outcome = _run_with_outage(s3, corpus, s3.relay.down, s3.relay.up)
    _assert_outcome(s3, *outcome, reference)
