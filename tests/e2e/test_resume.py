"""A training job killed with SIGKILL at a random step of an epoch and restarted with the same
script resumes mid-epoch: across the killed and the resumed run, every example of the
interrupted epoch is trained on exactly once, each global step holds the examples an
uninterrupted run's step holds, and the next epoch is a new permutation.

The job is a real training script in fresh processes, as a user writes it: a custom loop with
`tf.train.Checkpoint` (no strategy; MirroredStrategy on 2 logical CPUs; 2 MultiWorkerMirroredStrategy
workers on 127.0.0.1; 2 workers then 1 or 4, elastic) and Keras `fit` with `BackupAndRestore`. Each
step's example ids are logged (the label is the example's index) with the step they belong to;
the steps a checkpoint had not saved when the job was killed are trained again after the
restart, so the run's steps are those of the killed run before the restored step and all of
the resumed run's.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import schema
from tests.runs import ROOT, TF_PRELUDE, cli_env, kill_running
from tests.servers import free_port

pytestmark = pytest.mark.e2e

NUM_EXAMPLES = 300
SHARDS = (40, 75, 35, 60, 90)  # uneven, 300 in all
GLOBAL_BATCH = 16  # 18 steps per epoch, 12 examples dropped
STEPS = NUM_EXAMPLES // GLOBAL_BATCH
EPOCHS = 2
SAVE_EVERY = 3  # steps between checkpoints: a kill loses up to 2 steps, trained again
TIMEOUT_S = 300

# The training script: a custom loop (or Keras fit) that logs, per global step, the example ids
# this process trained on, and after step `kill_at` says so and waits to be killed with SIGKILL.
# The test kills every worker once all have said so: a worker that killed itself could close
# its peer's collective mid-step, and the peer would fail (UnavailableError) instead of dying.
_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    plan = json.loads(sys.argv[1])
    kind = plan["strategy"]
    import tensorflow as tf
    if kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
    elif kind == "multiworker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(timeout_seconds=60))
    else:
        strategy = tf.distribute.get_strategy()
    worker = strategy.cluster_resolver.task_id if kind == "multiworker" else 0
    from pipeline.reader import backup_and_restore, make_dataset, resume_callback, steps_per_epoch
    steps = steps_per_epoch(plan["data_dir"], "train", plan["batch"])
    log = open(plan["log"], "a")

    def record(step, labels, part=worker):
        row = {"step": int(step), "part": int(part), "ids": [int(v) for v in labels]}
        log.write(json.dumps(row) + "\\n")
        log.flush()
        if int(step) == plan["kill_at"]:
            print("KILL ME", flush=True)
            time.sleep(3600)

    if plan["keras"]:
        import keras
        with strategy.scope():
            model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                      keras.layers.Dense(plan["classes"])])
            optimizer = keras.optimizers.SGD(0.01)

            # What each step trained on, as the loss sees it (y is the example id), per replica;
            # the step read before it starts (in the step's graph, a read of the optimizer's
            # step may come after its increment).
            current = [0]
            def loss(y, logits):
                context = tf.distribute.get_replica_context()
                replica = context.replica_id_in_sync_group if context else 0
                tf.py_function(lambda r, y: record(current[0], y.numpy(), r), [replica, y], [])
                return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)

            model.compile(optimizer=optimizer, loss=loss)
        resume = resume_callback(steps)
        ds = make_dataset(plan["data_dir"], "train", plan["batch"], strategy=strategy, training=True,
                          image_size=8, seed=plan["seed"], start_step=resume.start_step)
        backup = backup_and_restore(plan["ckpt"], plan["save_every"])
        step_begins = keras.callbacks.LambdaCallback(
            on_train_batch_begin=lambda *_, **__: current.__setitem__(0, int(optimizer.iterations.numpy())))
        model.fit(ds, epochs=plan["epochs"], steps_per_epoch=steps, verbose=0,
                  callbacks=[backup, resume, step_begins])
    else:
        with strategy.scope():
            weights = tf.Variable(tf.zeros([3]))
            step = tf.Variable(0, dtype=tf.int64)
        ckpt_dir = os.path.join(plan["ckpt"], f"worker{worker}")
        checkpoint = tf.train.Checkpoint(weights=weights, step=step)
        manager = tf.train.CheckpointManager(checkpoint, ckpt_dir, max_to_keep=1)
        # Every worker restores the chief's checkpoint: a resumed cluster may have more workers.
        latest = tf.train.latest_checkpoint(os.path.join(plan["ckpt"], "worker0"))
        if latest:
            checkpoint.restore(latest)
        print("RESTORED", int(step.numpy()), flush=True)
        ds = make_dataset(plan["data_dir"], "train", plan["batch"], strategy=strategy, training=True,
                          image_size=8, seed=plan["seed"], start_step=int(step.numpy()),
                          task=plan.get("task", "classification"))

        @tf.function
        def train_step(images):
            def replica(x):
                return tf.reduce_mean(tf.cast(x, tf.float32), axis=[0, 1, 2])
            mean = strategy.reduce("MEAN", strategy.run(replica, args=(images,)), axis=None)
            weights.assign_add(0.001 * mean)
            step.assign_add(1)

        iterator = iter(ds)
        while int(step.numpy()) < plan["epochs"] * steps:
            images, labels = next(iterator)
            if isinstance(labels, dict):  # detection: each record's one object names it
                parts = [t[:, 0] - 1 for t in strategy.experimental_local_results(labels["classes"])]
            else:
                parts = strategy.experimental_local_results(labels)
            current = int(step.numpy())
            ids = [v for t in parts for v in t.numpy()]
            train_step(images)
            if int(step.numpy()) % plan["save_every"] == 0:
                manager.save()
            record(current, ids)
    print("TRAINING DONE", flush=True)
    """
)


