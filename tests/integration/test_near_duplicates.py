"""--near_duplicates end to end in this process: default options report near-copies written by
Pillow (another size, format, quality, a crop, brighter; a camera photo cut by 5 %) with
image/phash in every record; group leaves no cluster across splits; drop keeps one per cluster
and accounts for every file; a versioned rerun checks new images against the images it reuses
from the previous version."""

from __future__ import annotations

import glob
import json
import os

import pytest
from PIL import Image, ImageEnhance

from bench import _photos
from core import schema, versions
from pipeline.demo import photo_dir
from tests.runs import in_process, read_records
from transforms.hamming import DEFAULT_THRESHOLD

NUM_PHOTOS = 10
# photo index -> its copies: (file name, bytes maker)
_COPIES = {
    0: [("p00_copy.png", lambda im: _photos.encode(im, "PNG"))],
    1: [
        ("p01_half.jpg", lambda im: _photos.encode(im.resize((160, 120)), "JPEG", quality=90)),
        ("p01_q40.jpg", lambda im: _photos.encode(im, "JPEG", quality=40)),
    ],
    2: [
        ("p02_crop.jpg", lambda im: _photos.encode(im.crop((8, 6, 312, 234)), "JPEG")),
        (
            "p02_bright.jpg",
            lambda im: _photos.encode(ImageEnhance.Brightness(im).enhance(1.12), "JPEG"),
        ),
    ],
    # 5 % cut off the top and left of a camera photo: further from the original's hash than the
    # threshold, found through one of its crop windows.
    3: [("p03_cut.jpg", lambda im: _photos.encode(im.crop((16, 12, 320, 240)), "JPEG"))],
}
NUM_COPIES = sum(len(copies) for copies in _COPIES.values())
NUM_CLUSTERS, NUM_CLUSTERED = len(_COPIES), len(_COPIES) + NUM_COPIES
REAL_PHOTO = 3  # scikit-image's camera.png (a photograph), the others generated


def _photo(i: int) -> Image.Image:
    if i != REAL_PHOTO:
        return _photos.photo(500 + i, (320, 240))
    return (
        Image.open(os.path.join(photo_dir(), "camera.png"))
        .convert("RGB")
        .resize((320, 240), Image.LANCZOS)
    )


def _write_corpus(root: str, photos: range = range(NUM_PHOTOS), copies: bool = True) -> None:
    for i in photos:
        im = _photo(i)
        folder = os.path.join(root, ("cat", "dog")[i % 2])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"p{i:02d}.jpg"), "wb") as f:
            f.write(_photos.original(im))
        for name, make in _COPIES.get(i, []) if copies else []:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(make(im))


def _lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def _info(out: str) -> dict:
    with open(os.path.join(out, schema.DATASET_INFO)) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("near") / "in")
    _write_corpus(root)
    return root


# Every file's name as near_duplicates.jsonl lists it, per cluster.
def _clusters(root: str) -> list[list[str]]:
    out = []
    for i, copies in sorted(_COPIES.items()):
        folder = os.path.join(root, ("cat", "dog")[i % 2])
        names = [f"p{i:02d}.jpg", *(name for name, _ in copies)]
        out.append(sorted(os.path.join(folder, n) for n in names))
    return sorted(out)


def test_default_options_report_every_copy_and_store_the_hash(corpus, tmp_path):
    out = str(tmp_path / "out")
    proc = in_process("convert", "--input", f"{corpus}/*/*", "--output", out)
    rows = _lines(os.path.join(out, schema.NEAR_DUPLICATES))
    assert sorted(sorted(r["paths"]) for r in rows) == _clusters(corpus)
    info = _info(out)
    assert info["num_duplicates"] == 0 and info["num_written"] == info["num_listed"]
    near = info["near_duplicates"]
    across = sum(len(r["splits"]) > 1 for r in rows)
    assert near == {
        "mode": "report", "threshold": DEFAULT_THRESHOLD, "num_clusters": NUM_CLUSTERS,
        "num_images": NUM_CLUSTERED, "num_across_splits": across,
    }  # fmt: skip
    summary = f"near-duplicates: {NUM_CLUSTERS} clusters, {NUM_CLUSTERED} images, {across} "
    assert summary + "clusters across splits" in proc.stdout
    # The most bits two of a cluster's hashes differ: a cut copy's, more than the threshold.
    assert sorted(r["distance"] for r in rows)[:-1] <= [DEFAULT_THRESHOLD] * (NUM_CLUSTERS - 1)
    assert max(r["distance"] for r in rows) > DEFAULT_THRESHOLD
    # The report shows each cluster's images side by side, those across splits first.
    with open(os.path.join(out, "report.html")) as f:
        page = f.read()
    section = page[page.index(f"<h2>Near-duplicates ({NUM_CLUSTERS} clusters") :]
    firsts = [section.index(f"<div class=path>{r['paths'][0]}</div>") for r in rows]
    assert firsts == sorted(firsts) and [len(r["splits"]) > 1 for r in rows] == sorted(
        (len(r["splits"]) > 1 for r in rows), reverse=True
    )
    assert section.count("data:image/jpeg;base64,") >= NUM_CLUSTERED  # every file's thumbnail
    # image/phash is in every record, as TensorFlow parses it with the dataset's feature spec.
    import tensorflow as tf

    spec = {schema.PHASH: tf.io.FixedLenFeature([], tf.int64, default_value=0)}
    spec[schema.FILENAME] = tf.io.FixedLenFeature([], tf.string)
    hashes = {}
    for shard in glob.glob(os.path.join(out, "*", "*.tfrecord")):
        split = os.path.basename(os.path.dirname(shard))
        for record in read_records(shard):
            parsed = tf.io.parse_single_example(record, spec)
            path = parsed[schema.FILENAME].numpy().decode()
            hashes[path] = (int(parsed[schema.PHASH]), split)
    assert len(hashes) == info["num_written"]
    assert len({h for h, _ in hashes.values()}) >= NUM_PHOTOS  # distinct photos, distinct hashes
    for row in rows:
        assert row["splits"] == sorted({hashes[p][1] for p in row["paths"]})


