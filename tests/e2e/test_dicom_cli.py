"""DICOM end to end through the real command line: a mixed folder (DICOM + JPEG + PNG) with
DEFAULT options; every record decodes with tf.io.decode_image and imgrec's reader; no planted
patient name, ID or birth date anywhere in the output; a run whose every file is rejected ends
with its rejects. --bit_depth 16 and --group_by dicom:PatientID, options whose subject is the
output, not the command line: tests/integration/test_dicom.py (in process)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from core import schema
from tests.dicom_files import bundled, make_ct
from tests.runs import cli, read_records

pytestmark = pytest.mark.e2e

# Planted per patient: (ID, name, birth date); the PHI test greps every output file for them.
PATIENTS = [
    (f"MRN{7000 + i}", f"Planted^Patient{i}", f"19{50 + i}0{1 + i % 9}1{i % 9}") for i in range(8)
]
BUNDLED = ("CT_small.dcm", "MR_small_RLE.dcm", "SC_rgb_jpeg_dcmtk.dcm", "examples_palette.dcm")


def _mixed(root: str, files_per_patient: int = 2, first: int = 0) -> None:
    os.makedirs(os.path.join(root, "photos"), exist_ok=True)
    os.makedirs(os.path.join(root, "scans"), exist_ok=True)
    rng = np.random.default_rng(1)
    for i in range(3):
        pixels = rng.integers(0, 255, (40, 56, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(root, "photos", f"p{i}.jpg"))
        Image.fromarray(pixels[:, :, 0]).save(os.path.join(root, "photos", f"g{i}.png"))
    for name in BUNDLED:
        shutil.copy(bundled(name), os.path.join(root, "scans", name))
    for p, (pid, name, birth) in enumerate(PATIENTS):
        for k in range(first, first + files_per_patient):
            make_ct(
                os.path.join(root, "scans", f"ct_{p}_{k}.dcm"),
                patient_id=pid, patient_name=name, birth_date=birth, seed=p * 100 + k,
                frames=2 if k == 0 else 1,
            )  # fmt: skip


def _records(out: str) -> list[tuple[str, dict]]:
    """(split, parsed Example) of every record."""
    import tensorflow as tf

    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    keys = (schema.ENCODED, schema.FORMAT, schema.HEIGHT, schema.WIDTH, schema.FILENAME,
            schema.GROUP, schema.FRAME, schema.VALUE_SCALE, schema.VALUE_OFFSET,
            schema.DICOM_KEYS["Modality"])  # fmt: skip
    found = []
    for split, entry in info["splits"].items():
        for shard in entry["shards"]:
            for rec in read_records(os.path.join(out, shard["file"])):
                ex = tf.io.parse_single_example(rec, schema.feature_spec(keys))
                found.append((split, {k: v.numpy() for k, v in ex.items()}))
    return found


def test_a_mixed_folder_converts_with_default_options(tmp_path):
    import tensorflow as tf

    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _mixed(src)
    cli("convert", "--input", f"{src}/**", "--output", out)
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    n_dicom = len(BUNDLED) + 2 * len(PATIENTS)
    assert info["num_written"] == 6 + n_dicom and info["num_rejected"] == 0, info
    records = _records(out)
    assert len(records) == info["num_records"] == 6 + n_dicom
    dicoms = [ex for _, ex in records if ex[schema.DICOM_KEYS["Modality"]]]
    assert len(dicoms) == n_dicom
    for _, ex in records:
        image = tf.io.decode_image(ex[schema.ENCODED], channels=3, expand_animations=False)
        assert image.shape[:2] == (ex[schema.HEIGHT], ex[schema.WIDTH])
    from pipeline.reader import make_dataset

    seen = 0
    for split in info["splits"]:
        for images, labels in make_dataset(out, split, global_batch_size=4, image_size=(32, 32)):
            assert images.dtype == tf.uint8 and images.shape[1:] == (32, 32, 3)
            seen += int(labels.shape[0])
    assert seen == len(records)
    assert "imgrec verify: OK" in cli("verify", out).stdout


def test_no_patient_identifying_value_anywhere_in_the_output(tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    _mixed(src)
    cli("convert", "--input", f"{src}/**", "--output", out, "--group_by", "dicom:PatientID",
        "--frames", "all", "--bit_depth", "16")  # fmt: skip
    planted = [v.encode() for patient in PATIENTS for v in patient]
    planted += [b"Planted", b"MRN70"]
    checked = 0
    for folder, _, files in os.walk(out):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            checked += 1
            for value in planted:
                assert value not in data, f"{value!r} in {os.path.join(folder, name)}"
    assert checked >= 5  # shards, dataset_info.json, rejected/duplicates.jsonl, report.html


def test_everything_rejected_ends_with_the_rejects_and_an_empty_dataset(tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    for name in ("rtplan.dcm", "MR_truncated.dcm"):
        shutil.copy(bundled(name), os.path.join(src, name))
    with open(os.path.join(src, "notes.txt"), "w") as f:
        f.write("not an image")
    proc = cli("convert", "--input", f"{src}/*", "--output", out, "--max_bad_fraction", "1.0")
    assert "Traceback" not in proc.stderr
    rows = [json.loads(line) for line in open(os.path.join(out, schema.REJECTED))]
    assert sorted(r["reason"] for r in rows) == ["no_pixel_data", "not_an_image", "truncated"]
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    assert info["num_written"] == 0 and info["num_rejected"] == 3