def _one_object(index: int) -> dict:
    """One box over the whole image whose class is the example's index + 1: the detection
    task's targets name each example as the label does (a crop always keeps a whole object)."""
    sides = dict(zip(schema.OBJECT_BBOX.values(), ([0.0], [0.0], [1.0], [1.0]), strict=True))
    return {
        **sides,
        schema.SOURCE_ID: str(index),
        schema.OBJECT_LABEL: [index + 1],
        schema.OBJECT_TEXT: [str(index)],
        schema.OBJECT_AREA: [120.0],
        schema.OBJECT_IS_CROWD: [0],
        schema.OBJECT_DIFFICULT: [0],
        schema.OBJECT_TRUNCATED: [0],
    }


def _write_split(root: Path) -> str:
    """Shards of tiny JPEGs whose label is the example's index, and their dataset_info.json."""
    (root / "train").mkdir(parents=True)
    shards, index = [], 0
    rng = np.random.default_rng(0)
    for s, count in enumerate(SHARDS):
        rel = schema.shard_name("train", s, len(SHARDS), "")
        with tf.io.TFRecordWriter(str(root / rel)) as writer:
            for _ in range(count):
                path = root / "img.jpg"
                Image.fromarray(rng.integers(0, 255, (10, 12, 3), np.uint8)).save(path)
                writer.write(
                    schema.make_example(
                        encoded=path.read_bytes(), image_format="jpeg", height=10, width=12,
                        channels=3, label=index, label_text=str(index),
                        filename=f"mem://{index:04d}", sha256="", extra=_one_object(index),
                    )
                )  # fmt: skip
                index += 1
        size = (root / rel).stat().st_size
        shards.append({"file": rel, "num_examples": count, "num_bytes": size, "sha256": ""})
    info = {
        "schema_version": schema.SCHEMA_VERSION,
        "label_names": [str(i) for i in range(NUM_EXAMPLES)],
        "splits": {"train": {"num_examples": NUM_EXAMPLES, "shards": shards,
                             "num_bytes": sum(s["num_bytes"] for s in shards)}},
        "annotations": {"splits": {"train": {"max_per_image": 1}}},
    }  # fmt: skip
    (root / schema.DATASET_INFO).write_text(json.dumps(info))
    return str(root)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> str:
    return _write_split(tmp_path_factory.mktemp("resume_split"))


@pytest.fixture(scope="module")
def uninterrupted(data_dir) -> list[list[int]]:
    """Each global step's example ids, in order, of a run that was never stopped."""
    from pipeline.reader import make_dataset

    ds = make_dataset(data_dir, "train", GLOBAL_BATCH, training=True, image_size=8, seed=11)
    return [[int(v) for v in labels.numpy()] for _, labels in ds.take(EPOCHS * STEPS)]


def _run(
    data_dir: str,
    tmp: Path,
    run: str,
    strategy: str,
    kill_at: int,
    keras=False,
    reader_task=None,
    workers: int = 2,
) -> None:
    """The training script, one process per worker (`workers` with "multiworker"), until it
    exits (killed or done); each worker logs to `tmp/<run><worker>.jsonl`."""
    workers = workers if strategy == "multiworker" else 1
    ports = [free_port() for _ in range(workers)]
    procs = []
    for i in range(workers):
        plan = {
            "data_dir": data_dir, "batch": GLOBAL_BATCH, "seed": 11, "epochs": EPOCHS,
            "strategy": strategy, "keras": keras, "kill_at": kill_at, "classes": NUM_EXAMPLES,
            "save_every": SAVE_EVERY, "ckpt": str(tmp / "ckpt"), "log": str(tmp / f"{run}{i}.jsonl"),
            "task": reader_task or "classification",
        }  # fmt: skip
        env = cli_env(CUDA_VISIBLE_DEVICES="", TF_ENABLE_ONEDNN_OPTS="0")
        if workers > 1:
            cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
            task = {"type": "worker", "index": i}
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
        with open(tmp / f"{run}{i}.out", "w") as out:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", TF_PRELUDE + _SCRIPT, json.dumps(plan)],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            )
    try:
        if kill_at >= 0:
            _kill_when_waiting(procs, [tmp / f"{run}{i}.out" for i in range(workers)])
        codes = [proc.wait(timeout=TIMEOUT_S) for proc in procs]
    finally:
        kill_running(procs)
    output = (tmp / f"{run}0.out").read_text(errors="replace")
    expected = -signal.SIGKILL if kill_at >= 0 else 0
    assert codes == [expected] * workers, output[-4000:]