def test_group_leaves_no_cluster_across_splits(corpus, tmp_path):
    """A seed and split fractions under which the copies hash into both splits."""
    out = str(tmp_path / "grouped")
    args = ["--input", f"{corpus}/*/*", "--splits", "train=0.5,test=0.5", "--no_analyze"]
    in_process("convert", *args, "--output", str(tmp_path / "report"))
    reported = _lines(os.path.join(tmp_path / "report", schema.NEAR_DUPLICATES))
    assert any(len(r["splits"]) > 1 for r in reported)  # something to group
    proc = in_process("convert", *args, "--output", out, "--near_duplicates", "group")
    rows = _lines(os.path.join(out, schema.NEAR_DUPLICATES))
    assert sorted(sorted(r["paths"]) for r in rows) == _clusters(corpus)
    assert all(len(r["splits"]) == 1 for r in rows)
    assert f"{NUM_CLUSTERS} clusters, {NUM_CLUSTERED} images, 0 clusters across" in proc.stdout
    written = {}
    for shard in glob.glob(os.path.join(out, "*", "*.tfrecord")):
        import tensorflow as tf

        for record in read_records(shard):
            example = tf.train.Example.FromString(record)
            name = example.features.feature[schema.FILENAME].bytes_list.value[0].decode()
            written[name] = os.path.basename(os.path.dirname(shard))
    for row in rows:
        assert {written[p] for p in row["paths"]} == set(row["splits"])


def test_drop_keeps_the_first_of_each_cluster(corpus, tmp_path):
    out = str(tmp_path / "dropped")
    in_process(
        "convert", "--input", f"{corpus}/*/*", "--output", out, "--near_duplicates", "drop",
        "--no_analyze",
    )  # fmt: skip
    info = _info(out)
    dropped = _lines(os.path.join(out, schema.DUPLICATES))
    clusters = _clusters(corpus)
    assert sorted(d["path"] for d in dropped) == sorted(p for c in clusters for p in c[1:])
    keep = {p: c[0] for c in clusters for p in c[1:]}
    assert all(d["duplicate_of"] == keep[d["path"]] for d in dropped)
    assert info["num_duplicates"] == NUM_COPIES and info["num_written"] == NUM_PHOTOS
    assert info["num_listed"] == info["num_written"] + info["num_rejected"] + NUM_COPIES


def test_off_writes_no_hash_and_no_clusters(corpus, tmp_path):
    out = str(tmp_path / "off")
    proc = in_process(
        "convert", "--input", f"{corpus}/*/*", "--output", out, "--near_duplicates", "off",
        "--no_analyze",
    )  # fmt: skip
    assert not os.path.exists(os.path.join(out, schema.NEAR_DUPLICATES))
    assert "near_duplicates" not in _info(out) and "near-duplicates" not in proc.stdout
    shard = glob.glob(os.path.join(out, "*", "*.tfrecord"))[0]
    assert schema.PHASH.encode() not in read_records(shard)[0]


def test_a_versioned_rerun_checks_new_images_against_the_reused_ones(tmp_path):
    """Version 2 adds near-copies of version 1's photos: they are clustered with the originals,
    whose hashes and crop windows' hashes come from version 1's records (the originals are not
    read again; the cut camera photo is found through its original's windows only)."""
    src, root = str(tmp_path / "in"), str(tmp_path / "root")
    _write_corpus(src, copies=False)
    args = ["convert", "--input", f"{src}/*/*", "--output", root, "--versioned", "--no_analyze"]
    in_process(*args)
    v1 = os.path.join(root, versions.read_latest(root))
    assert _info(v1)["near_duplicates"]["num_clusters"] == 0
    _write_corpus(src)  # the same originals, and their copies
    proc = in_process(*args)
    assert f"{NUM_COPIES} added" in proc.stdout, proc.stdout
    v2 = os.path.join(root, versions.read_latest(root))
    rows = _lines(os.path.join(v2, schema.NEAR_DUPLICATES))
    assert sorted(sorted(r["paths"]) for r in rows) == _clusters(src)
    with open(os.path.join(v2, versions.FILE_INDEX), "rb") as f:
        import gzip

        index = [json.loads(line) for line in gzip.decompress(f.read()).splitlines()]
    assert len(index) == NUM_PHOTOS + NUM_COPIES and all("phash" in row for row in index)
