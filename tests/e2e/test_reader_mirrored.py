"""MirroredStrategy (two logical CPUs) over the converter's own output: every example once per
epoch, each replica's images, labels and file names belonging together.

tests/e2e/test_reader_mirrored_shapes.py runs it over Examples written by hand and checks shapes;
here the shards come from a real conversion and the values are checked: the label is the
source folder's id, the evaluation pixels are the ones the reader yields without a strategy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from core import schema
from pipeline.demo import build_corpus
from pipeline.reader import dataset as reader
from tests.runs import ROOT, cli_env, in_process, read_records, tf_script

GLOBAL_BATCH = 4  # 2 per replica
IMAGE_SIZE = (32, 32)

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    from pipeline.reader import dataset as reader
    from core import schema

    data_dir, batch, size, npz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def epoch(ds):
        names, labels, images, per_replica = [], [], [], set()
        for x, y, extras in ds:
            xs = strategy.experimental_local_results(x)
            ys = strategy.experimental_local_results(y)
            fs = strategy.experimental_local_results(extras[schema.FILENAME])
            for xi, yi, fi in zip(xs, ys, fs):
                per_replica.add(int(xi.shape[0]))
                images.append(xi.numpy())
                labels += [int(v) for v in yi.numpy()]
                names += [n.decode() for n in fi.numpy()]
        return names, labels, np.concatenate(images), sorted(per_replica)

    out = {"replicas": strategy.num_replicas_in_sync}
    val = reader.make_dataset(data_dir, "train", batch, strategy=strategy, image_size=(size, size),
                              extra_features=[schema.FILENAME])
    names, labels, images, per_replica = epoch(val)
    out["eval"] = {"names": names, "labels": labels, "per_replica": per_replica}
    train = reader.make_dataset(data_dir, "train", batch, strategy=strategy, training=True,
                                repeat=False, image_size=(size, size), seed=3,
                                extra_features=[schema.FILENAME])
    out["train"] = []
    for _ in range(2):
        t_names, t_labels, t_images, t_per_replica = epoch(train)
        out["train"].append({"names": t_names, "labels": t_labels, "per_replica": t_per_replica,
                             "mean": float(t_images.mean())})
    np.savez(npz, eval_images=images)
    print("RESULT " + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> tuple[str, dict]:
    src = str(tmp_path_factory.mktemp("mirrored_corpus"))
    build_corpus(src, num_images=45, seed=8, long_side=(48, 80), broken=False)
    out = str(tmp_path_factory.mktemp("mirrored") / "ds")
    in_process(
        "convert", "--input", f"{src}/*/*.jpg", "--output", out, "--splits", "train=1.0",
        "--target_shard_mb", "0.03", "--no_report",
    )  # fmt: skip
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        return out, json.load(f)


@pytest.fixture(scope="module")
def mirrored(converted, tmp_path_factory) -> tuple[dict, np.ndarray]:
    out, _ = converted
    npz = str(tmp_path_factory.mktemp("mirrored_result") / "images.npz")
    proc = subprocess.run(
        tf_script(_SCRIPT, out, str(GLOBAL_BATCH), str(IMAGE_SIZE[0]), npz),
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=cli_env(CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :]), np.load(npz)["eval_images"]


def _sources(converted) -> dict[str, tuple[int, bytes]]:
    """{source path: (label id, serialized record)} of every training record, from the shards."""
    import tensorflow as tf

    out, info = converted
    found = {}
    spec = schema.feature_spec((schema.FILENAME, schema.LABEL))
    for shard in info["splits"]["train"]["shards"]:
        for record in read_records(os.path.join(out, shard["file"])):
            ex = tf.io.parse_single_example(record, spec)
            found[ex[schema.FILENAME].numpy().decode()] = (int(ex[schema.LABEL]), record)
    return found


def test_the_conversion_gives_several_shards(converted):
    _, info = converted
    assert info["splits"]["train"]["num_shards"] >= 3
    assert info["splits"]["train"]["num_examples"] == 45


def test_evaluation_sees_every_example_once_with_its_own_label(mirrored, converted):
    result, _ = mirrored
    _, info = converted
    sources = _sources(converted)
    assert result["replicas"] == 2
    names, labels = result["eval"]["names"], result["eval"]["labels"]
    assert sorted(names) == sorted(sources) and len(names) == len(set(names))
    for name, label in zip(names, labels, strict=True):
        assert label == sources[name][0]
        # The label id names the source folder: the converter's label map, end to end.
        assert info["label_names"][label] == os.path.basename(os.path.dirname(name))


def test_evaluation_pixels_are_the_readers_for_that_file(mirrored, converted):
    """Each replica's image is the one the reader yields for the file named beside it."""
    result, images = mirrored
    _, info = converted
    sources = _sources(converted)
    names = result["eval"]["names"]
    want = reader.evaluation_images([sources[n][1] for n in names], info, IMAGE_SIZE).numpy()
    assert images.shape == (len(names), *IMAGE_SIZE, 3)
    diff = np.abs(images.astype(int) - want.astype(int))
    assert diff.max() <= 2, f"{int(diff.max())} at {np.unravel_index(diff.argmax(), diff.shape)}"
    assert images.std() > 10  # real photos, not a constant


def test_each_training_epoch_sees_every_example_at_most_once(mirrored, converted):
    result, _ = mirrored
    sources = _sources(converted)
    n = len(sources)
    orders = []
    for epoch in result["train"]:
        names = epoch["names"]
        # The last partial global batch is dropped; nothing is seen twice.
        assert len(names) == len(set(names)) == n - n % GLOBAL_BATCH
        assert set(names) <= set(sources)
        assert [sources[name][0] for name in names] == epoch["labels"]
        assert epoch["per_replica"] == [GLOBAL_BATCH // 2]
        assert 20 < epoch["mean"] < 235
        orders.append(names)
    assert orders[0] != orders[1], "training order must be reshuffled every epoch"