def _kill_when_waiting(procs: list, outputs: list[Path]) -> None:
    """SIGKILL every worker once each has logged step `kill_at` and waits ("KILL ME"), or once
    one has exited (its exit status then tells the assertion what happened)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if any(proc.poll() is not None for proc in procs):
            break
        if all("KILL ME" in out.read_text(errors="replace") for out in outputs):
            break
        time.sleep(0.1)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)


def _trained(
    tmp: Path, runs: list[list[str]], total_steps: int = EPOCHS * STEPS
) -> list[list[int]]:
    """Each global step's ids as trained, from the logs of the runs in order: a step that a
    later run logs again replaces the earlier run's (its update was lost with the kill). `runs`:
    each run's logs (one per worker); `total_steps`: the steps of the whole training."""
    steps: dict[int, tuple[int, dict[int, list[int]]]] = {}
    for run, name in ((run, name) for run, logs in enumerate(runs) for name in logs):
        for line in (tmp / name).read_text().splitlines():
            row = json.loads(line)
            if row["step"] not in steps or steps[row["step"]][0] < run:
                steps[row["step"]] = (run, {})
            steps[row["step"]][1][row["part"]] = row["ids"]
    assert sorted(steps) == list(range(total_steps))
    return [[v for p in sorted(parts) for v in parts[p]] for _, (_, parts) in sorted(steps.items())]


def _check(
    trained: list[list[int]],
    uninterrupted: list[list[int]],
    steps: int = STEPS,
    batch: int = GLOBAL_BATCH,
) -> None:
    """Every epoch holds `steps * batch` distinct ids, in the uninterrupted run's steps; the
    second epoch is another permutation than the first."""
    for epoch in range(len(trained) // steps):
        seen = [v for step in trained[epoch * steps : (epoch + 1) * steps] for v in step]
        assert len(seen) == len(set(seen)) == steps * batch, f"epoch {epoch}"
    assert trained == uninterrupted
    assert sorted(trained[0]) != sorted(trained[steps]), "the next epoch is a new permutation"


@pytest.mark.parametrize("strategy", ["none", "mirrored", "multiworker"])
def test_a_killed_custom_loop_resumes_mid_epoch(data_dir, uninterrupted, tmp_path, strategy):
    kill_at = random.randrange(STEPS + 1, 2 * STEPS - 1)  # inside the second epoch
    _run(data_dir, tmp_path, "a", strategy, kill_at)
    _run(data_dir, tmp_path, "b", strategy, -1)
    workers = 2 if strategy == "multiworker" else 1
    runs = [[f"{run}{i}.jsonl" for i in range(workers)] for run in "ab"]
    _check(_trained(tmp_path, runs), uninterrupted)


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_two_workers_killed_resume_as_one(data_dir, uninterrupted, tmp_path, task):
    """Elastic: a MultiWorkerMirroredStrategy job of 2 workers killed at a random step,
    restarted as one worker with MirroredStrategy (2 replicas), the same global batch; the
    detection task reads the same epoch order (its targets name the examples)."""
    kill_at = random.randrange(1, STEPS - 1)  # inside the first epoch
    _run(data_dir, tmp_path, "a", "multiworker", kill_at, reader_task=task)
    _run(data_dir, tmp_path, "b", "mirrored", -1, reader_task=task)
    _check(_trained(tmp_path, [["a0.jsonl", "a1.jsonl"], ["b0.jsonl"]]), uninterrupted)


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_two_workers_killed_resume_as_four(data_dir, uninterrupted, tmp_path, task):
    """Elastic the other way: the killed 2-worker job (each worker reading 2 of the order's 4
    partitions) restarted as 4 workers (one partition each), the same global batch."""
    kill_at = random.randrange(1, STEPS - 1)  # inside the first epoch
    _run(data_dir, tmp_path, "a", "multiworker", kill_at, reader_task=task)
    _run(data_dir, tmp_path, "b", "multiworker", -1, workers=4, reader_task=task)
    runs = [["a0.jsonl", "a1.jsonl"], [f"b{i}.jsonl" for i in range(4)]]
    _check(_trained(tmp_path, runs), uninterrupted)


# "boundary": killed in the first step of an epoch, the backup made after the previous epoch's
# last step but before its end: Keras restores the previous epoch.
@pytest.mark.parametrize(("strategy", "when"), [("none", "random"), ("mirrored", "random"),
                                                ("none", "boundary")])  # fmt: skip
def test_keras_fit_with_backup_and_restore_resumes_mid_epoch(
    data_dir, uninterrupted, tmp_path, strategy, when
):
    kill_at = STEPS if when == "boundary" else random.randrange(STEPS + 1, 2 * STEPS - 1)
    _run(data_dir, tmp_path, "a", strategy, kill_at, keras=True)
    _run(data_dir, tmp_path, "b", strategy, -1, keras=True)
    _check(_trained(tmp_path, [["a0.jsonl"], ["b0.jsonl"]]), uninterrupted)
