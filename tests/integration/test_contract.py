"""The names in shared/CONTRACT.md, spelled out literally: feature keys, shard and output file
names, dataset_info.json fields.

Every other test (and the writer, the reader and `verify`) takes these names from
`core.schema`, so a typo there would go unnoticed by all of them: writer and reader would
agree on the wrong name. Here nothing comes from `schema`; a renamed key or file fails.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from core import schema
from pipeline.demo import build_corpus
from pipeline.reader import dataset as reader
from tests.runs import ROOT, in_process

# CONTRACT.md "Example features": key -> the tf.train.Feature list it is stored in.
CONTRACT_FEATURES = {
    "image/encoded": "bytes_list",
    "image/format": "bytes_list",
    "image/height": "int64_list",
    "image/width": "int64_list",
    "image/channels": "int64_list",
    "image/class/label": "int64_list",
    "image/class/text": "bytes_list",
    "image/filename": "bytes_list",
    "image/key/sha256": "bytes_list",
    "schema_version": "int64_list",
}
LABELS = ["astronaut", "cat", "coffee", "motorcycle", "rocket"]  # build_corpus's classes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, dict]:
    src = str(tmp_path_factory.mktemp("contract_corpus"))
    return src, build_corpus(src, num_images=60, seed=21, long_side=(48, 80))  # 3 broken: < 5 %


@pytest.fixture(scope="module")
def default_run(corpus, tmp_path_factory) -> tuple[str, dict]:
    """`imgrec convert --input ... --output ...` with every other option at its default."""
    src, _ = corpus
    out = str(tmp_path_factory.mktemp("contract") / "ds")
    in_process("convert", "--input", f"{src}/*/*.jpg", "--output", out)
    with open(os.path.join(out, "dataset_info.json")) as f:
        return out, json.load(f)


def test_schema_constants_are_the_contracts_names():
    assert schema.ENCODED == "image/encoded"
    assert schema.FORMAT == "image/format"
    assert schema.HEIGHT == "image/height"
    assert schema.WIDTH == "image/width"
    assert schema.CHANNELS == "image/channels"
    assert schema.LABEL == "image/class/label"
    assert schema.LABEL_TEXT == "image/class/text"
    assert schema.FILENAME == "image/filename"
    assert schema.SHA256 == "image/key/sha256"
    assert schema.VERSION == "schema_version"
    assert schema.SCHEMA_VERSION == 1
    assert schema.RAW_FORMAT == "raw"
    assert schema.DATASET_INFO == "dataset_info.json"
    assert schema.REJECTED == "rejected.jsonl"
    assert schema.DUPLICATES == "duplicates.jsonl"
    assert schema.shard_name("train", 3, 16) == "train/train-00003-of-00016.tfrecord"
    assert schema.shard_name("test", 0, 1, ".gz") == "test/test-00000-of-00001.tfrecord.gz"


def test_output_directory_layout_by_its_literal_names(default_run):
    out, _ = default_run
    top = set(os.listdir(out))
    for name in ("dataset_info.json", "rejected.jsonl", "duplicates.jsonl", "report.html",
                 "transform_fn", "transformed_metadata", "train", "validation"):  # fmt: skip
        assert name in top, (name, sorted(top))
    # Default options: train=0.9,validation=0.1 and 128 MB shards -> one shard per split.
    in_splits = [os.path.join(out, split, "*") for split in ("train", "validation")]
    shards = sorted(os.path.relpath(p, out) for pattern in in_splits for p in glob.glob(pattern))
    assert shards == [
        "train/train-00000-of-00001.tfrecord",
        "validation/validation-00000-of-00001.tfrecord",
    ]


def test_dataset_info_fields_by_their_literal_names(default_run, corpus):
    out, info = default_run
    _, summary = corpus
    assert info["schema_version"] == 1
    listed = summary["images"] + len(summary["broken"]) + 2  # + PNG named .jpg + duplicate
    assert info["num_listed"] == listed
    assert info["num_rejected"] == len(summary["broken"]) and info["num_duplicates"] == 1
    assert info["num_written"] == summary["images"] + 1
    assert info["num_listed"] == info["num_written"] + info["num_rejected"] + info["num_duplicates"]
    assert info["label_names"] == LABELS
    assert set(info["splits"]) == {"train", "validation"}
    for split, entry in info["splits"].items():
        (shard,) = entry["shards"]
        assert shard["file"] == f"{split}/{split}-00000-of-00001.tfrecord"
        with open(os.path.join(out, shard["file"]), "rb") as f:
            data = f.read()
        assert shard["num_bytes"] == len(data) == entry["num_bytes"]
        assert shard["sha256"] == hashlib.sha256(data).hexdigest()
        assert shard["num_examples"] == entry["num_examples"]
    assert sum(e["num_examples"] for e in info["splits"].values()) == info["num_written"]
    assert set(CONTRACT_FEATURES) <= set(info["feature_spec"])
    assert info["provenance"]


def test_rejected_and_duplicates_rows_by_their_literal_fields(default_run, corpus):
    out, _ = default_run
    src, summary = corpus
    with open(os.path.join(out, "rejected.jsonl")) as f:
        rejected = [json.loads(line) for line in f]
    assert {os.path.relpath(r["path"], src) for r in rejected} == set(summary["broken"])
    assert all(r["reason"] and r["detail"] for r in rejected)
    assert all({"path", "reason", "detail"} <= set(r) for r in rejected)
    with open(os.path.join(out, "duplicates.jsonl")) as f:
        (dup,) = [json.loads(line) for line in f]
    assert os.path.relpath(dup["path"], src) == summary["duplicate"]
    with open(dup["duplicate_of"], "rb") as f:
        assert dup["sha256"] == hashlib.sha256(f.read()).hexdigest()


def test_examples_hold_the_contracts_features_with_source_values(default_run):
    out, info = default_run
    seen = 0
    for path in sorted(glob.glob(os.path.join(out, "*", "*.tfrecord"))):
        for record in tf.data.TFRecordDataset(path):
            features = tf.train.Example.FromString(record.numpy()).features.feature
            for key, kind in CONTRACT_FEATURES.items():
                assert features[key].WhichOneof("kind") == kind, key

            def one(key, features=features):
                values = getattr(features[key], CONTRACT_FEATURES[key]).value
                assert len(values) == 1, key
                return values[0]

            source = one("image/filename").decode()
            with open(source, "rb") as f:
                original = f.read()
            assert one("image/encoded") == original  # not transcoded: the file's own bytes
            assert one("image/key/sha256").decode() == hashlib.sha256(original).hexdigest()
            image = Image.open(io.BytesIO(original))
            assert one("image/format").decode() == {"JPEG": "jpeg", "PNG": "png"}[image.format]
            assert (one("image/height"), one("image/width")) == (image.height, image.width)
            assert one("image/channels") == 3
            label_text = one("image/class/text").decode()
            assert label_text == os.path.basename(os.path.dirname(source))
            assert info["label_names"][one("image/class/label")] == label_text
            assert one("schema_version") == 1
            seen += 1
    assert seen == info["num_written"]


def test_gzip_shards_add_gz(corpus, tmp_path):
    src, _ = corpus
    out = tmp_path / "gz"
    in_process(
        "convert", "--input", f"{src}/*/*.jpg", "--output", str(out), "--compression", "gzip",
        "--no_analyze", "--no_report", "--splits", "train=0.5,test=0.5", "--min_shards", "2",
    )  # fmt: skip
    names = sorted(os.path.relpath(p, out) for p in glob.glob(str(out / "*" / "*.tfrecord*")))
    assert names == [
        "test/test-00000-of-00002.tfrecord.gz",
        "test/test-00001-of-00002.tfrecord.gz",
        "train/train-00000-of-00002.tfrecord.gz",
        "train/train-00001-of-00002.tfrecord.gz",
    ]


def test_reader_reads_examples_written_with_the_literal_keys(tmp_path):
    """A dataset built here without `schema` (the contract's keys, file names and fields): the
    reader must find and parse it."""
    pixels = np.zeros((12, 16, 3), np.uint8)
    pixels[:, :8] = (200, 10, 10)
    pixels[:, 8:] = (10, 10, 200)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="PNG")
    encoded = buf.getvalue()

    def feature(kind: str, value) -> tf.train.Feature:
        if kind == "bytes_list":
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    values = {
        "image/encoded": encoded, "image/format": b"png", "image/height": 12,
        "image/width": 16, "image/channels": 3, "image/class/label": 1,
        "image/class/text": b"dog", "image/filename": b"/data/dog/x.png",
        "image/key/sha256": hashlib.sha256(encoded).hexdigest().encode(), "schema_version": 1,
    }  # fmt: skip
    example = tf.train.Example(
        features=tf.train.Features(
            feature={k: feature(CONTRACT_FEATURES[k], v) for k, v in values.items()}
        )
    )
    os.makedirs(tmp_path / "validation")
    shard = tmp_path / "validation" / "validation-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(shard)) as w:
        w.write(example.SerializeToString())
    data = shard.read_bytes()
    info = {
        "schema_version": 1, "num_listed": 1, "num_written": 1, "num_rejected": 0,
        "num_duplicates": 0, "label_names": ["cat", "dog"],
        "splits": {"validation": {"num_examples": 1, "num_bytes": len(data), "shards": [
            {"file": "validation/validation-00000-of-00001.tfrecord", "num_examples": 1,
             "num_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]}},
    }  # fmt: skip
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    ds = reader.make_dataset(
        str(tmp_path), "validation", 1, image_size=(12, 16), crop_fraction=1.0,
        extra_features=["image/filename", "image/class/text"],
    )  # fmt: skip
    ((images, labels, extras),) = list(ds)
    assert labels.numpy().tolist() == [1]
    assert extras["image/filename"].numpy().tolist() == [b"/data/dog/x.png"]
    assert extras["image/class/text"].numpy().tolist() == [b"dog"]
    got = images.numpy()[0].astype(int)
    assert got.shape == (12, 16, 3)
    assert np.abs(got[:, :6] - (200, 10, 10)).max() <= 2  # left half red, right half blue
    assert np.abs(got[:, 10:] - (10, 10, 200)).max() <= 2
    assert reader.steps_per_epoch(str(tmp_path), "validation", 1, drop_remainder=False) == 1


def test_an_example_that_was_not_transcoded_says_so_with_empty_strings():
    from tensorflow.core.example import example_pb2

    from core import schema

    raw = schema.make_example(
        encoded=b"\xff\xd8\xff", image_format="jpeg", height=1, width=2, channels=3, label=0,
        label_text="cat", filename="/in/cat/1.jpg", sha256="ab" * 32,
    )  # fmt: skip
    feature = example_pb2.Example.FromString(raw).features.feature
    assert feature["image/transcoded_from"].bytes_list.value == [b""]
    assert feature["image/transcode_reason"].bytes_list.value == [b""]
    assert feature["image/class/text"].bytes_list.value == [b"cat"]


# The README's demo output (moved here from tests/unit/test_docs_links.py: a real conversion).
def _readme_demo_block() -> list[str]:
    with open(ROOT / "README.md", encoding="utf-8") as f:
        text = f.read()
    block = text.split("<!-- demo-summary")[1].split("```")[1]
    return [ln for ln in block.strip("\n").splitlines()]


def test_readme_demo_summary_matches_a_real_demo_conversion(tmp_path, capsys):
    """The README's demo output is what `./run_local.sh` prints (timing aside)."""
    from pipeline.demo import build_corpus
    from pipeline.launcher import run_convert

    src, out = str(tmp_path / "demo_data" / "photos"), str(tmp_path / "out" / "demo")
    build_corpus(src, num_images=300)  # run_local.sh's demo corpus
    capsys.readouterr()
    status = run_convert(
        ["--input", f"{src}/*/*.jpg", "--output", out, "--overwrite",
         "--splits", "train=0.8,validation=0.1,test=0.1", "--workers", "1", "--no_analyze"]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out.replace(out, "out/demo").strip("\n").splitlines()
    readme = _readme_demo_block()
    assert readme[0] == "imgrec: converting the demo corpus demo_data/photos -> out/demo"
    timing = re.compile(r"in [\d.]+ s \(\d+ files/s\)")
    assert [timing.sub("in T", ln) for ln in readme[1:]] == [
        timing.sub("in T", ln) for ln in printed
    ]
