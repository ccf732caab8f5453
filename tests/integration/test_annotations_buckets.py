"""`imgrec convert --annotations` with the annotations, the images and the output in buckets (moto's
S3 server, the GCS emulator): a CVAT COCO file on S3, a folder of CVAT VOC XMLs on GCS, and a COCO
file over the launcher's streaming threshold (read with FileSystems.open, not in one request) on
each. Every run's objects are read back from the bucket as a detection model's input pipeline
decodes them, with label_map.pbtxt beside the shards and no staged annotation parts left behind.

The same conversions on local disk, in detail: tests/integration/test_annotations.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from core import schema
from tests.annotation_exports import POLYGON, write_cvat_coco, write_cvat_voc
from tests.integration.test_annotations import od_api_records, write_images
from tests.runs import ROOT, cli_env, in_process, tf_script
from tests.servers import put_corpus
from transforms import load_annotations

# The launcher's staging folder under a bucket output (pipeline/launch_annotations.py), deleted
# once the job has read it.
_STAGING = ".imgrec-annotations"
# Records, not statistics or the HTML report, are under test: both left out (~1 s each).
_FAST = ("--no_analyze", "--no_report", "--workers", "1")
# CVAT's COCO bbox keeps 2 decimals and VOC's corners are written as Python floats: the corners
# below have at most 2, so the normalised boxes agree to well within this.
_BOX_TOLERANCE = 1e-5

# yard.jpg has no objects: a negative.
SCENE = (
    ("street.jpg", 160, 120, [("car", 12.5, 30.25, 70.75, 90.5), ("person", 100, 20, 140.5, 110)]),
    (
        "park.jpg",
        128,
        96,
        [("bicycle", 8, 8, 60.5, 50.25), ("person", 70.25, 10, 120, 90), ("car", 30, 60, 90, 95.5)],
    ),
    ("yard.jpg", 96, 64, []),
)
# The big file's real images, each object a polygon (an instance mask in its record).
BIG_SCENE = (
    ("dock.jpg", 120, 90, [("boat", 10, 20, 90, 80, POLYGON), ("person", 95, 10, 115, 70)]),
    ("quay.jpg", 96, 72, [("boat", 4, 8, 60, 64, POLYGON)]),
)
# Images the big file names that nobody uploaded, one polygon each: ~400 bytes of CVAT's compact
# JSON apiece, 30,000 of them ~12 MB, over the streaming threshold (checked in the test).
NUM_GHOSTS = 30_000


def _convert(store, *args: str) -> set[str]:
    """Convert in this process; the staged parts the run's requests named (the bucket's
    `.imgrec-annotations/part-NNNNN`: seen written and read, so their absence afterwards means
    they were deleted, not that they were put elsewhere)."""
    store.relay.requests.clear()
    in_process("convert", *args, *_FAST, *store.beam_args)
    targets = [target for _, target in store.relay.requests if _STAGING in target]
    return {m[0] for target in targets if (m := re.search(r"part-\d{5}", target))}


def _download(store, bucket: str, prefix: str, dest: Path) -> list[str]:
    """Copy every object under `prefix` to `dest` (names relative to the prefix); their names."""
    names = [key[len(prefix) :] for key in store.keys(bucket, prefix)]
    for name in names:
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.get(store.uri(bucket, prefix + name)))
    return names


def _label_map(out: Path) -> dict[int, str]:
    """label_map.pbtxt's items, id -> name."""
    text = (out / schema.LABEL_MAP).read_text(encoding="utf-8")
    pairs = re.findall(r'item\s*\{\s*id:\s*(\d+)\s*name:\s*"([^"]*)"\s*\}', text)
    assert len(pairs) == text.count("item"), text
    return {int(i): name for i, name in pairs}


