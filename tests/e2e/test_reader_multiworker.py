"""The reader on a real two-worker MultiWorkerMirroredStrategy cluster: two TensorFlow processes
on 127.0.0.1, each with its own TF_CONFIG, CPU collectives over gRPC.

One cluster start serves every positive check (starting one costs ~15 s of CPU per worker on
2 cores): each worker runs the checks in order and writes what it saw to a JSON file, which the
tests assert on. The checks read converted splits of uneven shard sizes: 8 training shards
(more shards than pipelines), one validation shard (fewer), the same data under a versioned
root, and from s3:// through the shard cache, each worker with its own cache folder. Failure
clusters: a worker that loses its data, a worker killed mid-training; the survivor must stop
with an error, not wait forever. Keras' fit on the cluster is the example's own run
(examples/train_mirrored.py, started as a user starts it), not a check of the shared cluster: it
had both, the same `fit` twice (~8 s of CPU).

tests/unit/test_reader_shares.py checks the same split of records per input pipeline in process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core import schema
from pipeline.demo import build_corpus
from tests.runs import ROOT, cli_env, in_process, kill_running, tf_script
from tests.servers import free_port, put_corpus

pytestmark = pytest.mark.e2e

GLOBAL_BATCH = 10  # 5 per worker; the splits (64 and 6 examples) end in a partial batch
IMAGE_SIZE = 16
# Every wait on a worker: a whole cluster run takes ~60 s here with the machine to itself.
CLUSTER_TIMEOUT_S = 420
# What the workers pass to CommunicationOptions(timeout_seconds=...): a collective whose peer
# is gone fails after this long at most (the coordination service's heartbeats are often faster).
COLLECTIVE_TIMEOUT_S = 60

_WORKER = textwrap.dedent(
    """
    import json, os, sys, time
    import tensorflow as tf

    plan, out_path = json.loads(sys.argv[1]), sys.argv[2]
    options = tf.distribute.experimental.CommunicationOptions(
        timeout_seconds=plan["collective_timeout_s"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    task = strategy.cluster_resolver.task_id
    from pipeline.reader import dataset as reader
    from core import schema

    results = {"task": task, "replicas": strategy.num_replicas_in_sync, "checks": {}}

    def save():
        with open(out_path + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(out_path + ".tmp", out_path)

    def local(value):
        return [t for t in strategy.experimental_local_results(value)]

    def batch_names(batch):
        return [n.decode() for t in local(batch[2][schema.FILENAME]) for n in t.numpy()]

    @tf.function
    def train_step(images):
        # What a training step adds to reading: an all-reduce across the workers (here of the
        # pixel sum), so a worker that stops leaves its peer waiting in a collective.
        def replica_step(x):
            total = tf.reduce_sum(tf.cast(x, tf.float32))
            return tf.distribute.get_replica_context().all_reduce("SUM", total)
        return strategy.run(replica_step, args=(images,))

    save()
    for check in plan["checks"]:
        kwargs = dict(check.get("kwargs", {}))
        if "cache_dir" in kwargs:
            kwargs["cache_dir"] = os.path.join(kwargs["cache_dir"], f"worker{task}")
        data_dir, split = check["data_dir"], check["split"]
        if check["kind"] == "train":
            # Epochs are counted in steps: with deterministic=False (training's default)
            # parallel stages may hand out a batch of the next epoch before the last of this
            # one under load (docs/reader.md), which would read as a duplicate here.
            kwargs.setdefault("deterministic", True)
        ds = reader.make_dataset(data_dir, split, plan["batch"], strategy=strategy,
                                 image_size=plan["size"], extra_features=[schema.FILENAME],
                                 training=check["kind"] == "train", **kwargs)
        if check["kind"] == "eval":
            names, sizes = [], []
            for batch in ds:
                sizes.append([int(t.shape[0]) for t in local(batch[0])])
                names += batch_names(batch)
            result = {"names": names, "batch_sizes": sizes}
        else:
            if check.get("lose_data") and task == 1:
                # This worker's copy of the split loses the second half of every shard (a
                # disk, a sync gone wrong) after make_dataset listed it.
                folder = os.path.join(data_dir, split)
                for name in os.listdir(folder):
                    path = os.path.join(folder, name)
                    os.truncate(path, os.path.getsize(path) // 2)
            steps = reader.steps_per_epoch(data_dir, split, plan["batch"],
                                           s3_endpoint_url=kwargs.get("s3_endpoint_url"))
            iterator, epochs = iter(ds), []
            for epoch in range(check["epochs"]):
                names = []
                for _ in range(steps):
                    batch = next(iterator)
                    train_step(batch[0])
                    names += batch_names(batch)
                epochs.append(names)
                if check.get("ready_file"):
                    open(check["ready_file"] + str(task), "w").close()
            result = {"steps": steps, "epochs": epochs}
        results["checks"][check["name"]] = result
        save()
    # Finish together, as after fit: a worker still shutting down when the leader (task 0, the
    # coordination service) has exited waits minutes for it.
    strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
    print("WORKER DONE", task, flush=True)
    """
)


class Cluster:
    """Two worker processes of one MultiWorkerMirroredStrategy cluster on free loopback ports;
    stopped (killed) however the test ends."""

    def __init__(self, tmp: Path, plans: list[dict]):
        ports = [free_port(), free_port()]
        workers = [f"127.0.0.1:{port}" for port in ports]
        self.outputs = [tmp / f"worker{i}.json" for i in range(2)]
        self.logs = [tmp / f"worker{i}.log" for i in range(2)]
        self.procs: list[subprocess.Popen] = []
        for i, plan in enumerate(plans):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
            env = cli_env(
                TF_CONFIG=json.dumps(tf_config),
                CUDA_VISIBLE_DEVICES="",
                # An empty per-worker batch (the uneven end of an evaluation pass) breaks
                # oneDNN's CPU Conv2D in the Keras check; plain kernels handle it.
                TF_ENABLE_ONEDNN_OPTS="0",
            )
            with open(self.logs[i], "w") as log:
                self.procs.append(
                    subprocess.Popen(
                        tf_script(_WORKER, json.dumps(plan), str(self.outputs[i])),
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

    def wait(self, timeout: float = CLUSTER_TIMEOUT_S) -> list[int]:
        """Exit statuses, waiting at most `timeout` seconds in all (then the test fails)."""
        deadline = time.monotonic() + timeout
        codes = []
        for i, proc in enumerate(self.procs):
            try:
                codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pytest.fail(f"worker {i} still running after {timeout} s:\n{self.log(i)[-3000:]}")
        return codes

    def log(self, i: int) -> str:
        return self.logs[i].read_text(errors="replace")

    def result(self, i: int) -> dict:
        return json.loads(self.outputs[i].read_text())

    def stop(self) -> None:
        kill_running(self.procs)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _convert(src: str, out: str, *args: str) -> None:
    in_process("convert", "--input", f"{src}/*/*.jpg", "--output", out, *args)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    src = str(tmp_path_factory.mktemp("mw_corpus"))
    build_corpus(src, num_images=70, seed=35, long_side=(40, 64), broken=False)
    return src


@pytest.fixture(scope="module")
def converted(corpus, tmp_path_factory) -> tuple[str, dict]:
    """8 shards of uneven size (hash-assigned) per split: more shards than workers."""
    out = str(tmp_path_factory.mktemp("mw") / "ds")
    _convert(corpus, out, "--min_shards", "8", "--no_report")
    return out, schema.load_dataset_info(out)


@pytest.fixture(scope="module")
def versioned(corpus, tmp_path_factory) -> str:
    """The same corpus with the default shard sizes, --versioned: one shard per split, fewer
    shards than workers (each worker reads part of a shard). Returns the root. (No statistics
    or report: the reader reads neither; tests/e2e/test_cli.py runs the defaults.)"""
    root = str(tmp_path_factory.mktemp("mw_versioned") / "root")
    _convert(corpus, root, "--versioned", "--no_analyze", "--no_report")
    return root


@pytest.fixture(scope="module")
def on_s3(converted, s3) -> tuple[str, str]:
    """The 8-shard dataset copied to a bucket: (s3:// root, endpoint)."""
    local, _ = converted
    bucket = s3.new_bucket()
    put_corpus(s3, bucket, local, "ds/")
    return s3.uri(bucket, "ds"), s3.relay.url


def _names(info: dict, split: str, data_dir: str) -> list[str]:
    """Every source file of a split, from its shards."""
    import tensorflow as tf

    spec = schema.feature_spec((schema.FILENAME,))
    names = []
    for shard in info["splits"][split]["shards"]:
        for record in tf.data.TFRecordDataset(os.path.join(data_dir, shard["file"])):
            names.append(tf.io.parse_single_example(record, spec)[schema.FILENAME].numpy().decode())
    return names


@pytest.fixture(scope="module")
def cluster_run(converted, versioned, on_s3, tmp_path_factory) -> dict:
    """One two-worker cluster running every positive check; returns both workers' results."""
    local, _ = converted
    s3_root, endpoint = on_s3
    tmp = tmp_path_factory.mktemp("mw_run")
    s3_kwargs = {"cache_dir": str(tmp / "cache"), "s3_endpoint_url": endpoint}
    checks = [
        {"name": "train", "kind": "train", "data_dir": local, "split": "train", "epochs": 2},
        {"name": "eval", "kind": "eval", "data_dir": local, "split": "train"},
        {"name": "versioned_train", "kind": "train", "data_dir": versioned, "split": "train",
         "epochs": 2},
        {"name": "versioned_eval", "kind": "eval", "data_dir": versioned, "split": "validation"},
        {"name": "s3_train", "kind": "train", "data_dir": s3_root, "split": "train", "epochs": 1,
         "kwargs": s3_kwargs},
        {"name": "s3_eval", "kind": "eval", "data_dir": s3_root, "split": "train",
         "kwargs": s3_kwargs},
    ]  # fmt: skip
    plan = {
        "batch": GLOBAL_BATCH,
        "size": IMAGE_SIZE,
        "collective_timeout_s": COLLECTIVE_TIMEOUT_S,
        "checks": checks,
    }
    with Cluster(tmp, [plan, plan]) as cluster:
        codes = cluster.wait()
        logs = [cluster.log(0), cluster.log(1)]
        assert codes == [0, 0], f"exit {codes}\n{logs[0][-3000:]}\n{logs[1][-3000:]}"
        return {"workers": [cluster.result(0), cluster.result(1)], "logs": logs, "tmp": tmp}


def _together(run: dict, check: str, epoch: int | None = None) -> tuple[list[str], list[str]]:
    per_worker = [w["checks"][check] for w in run["workers"]]
    if epoch is not None:
        return per_worker[0]["epochs"][epoch], per_worker[1]["epochs"][epoch]
    return per_worker[0]["names"], per_worker[1]["names"]


def _latest(root: str) -> tuple[str, dict]:
    """(the version folder LATEST names, its dataset_info.json)."""
    from core import versions

    folder = versions.resolve_dataset_dir(root)
    return folder, schema.load_dataset_info(folder)


def test_the_splits_have_more_and_fewer_shards_than_workers(converted, versioned):
    _, info = converted
    counts = [s["num_examples"] for s in info["splits"]["train"]["shards"]]
    assert len(counts) == 8 and len(set(counts)) > 1  # uneven
    folder, latest = _latest(versioned)
    assert folder != versioned  # a version folder under the root
    assert [s["num_shards"] for s in latest["splits"].values()] == [1, 1]


@pytest.mark.parametrize("check", ["train", "versioned_train", "s3_train"])
def test_each_training_epoch_is_steps_times_the_global_batch_none_twice(
    cluster_run, converted, versioned, check
):
    info = _latest(versioned)[1] if check == "versioned_train" else converted[1]
    n = info["splits"]["train"]["num_examples"]
    result = cluster_run["workers"][0]["checks"][check]
    assert result["steps"] == n // GLOBAL_BATCH and n % GLOBAL_BATCH  # a remainder to drop
    for epoch in range(len(result["epochs"])):
        first, second = _together(cluster_run, check, epoch)
        # Both workers deliver the same number of batches: nobody waits for a missing one.
        assert len(first) == len(second) == result["steps"] * GLOBAL_BATCH // 2
        seen = first + second
        assert len(set(seen)) == len(seen) == result["steps"] * GLOBAL_BATCH, f"epoch {epoch}"


@pytest.mark.parametrize("check", ["train", "versioned_train"])
def test_the_next_epoch_is_reshuffled(cluster_run, check):
    epochs = [_together(cluster_run, check, e) for e in (0, 1)]
    assert epochs[0][0] + epochs[0][1] != epochs[1][0] + epochs[1][1]
    if check == "train":
        # Not only the order within each worker: which worker reads which example changes too.
        assert set(epochs[0][0]) != set(epochs[1][0])


@pytest.mark.parametrize(
    ("check", "split"),
    [("eval", "train"), ("versioned_eval", "validation"), ("s3_eval", "train")],
)
def test_evaluation_reads_every_example_exactly_once(
    cluster_run, converted, versioned, check, split
):
    data_dir, info = _latest(versioned) if check == "versioned_eval" else converted
    first, second = _together(cluster_run, check)
    assert sorted(first + second) == sorted(_names(info, split, data_dir))
    # Each worker reads a contiguous half of the records (sizes differ by at most one); the
    # last batch of each is partial, and a worker out of data gets an empty batch while the
    # other finishes (TensorFlow's distributed iterator), so nothing is dropped or repeated.
    assert abs(len(first) - len(second)) <= 1
    sizes = [cluster_run["workers"][w]["checks"][check]["batch_sizes"] for w in (0, 1)]
    assert len(sizes[0]) == len(sizes[1])  # the same number of steps on both workers
    assert sum(s for worker in sizes for step in worker for s in step) == len(first + second)
    assert len(first + second) % GLOBAL_BATCH  # the split does end in a partial batch


def test_each_worker_fills_its_own_shard_cache(cluster_run, converted):
    _, info = converted
    cache = cluster_run["tmp"] / "cache"
    per_worker = [
        sorted(p.name for p in (cache / f"worker{i}").rglob("*.tfrecord")) for i in (0, 1)
    ]
    shards = {os.path.basename(s["file"]) for s in info["splits"]["train"]["shards"]}
    # Evaluation and one training epoch: each worker downloaded what it read, not the split
    # twice over in one folder; together every shard.
    assert per_worker[0] and per_worker[1]
    assert set(per_worker[0]) | set(per_worker[1]) == shards


def test_a_worker_that_loses_its_data_stops_and_so_does_its_peer(converted, tmp_path):
    """Worker 1's copy of the split loses half of each shard once its dataset is made: it
    fails naming a shard, and worker 0, waiting in a collective for it, fails too instead of
    hanging."""
    local, _ = converted
    plans = []
    for i in (0, 1):
        own = tmp_path / f"data{i}"  # each worker its own copy, as on two hosts
        shutil.copytree(local, own)
        check = {"name": "train", "kind": "train", "data_dir": str(own), "split": "train",
                 "epochs": 3, "lose_data": True}  # fmt: skip
        plans.append({"batch": GLOBAL_BATCH, "size": IMAGE_SIZE,
                      "collective_timeout_s": COLLECTIVE_TIMEOUT_S, "checks": [check]})  # fmt: skip
    with Cluster(tmp_path, plans) as cluster:
        codes = cluster.wait(timeout=COLLECTIVE_TIMEOUT_S + 240)
        logs = [cluster.log(0), cluster.log(1)]
    assert codes[0] != 0 and codes[1] != 0, f"exit {codes}\n{logs[0][-2000:]}"
    assert "WORKER DONE" not in logs[0] + logs[1]
    assert "imgrec reader: shard " in logs[1] and "is corrupt" in logs[1], logs[1][-3000:]
    assert str(tmp_path / "data1" / "train") in logs[1]  # the shard, named
    assert "UnavailableError" in logs[0] or "DeadlineExceeded" in logs[0], logs[0][-3000:]


def test_a_worker_whose_peer_is_killed_stops_with_an_error(converted, tmp_path):
    """Worker 0 (which also hosts TensorFlow's coordination service) is killed mid-training,
    as a preempted host is; worker 1 must exit with an error within the collective timeout."""
    local, _ = converted
    ready = str(tmp_path / "ready")
    check = {"name": "train", "kind": "train", "data_dir": local, "split": "train",
             "epochs": 200, "ready_file": ready}  # fmt: skip
    plan = {"batch": GLOBAL_BATCH, "size": IMAGE_SIZE,
            "collective_timeout_s": COLLECTIVE_TIMEOUT_S, "checks": [check]}  # fmt: skip
    with Cluster(tmp_path, [plan, plan]) as cluster:
        deadline = time.monotonic() + CLUSTER_TIMEOUT_S
        while not os.path.exists(ready + "0"):
            assert cluster.procs[0].poll() is None, cluster.log(0)[-3000:]
            assert time.monotonic() < deadline, "worker 0 never finished an epoch"
            time.sleep(0.5)
        cluster.procs[0].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            code = cluster.procs[1].wait(timeout=COLLECTIVE_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker 1 still waiting for its dead peer:\n{cluster.log(1)[-3000:]}")
        waited = time.monotonic() - killed_at
        log = cluster.log(1)
    assert code != 0 and "WORKER DONE" not in log
    assert "UnavailableError" in log or "DeadlineExceeded" in log, log[-3000:]
    assert waited < COLLECTIVE_TIMEOUT_S + 60


# The end of an epoch in Keras' progress output: the training and the validation metrics.
_EPOCH_END = re.compile(r" - loss: (\S+) - accuracy: \S+ - val_loss: (\S+) - val_accuracy: ")


def test_the_example_runs_as_one_worker_of_a_cluster(converted, tmp_path):
    """examples/train_mirrored.py, started twice as docs/training.md says (a TF_CONFIG each),
    trains and validates on both workers, Keras' fit over MultiWorkerMirroredStrategy: two
    epochs each, one model trained in sync (both workers print the same losses)."""
    local, _ = converted
    ports = [free_port(), free_port()]
    workers = [f"127.0.0.1:{port}" for port in ports]
    procs, logs = [], [tmp_path / f"example{i}.log" for i in (0, 1)]
    try:
        for i in (0, 1):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
            with open(logs[i], "w") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "examples/train_mirrored.py",
                            "--data_dir",
                            local,
                            "--epochs",
                            "2",
                            "--batch_size",
                            str(GLOBAL_BATCH),
                            "--image_size",
                            str(IMAGE_SIZE),
                            "--seed",
                            "0",
                            "--collective_timeout",
                            str(COLLECTIVE_TIMEOUT_S),
                        ],
                        cwd=ROOT,
                        env=cli_env(TF_CONFIG=json.dumps(tf_config), CUDA_VISIBLE_DEVICES=""),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )  # fmt: skip
                )
        codes = [proc.wait(timeout=CLUSTER_TIMEOUT_S) for proc in procs]
    finally:
        kill_running(procs)
    outputs = [log.read_text(errors="replace") for log in logs]
    assert codes == [0, 0], f"exit {codes}\n{outputs[0][-3000:]}\n{outputs[1][-3000:]}"
    for output in outputs:
        assert "replicas in sync: 2" in output
    losses = [_EPOCH_END.findall(output) for output in outputs]
    assert len(losses[0]) == 2, outputs[0][-3000:]  # validation ran after each epoch
    assert losses[0] == losses[1], losses
