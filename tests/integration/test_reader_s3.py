"""The reader on s3:// (moto's S3 server on 127.0.0.1) through the verified local shard cache.

GET requests are counted by the server itself: this module runs its own moto server with moto's
request recorder writing to a temp file (the shared `s3` fixture's server records nothing).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from core import schema, shard_cache, stores
from pipeline.reader import dataset as reader
from tests.runs import ROOT as ROOT_PATH
from tests.runs import tf_script
from tests.servers import (
    HOST,
    Relay,
    S3Server,
    ServerProcess,
    _s3_error,
    _server_main,
    free_port,
)
from tests.unit.test_reader import IMAGE_SIZE, write_dataset

REPO = str(ROOT_PATH)
# "validation/validation-0000i-of-00003.tfrecord"
VAL_SHARDS = [schema.shard_name("validation", i, 3) for i in range(3)]


class RecordedS3(S3Server):
    """moto with its request recorder on: `shard_gets()` counts GETs of shard objects."""

    recording: Path = Path()

    def _api(self, name: str) -> None:
        url = f"{self.server.url}/moto-api/recorder/{name}"
        urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10).read()

    def reset(self) -> None:
        self._api("reset-recording")
        self._api("start-recording")

    def requests(self) -> list[tuple[str, str, bool]]:
        """(method, path, ranged) of every S3 request since reset()."""
        if not self.recording.exists():
            return []
        out = []
        for line in self.recording.read_text().splitlines():
            entry = json.loads(line)
            ranged = any(k.lower() == "range" for k in entry["headers"])
            out.append((entry["method"], urllib.parse.urlsplit(entry["url"]).path, ranged))
        return out

    def shard_gets(self) -> list[str]:
        """Paths of whole-shard GETs (ranged ones are the reader's image-size sample)."""
        gets = [(p, r) for m, p, r in self.requests() if m == "GET" and p.endswith(".tfrecord")]
        return [p for p, ranged in gets if not ranged]

    def shard_samples(self) -> list[str]:
        gets = [(p, r) for m, p, r in self.requests() if m == "GET" and p.endswith(".tfrecord")]
        return [p for p, ranged in gets if ranged]


@pytest.fixture(scope="module")
def s3rec(cloud_env, tmp_path_factory) -> RecordedS3:  # noqa: F811 - fixture argument
    root = tmp_path_factory.mktemp("s3rec")
    port = free_port()
    server = ServerProcess(
        "moto_server",
        [*_server_main("s3"), "-H", HOST, "-p", str(port)],
        port,
        "/",
        root / "server.log",
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MOTO_RECORDER_FILEPATH", str(root / "requests.jsonl"))
        server.start()
    relay = Relay(port, _s3_error)
    store = RecordedS3("s3", server, relay)
    store.recording = root / "requests.jsonl"
    try:
        yield store
    finally:
        relay.down()
        server.stop()


def _upload(store: RecordedS3, local: str, uri: str, flip: str | None = None) -> None:
    """Copy a local dataset folder to `uri`; with `flip`, that file gets one byte inverted."""
    for folder, _, files in os.walk(local):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, local).replace(os.sep, "/")
            data = bytearray(Path(path).read_bytes())
            if rel == flip:
                data[len(data) // 2] ^= 0xFF
            store.put(f"{uri}/{rel}", bytes(data))


@pytest.fixture(scope="module")
def datasets(s3rec, tmp_path_factory) -> dict:
    local = write_dataset(str(tmp_path_factory.mktemp("local_ds")))
    bucket = s3rec.new_bucket()
    good = s3rec.uri(bucket, "ds")
    bad = s3rec.uri(bucket, "corrupt")
    _upload(s3rec, local, good)
    _upload(s3rec, local, bad, flip=VAL_SHARDS[1])
    return {"local": local, "s3": good, "corrupt": bad, "endpoint": s3rec.relay.url}


# ---------------------------------------------------------------- two replicas, own process

_MIRRORED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    from pipeline.reader import dataset as reader
    from core import schema

    local_dir, s3_dir, endpoint, cache_dir = sys.argv[1:5]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def epoch(data_dir, **kw):
        ds = reader.make_dataset(data_dir, "validation", 8, strategy=strategy,
                                 image_size=(24, 32), extra_features=[schema.FILENAME], **kw)
        images, labels, names = [], [], []
        for batch_images, batch_labels, extras in ds:
            for part in strategy.experimental_local_results(batch_images):
                images.append(part.numpy())
            for part in strategy.experimental_local_results(batch_labels):
                labels += part.numpy().tolist()
            for part in strategy.experimental_local_results(extras[schema.FILENAME]):
                names += [n.decode() for n in part.numpy()]
        return np.concatenate(images), labels, names

    s3 = epoch(s3_dir, cache_dir=cache_dir, s3_endpoint_url=endpoint)
    local = epoch(local_dir)
    train = reader.make_dataset(s3_dir, "train", 8, strategy=strategy, training=True,
                                image_size=(24, 32), seed=0, cache_dir=cache_dir,
                                s3_endpoint_url=endpoint)
    shapes = [list(t.shape) for t in strategy.experimental_local_results(next(iter(train))[0])]
    out = {
        "replicas": strategy.num_replicas_in_sync,
        "s3_names": s3[2],
        "local_names": local[2],
        "same_images": bool(s3[0].shape == local[0].shape and np.array_equal(s3[0], local[0])),
        "same_labels": s3[1] == local[1],
        "train_shapes": shapes,
        "steps": reader.steps_per_epoch(s3_dir, "validation", 8, drop_remainder=False,
                                        s3_endpoint_url=endpoint),
        "beam_imported": "apache_beam" in sys.modules,
    }
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def mirrored(s3rec, datasets, tmp_path_factory) -> dict:
    cache_dir = str(tmp_path_factory.mktemp("cache"))
    s3rec.reset()
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        tf_script(
            _MIRRORED_SCRIPT, datasets["local"], datasets["s3"], datasets["endpoint"], cache_dir
        ),
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return {
        "result": json.loads(line[len("RESULT ") :]),
        "gets": s3rec.shard_gets(),
        "cache_dir": cache_dir,
    }


@pytest.mark.e2e  # a fresh TensorFlow process (MirroredStrategy or TF's own filesystem)
def test_mirrored_s3_evaluation_epoch_matches_the_local_copy(mirrored):
    result = mirrored["result"]
    assert result["replicas"] == 2
    names = result["s3_names"]
    assert len(names) == 21 and len(set(names)) == 21  # every example once
    assert names == result["local_names"]
    assert result["same_images"] and result["same_labels"]
    assert result["steps"] == 3
    assert result["train_shapes"] == [[4, 24, 32, 3], [4, 24, 32, 3]]
    assert result["beam_imported"] is False  # s3:// goes through boto3


@pytest.mark.e2e  # a fresh TensorFlow process (MirroredStrategy or TF's own filesystem)
def test_each_shard_is_downloaded_once_into_the_cache(mirrored, datasets):
    gets = mirrored["gets"]
    # 3 validation shards for the evaluation epoch, then the training shards the first
    # training batch needed (at most all 4); none twice.
    assert sorted(g for g in gets if "/validation/" in g) == sorted(
        f"/{datasets['s3'][len('s3://') :]}/{rel}" for rel in VAL_SHARDS
    )
    assert len(gets) == len(set(gets))
    cached = list(Path(mirrored["cache_dir"]).rglob("validation-*"))
    assert sorted(p.name for p in cached if p.suffix == ".tfrecord") == [
        os.path.basename(rel) for rel in VAL_SHARDS
    ]
    assert not [p for p in cached if shard_cache._TEMP_MARK in p.name]


@pytest.mark.e2e  # a fresh TensorFlow process (MirroredStrategy or TF's own filesystem)
def test_second_make_dataset_on_the_same_cache_downloads_nothing(s3rec, datasets, mirrored):
    s3rec.reset()
    ds = reader.make_dataset(
        datasets["s3"],
        "validation",
        8,
        image_size=IMAGE_SIZE,
        cache_dir=mirrored["cache_dir"],
        s3_endpoint_url=datasets["endpoint"],
    )
    labels = [int(x) for _, batch in ds for x in batch.numpy()]
    assert len(labels) == 21
    assert s3rec.shard_gets() == []
    # What it did ask the server: whether a LATEST pointer makes it a versioned root (one
    # HEAD), dataset_info.json, and one listing of the split's folder.
    requests = s3rec.requests()
    assert len(requests) == 3, requests
    assert [m for m, p, _ in requests if p.endswith("/LATEST")] == ["HEAD"]
    assert [p for _, p, _ in requests if p.endswith(schema.DATASET_INFO)]


def test_corrupt_shard_is_caught_by_its_sha256(datasets, tmp_path):
    ds = reader.make_dataset(
        datasets["corrupt"],
        "validation",
        8,
        image_size=IMAGE_SIZE,
        cache_dir=str(tmp_path),
        s3_endpoint_url=datasets["endpoint"],
    )
    bad = f"{datasets['corrupt']}/{VAL_SHARDS[1]}"
    with pytest.raises(tf.errors.OpError, match=rf"shard {bad} is corrupt .*sha256"):
        list(ds)
    names = [p.name for p in tmp_path.rglob("*")]
    assert os.path.basename(VAL_SHARDS[1]) not in names
    assert not [n for n in names if shard_cache._TEMP_MARK in n]


def test_read_that_fails_midway_leaves_no_shard_under_its_final_name(
    s3rec, datasets, tmp_path, monkeypatch, caplog
):
    """The server goes away after the first MB of a 32 MB shard: no final name, no temp file."""
    bucket = s3rec.new_bucket()
    uri = s3rec.uri(bucket, "big")
    big = np.random.default_rng(0).bytes(32 << 20)
    local = Path(write_dataset(str(tmp_path / "big_local"), splits={"validation": (6, 1)}))
    info = json.loads((local / schema.DATASET_INFO).read_text())
    entry = info["splits"]["validation"]["shards"][0]
    entry["num_bytes"], entry["sha256"] = len(big), hashlib.sha256(big).hexdigest()
    (local / entry["file"]).write_bytes(big)
    (local / schema.DATASET_INFO).write_text(json.dumps(info))
    _upload(s3rec, str(local), uri)

    real_open = stores._S3Store.open

    class StopServerAfterFirstChunk:
        def __init__(self, body):
            self.body, self.reads = body, 0

        def read(self, n=-1):
            self.reads += 1
            if self.reads == 2:
                s3rec.relay.down()  # the server stops while the shard is streaming
            return self.body.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.body.close()

    monkeypatch.setattr(
        stores._S3Store,
        "open",
        lambda self, u: (
            StopServerAfterFirstChunk(real_open(self, u))
            if u.endswith(".tfrecord")
            else real_open(self, u)
        ),
    )
    monkeypatch.setattr(shard_cache, "_RETRY_BACKOFF_S", 0.1)
    cache = tmp_path / "cache"
    ds = reader.make_dataset(
        uri,
        "validation",
        2,
        image_size=IMAGE_SIZE,
        cache_dir=str(cache),
        s3_endpoint_url=datasets["endpoint"],
        jpeg_dct_scaling=False,  # no size sampling: the shard is not read in make_dataset
    )
    try:
        with pytest.raises(tf.errors.OpError, match=rf"could not copy shard {uri}/validation/"):
            list(ds)
    finally:
        s3rec.relay.heal()
    # The first attempt broke off inside the body (botocore says "N read, but total bytes
    # expected is 33554432" or "... while reading from response stream ... reset"); the
    # retries found the server gone.
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert re.search(
        r"total bytes expected is 33554432|while reading from response stream", retries[0]
    ), retries
    files = [p.name for p in cache.rglob("*") if p.is_file()]
    assert files == []  # neither the final name nor a partial temp file


def test_cache_without_room_fails_with_the_space_needed(datasets, tmp_path, monkeypatch):
    free = 1000
    monkeypatch.setattr(shard_cache.shutil, "disk_usage", lambda _: type("U", (), {"free": free})())
    needed = json.loads(Path(datasets["local"], schema.DATASET_INFO).read_text())["splits"][
        "train"
    ]["num_bytes"]
    with pytest.raises(shard_cache.ShardCacheError) as err:
        reader.make_dataset(
            datasets["s3"],
            "train",
            8,
            cache_dir=str(tmp_path),
            s3_endpoint_url=datasets["endpoint"],
        )
    message = str(err.value)
    assert "\n" not in message
    assert f"more ({needed} bytes, 4 shards;" in message
    assert message.startswith(f"cache_dir {tmp_path}") and "1.0 kB free" in message


def test_steps_per_epoch_and_split_files_on_s3(datasets):
    endpoint = datasets["endpoint"]
    assert reader.steps_per_epoch(datasets["s3"], "train", 8, s3_endpoint_url=endpoint) == 7
    split_info, shards = reader.split_files(datasets["s3"], "train", s3_endpoint_url=endpoint)
    assert split_info["num_examples"] == 60
    assert [s.path for s in shards] == [
        f"{datasets['s3']}/{schema.shard_name('train', i, 4)}" for i in range(4)
    ]


def test_each_input_pipeline_downloads_only_the_shards_it_reads(s3rec, datasets, tmp_path):
    """Two input pipelines (as a multi-worker strategy makes them) each fetch their half; the
    image-size sample (the test data has no statistics) is one ranged GET, not a download."""
    bucket_path = datasets["s3"][len("s3://") :]
    seen = {}
    for pipeline_id in (0, 1):
        s3rec.reset()
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        ds = reader.make_dataset(
            datasets["s3"],
            "train",
            8,
            input_context=ctx,
            image_size=IMAGE_SIZE,
            extra_features=[schema.FILENAME],
            cache_dir=str(tmp_path / f"worker{pipeline_id}"),
            s3_endpoint_url=datasets["endpoint"],
        )
        seen[pipeline_id] = [f.decode() for _, _, x in ds for f in x[schema.FILENAME].numpy()]
        # 4 shards of 15: each pipeline's half of the 60 records is two whole shards.
        mine = [
            f"/{bucket_path}/{schema.shard_name('train', i, 4)}"
            for i in (2 * pipeline_id, 2 * pipeline_id + 1)
        ]
        assert sorted(s3rec.shard_gets()) == mine
        assert s3rec.shard_samples() == [f"/{bucket_path}/{schema.shard_name('train', 0, 4)}"]
        cached = sorted(p.name for p in (tmp_path / f"worker{pipeline_id}").rglob("*.tfrecord"))
        assert cached == sorted(os.path.basename(p) for p in mine)
    assert len(seen[0]) + len(seen[1]) == 60 and not set(seen[0]) & set(seen[1])


def test_cached_shards_without_note_are_hashed_and_changed_ones_downloaded_again(
    s3rec, datasets, mirrored, tmp_path
):
    """A copy whose .verified note is missing is hashed once (no GET); one edited on disk after
    it was verified (size/mtime no longer match its note) is downloaded again."""
    cache = tmp_path / "cache"
    shutil.copytree(mirrored["cache_dir"], cache)
    first, second = (next(cache.rglob(os.path.basename(rel))) for rel in VAL_SHARDS[:2])
    Path(f"{first}.verified").unlink()
    data = bytearray(second.read_bytes())
    data[100] ^= 0xFF
    second.write_bytes(bytes(data))
    s3rec.reset()
    ds = reader.make_dataset(
        datasets["s3"],
        "validation",
        8,
        image_size=IMAGE_SIZE,
        cache_dir=str(cache),
        s3_endpoint_url=datasets["endpoint"],
    )
    assert sum(int(b.shape[0]) for _, b in ds) == 21
    assert [os.path.basename(p) for p in s3rec.shard_gets()] == [second.name]
    assert Path(f"{first}.verified").exists()
    assert (
        hashlib.sha256(second.read_bytes()).hexdigest()
        == json.loads(Path(datasets["local"], schema.DATASET_INFO).read_text())["splits"][
            "validation"
        ]["shards"][1]["sha256"]
    )


def test_mirror_copies_a_folder_such_as_the_transform_export(s3rec, datasets, tmp_path):
    uri = datasets["s3"]
    s3rec.put(f"{uri}/transform_fn/saved_model.pb", b"model")
    s3rec.put(f"{uri}/transform_fn/variables/variables.index", b"index")
    store = shard_cache.open_store(uri, datasets["endpoint"])
    cache = shard_cache.ShardCache(store, uri, "train", [], str(tmp_path))
    root = Path(cache.mirror("transform_fn"))
    assert (root / "transform_fn" / "saved_model.pb").read_bytes() == b"model"
    assert (root / "transform_fn" / "variables" / "variables.index").read_bytes() == b"index"


def test_first_batch_comes_before_the_whole_split_is_local(s3rec, tmp_path, monkeypatch):
    """20 shards of 2 images; downloads of shards 8-19 are held back until the first batch of 8
    (round-robin over the first 8 shards) has arrived: reading does not wait for the split."""
    local = write_dataset(str(tmp_path / "many"), splits={"validation": (40, 20)})
    uri = s3rec.uri(s3rec.new_bucket(), "many")
    _upload(s3rec, local, uri)
    gate = threading.Event()
    real_download = shard_cache.ShardCache._download

    def gated(self, shard_uri, tmp):
        if int(re.search(r"validation-(\d+)-of", shard_uri).group(1)) >= 8:
            gate.wait(timeout=120)
        return real_download(self, shard_uri, tmp)

    monkeypatch.setattr(shard_cache.ShardCache, "_download", gated)
    ds = reader.make_dataset(
        uri,
        "validation",
        8,
        image_size=IMAGE_SIZE,
        cache_dir=str(tmp_path / "cache"),
        s3_endpoint_url=s3rec.relay.url,
        jpeg_dct_scaling=False,
    )
    it = iter(ds)
    first = []
    reader_thread = threading.Thread(target=lambda: first.append(next(it)), daemon=True)
    reader_thread.start()
    reader_thread.join(timeout=90)
    try:
        assert first, "no first batch while shards 8-19 were still downloading"
        assert int(first[0][0].shape[0]) == 8
        local_now = list((tmp_path / "cache").rglob("*.tfrecord"))
        assert len(local_now) == 8  # exactly the first 8 shards are local
    finally:
        gate.set()
    rest = sum(int(batch.shape[0]) for _, batch in it)
    assert 8 + rest == 40
