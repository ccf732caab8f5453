"""examples/train_mirrored.py, the script users copy, killed with SIGKILL at a random step of an
epoch and started again with the same command, on a versioned root converted with the default
options: across the two runs every example of the interrupted epoch is trained on exactly once,
in the steps of an uninterrupted run, and neither run prints a harmless-but-alarming line.

Each image of the corpus is a class of its own, so a label names its example; the example's
`--log_labels FILE` writes each step's labels (tests/e2e/test_resume.py reads such logs).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.e2e.test_resume import _check, _trained
from tests.runs import ROOT, cli, kill_running

pytestmark = pytest.mark.e2e

IMAGES = 80  # one class each; ~72 in train (hash split)
BATCH = 8  # global: 4 per replica on the example's 2 CPU replicas
EPOCHS = 2
SEED = 0  # the example's default --seed
TIMEOUT_S = 300
# What a user should not see from a healthy run (issue 57); "cuInit" in CUDA_LINE's test.
ALARMING = ("Your input ran out of data", "CANCELLED")
CUDA_LINE = "cuInit"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    """A versioned root (`--versioned`, LATEST -> a version) of IMAGES one-image classes."""
    tmp = tmp_path_factory.mktemp("train_example")
    rng = np.random.default_rng(0)
    for i in range(IMAGES):
        folder = tmp / "in" / f"c{i:03d}"
        folder.mkdir(parents=True)
        pixels = rng.integers(0, 255, (40, 48, 3), np.uint8)
        Image.fromarray(pixels).save(folder / "img.jpg", quality=90)
    out = tmp / "root"
    cli("convert", "--input", f"{tmp / 'in'}/*/*.jpg", "--output", str(out), "--versioned")
    assert (out / "LATEST").exists() and not (out / "dataset_info.json").exists()
    return str(out)


@pytest.fixture(scope="module")
def uninterrupted(root) -> list[list[int]]:
    """Each global step's labels of a run never stopped (the example's reader arguments)."""
    from pipeline.reader import make_dataset, steps_per_epoch

    steps = steps_per_epoch(root, "train", BATCH)
    ds = make_dataset(root, "train", BATCH, training=True, image_size=32, seed=SEED)
    return [[int(v) for v in labels.numpy()] for _, labels in ds.take(EPOCHS * steps)]


def _run_example(root: str, tmp: Path, run: str, kill_at: int | None, epochs: int = EPOCHS) -> str:
    """The example as a user starts it (their environment, no TensorFlow log settings); with
    `kill_at`, SIGKILLed once its log shows that step begun. Returns its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    env["PYTHONPATH"] = str(ROOT)
    argv = [
        sys.executable, "examples/train_mirrored.py", "--data_dir", root,
        "--epochs", str(epochs), "--batch_size", str(BATCH), "--image_size", "32",
        "--backup_dir", str(tmp / "backup"), "--backup_every", "2",
        "--log_labels", str(tmp / f"{run}.jsonl"),
    ]  # fmt: skip
    log = tmp / f"{run}.jsonl"
    with open(tmp / f"{run}.out", "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline:
                if (
                    kill_at is not None
                    and log.exists()
                    and f'"step": {kill_at},' in log.read_text()
                ):
                    proc.send_signal(signal.SIGKILL)
                time.sleep(0.05)
            code = proc.wait(timeout=30)
        finally:
            kill_running([proc])
    output = (tmp / f"{run}.out").read_text(errors="replace")
    assert code == (-signal.SIGKILL if kill_at is not None else 0), output[-4000:]
    return output


@pytest.fixture(scope="module")
def killed_and_resumed(root, uninterrupted, tmp_path_factory) -> dict:
    """The example killed at a random step of its second epoch, then started again: both runs'
    outputs, and each global step's labels as trained across them."""
    tmp = tmp_path_factory.mktemp("killed_and_resumed")
    steps = len(uninterrupted) // EPOCHS
    # Inside the second epoch, before its last step: the kill lands when the log shows the
    # step, and the job must still be running then (tests/integration/test_keras_resume.py
    # kills after the last step's backup).
    kill_at = random.randrange(steps + 1, 2 * steps - 1)
    first = _run_example(root, tmp, "a", kill_at)
    second = _run_example(root, tmp, "b", None)
    trained = _trained(tmp, [["a.jsonl"], ["b.jsonl"]], EPOCHS * steps)
    return {"outputs": (first, second), "trained": trained, "steps": steps}


def test_the_example_killed_mid_epoch_resumes_each_example_once(killed_and_resumed, uninterrupted):
    run = killed_and_resumed
    _check(run["trained"], uninterrupted, run["steps"], BATCH)
    first, second = run["outputs"]
    assert "replicas in sync: 2" in first and "replicas in sync: 2" in second
    # Evaluation ran after the first epoch (before the kill) and after the resumed one.
    assert first.count("val_accuracy") >= 1 and second.count("val_accuracy") >= 1
    for output in (first, second):
        found = [line for line in output.splitlines() if any(a in line for a in ALARMING)]
        assert not found, found


def test_the_example_prints_no_cuinit_error_without_a_gpu(killed_and_resumed):
    """Neither run of the example, each started as a user starts it (no TF_CPP_* settings),
    prints TensorFlow's cuInit error on a machine without a GPU."""
    for output in killed_and_resumed["outputs"]:
        assert CUDA_LINE not in output, [ln for ln in output.splitlines() if CUDA_LINE in ln]


def test_the_converters_markers_hold_every_records_offset(root):
    """A seek reads the shard's marker (core/shard_markers.py) as the converter wrote it: every
    record's offset there is where a walk through the frames finds it."""
    from pipeline.reader import dataset_info
    from pipeline.reader.shard_records import _marker_offset, _walked_offset

    version = os.path.join(root, (Path(root) / "LATEST").read_text().strip())
    shards = dataset_info(root)["splits"]["train"]["shards"]
    assert shards
    for shard in shards:
        path = os.path.join(version, shard["file"])
        for k in range(shard["num_examples"] + 1):
            assert _marker_offset(path, k) == _walked_offset(path, k), (path, k)