def _check_objects(out: Path, scene) -> None:
    """Every record of the dataset in `out` holds the scene's objects: class texts, ids of the
    label map, normalised boxes, a mask per object where the scene has a polygon."""
    records = od_api_records(str(out))
    assert sorted(records) == sorted(name for name, *_ in scene)
    label_map = _label_map(out)
    names = {obj[0] for *_, objects in scene for obj in objects}
    assert sorted(label_map.values()) == sorted(names), label_map
    for name, width, height, objects in scene:
        record = records[name]
        assert (record["width"], record["height"]) == (width, height), name
        assert record["texts"] == [obj[0] for obj in objects], name
        assert [label_map[int(c)] for c in record["classes"]] == record["texts"], name
        expected = np.array(
            [(o[1] / width, o[2] / height, o[3] / width, o[4] / height) for o in objects]
        ).reshape(-1, 4)
        xyxy = record["boxes"][:, [1, 0, 3, 2]]
        np.testing.assert_allclose(xyxy, expected, atol=_BOX_TOLERANCE, err_msg=name)
        with_polygon = any(len(o) > 5 and o[5] == POLYGON for o in objects)
        assert len(record["masks"]) == (len(objects) if with_polygon else 0), name


def _check_output(store, bucket: str, prefix: str, local: Path, scene) -> dict:
    """The dataset under `prefix` in the bucket: its objects (_check_objects), label_map.pbtxt,
    nothing staged left; its dataset_info.json."""
    names = _download(store, bucket, prefix, local)
    assert schema.LABEL_MAP in names, names
    assert not [n for n in names if _STAGING in n], names
    info = json.loads((local / schema.DATASET_INFO).read_text(encoding="utf-8"))
    assert info["num_written"] == len(scene) and info["num_rejected"] == 0, info
    annotations = info["annotations"]
    objects = sum(len(objects) for *_, objects in scene)
    assert sum(s["objects"] for s in annotations["splits"].values()) == objects, annotations
    negatives = sum(1 for *_, objects in scene if not objects)
    assert sum(s["negatives"] for s in annotations["splits"].values()) == negatives, annotations
    _check_objects(local, scene)
    if store.scheme == "s3":
        assert store.multipart_uploads(bucket) == []
    return info


@pytest.mark.e2e  # conversions on the storage servers
def test_a_coco_file_on_s3_converts_bucket_to_bucket(s3, tmp_path):
    export = write_cvat_coco(tmp_path / "export", SCENE)
    write_images(export, SCENE)
    source, dest = s3.new_bucket("src"), s3.new_bucket("dst")
    put_corpus(s3, source, tmp_path / "export", "")  # images/*.jpg, annotations/*.json
    coco = s3.uri(source, "annotations/instances_default.json")
    staged = _convert(
        s3, "--input", s3.uri(source, "images/*.jpg"), "--annotations", coco,
        "--output", s3.uri(dest, "out"),
    )  # fmt: skip
    assert staged == {"part-00000"}
    info = _check_output(s3, dest, "out/", tmp_path / "out", SCENE)
    assert info["annotations"]["formats"] == ["coco"]
    assert info["annotations"]["sources"] == [coco]
    assert info["annotations"]["num_unmatched_annotations"] == 0
    # The reader's detection task on the bucket, through its shard cache, as on the local copy.
    read = _read_detection(s3.uri(dest, "out"), str(tmp_path / "out"), s3.relay.url, tmp_path)
    assert read["bucket"] == read["local"], read
    for split, tally in info["annotations"]["splits"].items():
        assert read["bucket"][split]["images"] == tally["images"], (split, read)
        assert read["bucket"][split]["objects"] == tally["objects"], (split, read)
    assert read["training_images"] == info["annotations"]["splits"]["train"]["images"]
    assert read["cached"] > 0


