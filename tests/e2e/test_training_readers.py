"""End to end, from the training side: readers we did not write over what the command line writes.

The default conversion of a mixed photo folder warns that JPEG-only readers will fail and names
`--transcode jpeg`; with `--transcode jpeg --dali_index` every record is a JPEG that a
decode_and_crop_jpeg pipeline reads, and NVIDIA DALI's own TFRecord reader (CPU pipeline)
reads every record through imgrec's index files, with the labels and decoded shapes imgrec's
reader sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core import schema
from tests.mixed_folder import write_mixed_folder
from tests.runs import ROOT, cli, cli_env, in_process

# Run in its own process: DALI's import is heavy and loads its own native libraries. One process
# reads every split (argv[1]: [{"split", "shards", "indexes", "total"}], a pipeline each).
_DALI_SCRIPT = r"""
import json, sys
from nvidia.dali import fn, pipeline_def
import nvidia.dali.tfrecord as tfrec

@pipeline_def(num_threads=1, device_id=None)  # CPU only: no GPU needed
def records(shards, indexes):
    r = fn.readers.tfrecord(
        path=shards, index_path=indexes, random_shuffle=False, features={
            "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
            "image/filename": tfrec.FixedLenFeature((), tfrec.string, ""),
            "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
        })
    image = fn.decoders.image(r["image/encoded"], device="cpu", output_type=0)  # RGB
    return image, r["image/class/label"], r["image/filename"]

for split in json.loads(sys.argv[1]):
    total = split["total"]
    pipe = records(split["shards"], split["indexes"], batch_size=total)
    pipe.build()
    images, labels, names = pipe.run()
    for i in range(total):
        print(json.dumps({
            "split": split["split"],
            "path": bytes(names.at(i)).decode(),
            "label": int(labels.at(i)[0]),
            "shape": list(images.at(i).shape),
        }))
"""


def _info(data_dir: str) -> dict:
    with open(os.path.join(data_dir, schema.DATASET_INFO)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[str, dict[str, str]]:
    root = str(tmp_path_factory.mktemp("photos"))
    return root, write_mixed_folder(root, num_jpegs=30)


def test_the_default_conversion_warns_before_a_jpeg_only_reader_crashes(folder, tmp_path):
    root, files = folder
    out = str(tmp_path / "ds")
    proc = cli("convert", "--input", f"{root}/*/*", "--output", out)  # every option a default
    warning = next(line for line in proc.stdout.splitlines() if "not JPEG" in line)
    assert "10 records are not JPEG (png 8, gif 1, webp 1)" in warning
    assert "--transcode jpeg" in warning
    assert _info(out)["num_written"] == len(files)


def test_dali_reads_every_record_through_imgrecs_indexes(folder, tmp_path):
    import tensorflow as tf

    from pipeline.reader import make_dataset

    root, files = folder
    out = str(tmp_path / "ds")
    # In process (the command line's default run is the test above's).
    proc = in_process("convert", "--input", f"{root}/*/*", "--output", out, "--transcode", "jpeg",
                      "--dali_index")  # fmt: skip
    assert "not JPEG" not in proc.stdout
    info = _info(out)
    assert info["num_written"] == len(files) and info["formats_written"] == {"jpeg": len(files)}
    assert set(info["splits"]) == {"train", "validation"}
    splits = []
    for split, entry in info["splits"].items():
        shards = [s for s in entry["shards"] if s["num_examples"]]
        splits.append({
            "split": split,
            "shards": [os.path.join(out, s["file"]) for s in shards],
            "indexes": [os.path.join(out, s["dali_index"]["file"]) for s in shards],
            "total": entry["num_examples"],
        })  # fmt: skip
    dali = subprocess.run(
        [sys.executable, "-c", _DALI_SCRIPT, json.dumps(splits)],
        cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert dali.returncode == 0, dali.stderr[-3000:]
    read = [json.loads(line) for line in dali.stdout.splitlines()]
    seen = 0
    for entry in splits:
        split = entry["split"]
        got = {r["path"]: r for r in read if r["split"] == split}
        assert len(got) == entry["total"]
        # imgrec's reader: the label of every record, and the stored image's decoded shape.
        want = {}
        ds = make_dataset(out, split, 4, image_size=(16, 16), extra_features=[schema.FILENAME])
        for _, labels, extras in ds:
            for label, name in zip(labels.numpy(), extras[schema.FILENAME].numpy(), strict=True):
                want[name.decode()] = int(label)
        for path in entry["shards"]:
            for record in tf.data.TFRecordDataset(path):
                ex = tf.io.parse_single_example(record, schema.feature_spec())
                name = ex[schema.FILENAME].numpy().decode()
                shape = tf.io.decode_jpeg(ex[schema.ENCODED], channels=3).shape
                assert got[name]["shape"] == list(shape), name
                assert got[name]["label"] == want[name], name
        assert sorted(want) == sorted(got)
        seen += len(got)
    assert seen == len(files)