_READ_DETECTION = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    from pipeline.reader import Order, Storage, make_dataset

    bucket, local, endpoint, cache = sys.argv[1:5]
    splits = json.loads(sys.argv[5])

    def epoch(data_dir, split, storage):
        ds = make_dataset(data_dir, split, 2, task="detection", storage=storage)
        images = objects = 0
        boxes = []
        for batch, targets in ds:
            images += int(batch.shape[0])
            objects += int(targets["num_instances"].numpy().sum())
            boxes.append(np.round(targets["boxes"].numpy(), 5).tolist())
        return {"images": images, "objects": objects, "boxes": boxes}

    on_bucket = Storage(cache_dir=cache, s3_endpoint_url=endpoint)
    out = {"bucket": {s: epoch(bucket, s, on_bucket) for s in splits},
           "local": {s: epoch(local, s, Storage()) for s in splits}}
    train = make_dataset(bucket, "train", 1, training=True, seed=3, task="detection",
                         storage=on_bucket, order=Order(repeat=False))
    out["training_images"] = sum(int(b.shape[0]) for b, _ in train)
    out["cached"] = sum(len(files) for _, _, files in os.walk(cache))
    print("RESULT " + json.dumps(out))
    """
)


def _read_detection(bucket: str, local: str, endpoint: str, tmp_path: Path) -> dict:
    info = json.loads((Path(local) / schema.DATASET_INFO).read_text(encoding="utf-8"))
    splits = json.dumps(sorted(info["annotations"]["splits"]))
    proc = subprocess.run(
        tf_script(_READ_DETECTION, bucket, local, endpoint, str(tmp_path / "cache"), splits),
        capture_output=True, text=True, cwd=ROOT, timeout=300, env=cli_env(CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


@pytest.mark.e2e  # conversions on the storage servers
def test_a_folder_of_voc_files_on_gcs_converts_bucket_to_bucket(gcs, tmp_path):
    export = write_cvat_voc(tmp_path / "export", SCENE)
    write_images(export, SCENE)
    source, dest = gcs.new_bucket("src"), gcs.new_bucket("dst")
    put_corpus(gcs, source, tmp_path / "export", "voc/")  # JPEGImages/, Annotations/, ...
    folder = gcs.uri(source, "voc/Annotations/")
    staged = _convert(
        gcs, "--input", gcs.uri(source, "voc/JPEGImages/*.jpg"), "--annotations", folder,
        "--output", gcs.uri(dest, "out"),
    )  # fmt: skip
    assert staged == {"part-00000"}
    info = _check_output(gcs, dest, "out/", tmp_path / "out", SCENE)
    assert info["annotations"]["formats"] == ["voc"]
    assert info["annotations"]["num_unmatched_annotations"] == 0


@pytest.mark.e2e  # conversions on the storage servers
def test_a_coco_file_over_the_streaming_threshold_is_read_from_the_bucket(store, tmp_path):
    """The launcher streams the file through FileSystems.open (not storage.read_many); the
    ghosts' annotations name no listed image: unmatched, allowed by --max_bad_fraction 1."""
    ghost = [("boat", 4, 4, 40, 30, POLYGON)]
    ghosts = [(f"ghost-{i:05d}.jpg", 64, 48, ghost) for i in range(NUM_GHOSTS)]
    export = write_cvat_coco(tmp_path / "export", [*BIG_SCENE, *ghosts])
    write_images(export, BIG_SCENE)
    size = export.annotations.stat().st_size
    assert size >= load_annotations._STREAM_BYTES, size  # the launcher's threshold
    source, dest = store.new_bucket("src"), store.new_bucket("dst")
    put_corpus(store, source, tmp_path / "export", "")
    coco = store.uri(source, "annotations/instances_default.json")
    staged = _convert(
        store, "--input", store.uri(source, "images/*.jpg"), "--annotations", coco,
        "--output", store.uri(dest, "out"), "--max_bad_fraction", "1",
    )  # fmt: skip
    assert len(staged) > 1, staged  # the images staged in several parts, all deleted after
    out = tmp_path / "out"
    info = _check_output(store, dest, "out/", out, BIG_SCENE)
    assert info["annotations"]["num_unmatched_annotations"] == NUM_GHOSTS
    unmatched = (out / schema.UNMATCHED_ANNOTATIONS).read_text(encoding="utf-8").splitlines()
    assert len(unmatched) == NUM_GHOSTS
    first = json.loads(unmatched[0])
    assert first["source"] == coco and first["num_objects"] == 1, first
