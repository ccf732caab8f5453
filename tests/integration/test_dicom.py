"""DICOM options whose subject is the output, in process (tests/e2e/test_dicom_cli.py runs the
real command line on the same mixed folder, with defaults): --bit_depth 16 round-trips the
modality values; --group_by dicom:PatientID keeps each patient in one split, stably, when files
are added."""

from __future__ import annotations

import json
import os

import numpy as np

from core import schema
from tests.dicom_files import make_ct
from tests.e2e.test_dicom_cli import PATIENTS, _mixed, _records
from tests.runs import in_process


def test_bit_depth_16_round_trips_the_modality_values(tmp_path):
    import tensorflow as tf

    from pipeline.reader.modality import decode_values

    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    want = make_ct(os.path.join(src, "ct.dcm"), frames=3, syntax="1.2.840.10008.1.2.5")
    in_process("convert", "--input", f"{src}/*", "--output", out, "--bit_depth", "16",
               "--frames", "all", "--no_analyze")  # fmt: skip
    records = sorted((ex[schema.FRAME], ex) for _, ex in _records(out))
    assert [frame for frame, _ in records] == [0, 1, 2]
    for (_, ex), stored in zip(records, want, strict=True):
        values = decode_values(ex[schema.ENCODED], ex[schema.VALUE_SCALE], ex[schema.VALUE_OFFSET])
        assert values.dtype == tf.float32
        np.testing.assert_array_equal(values.numpy()[:, :, 0], stored.astype(np.float32) - 1024)


def test_group_by_patient_keeps_each_patient_in_one_split_when_files_are_added(tmp_path):
    src, out1, out2 = str(tmp_path / "in"), str(tmp_path / "o1"), str(tmp_path / "o2")
    _mixed(src)
    args = ("--group_by", "dicom:PatientID", "--splits", "train=0.5,validation=0.5",
            "--frames", "all", "--no_analyze")  # fmt: skip
    in_process("convert", "--input", f"{src}/**", "--output", out1, *args)
    _mixed(src, files_per_patient=2, first=2)  # two more files per patient
    in_process("convert", "--input", f"{src}/**", "--output", out2, *args)
    splits = []
    for out in (out1, out2):
        by_group: dict[bytes, set] = {}
        for split, ex in _records(out):
            if ex[schema.DICOM_KEYS["Modality"]] == b"CT" and b"ct_" in ex[schema.FILENAME]:
                by_group.setdefault(ex[schema.GROUP], set()).add(split)
        assert len(by_group) == len(PATIENTS)
        assert all(len(s) == 1 for s in by_group.values()), by_group
        splits.append({g: next(iter(s)) for g, s in by_group.items()})
        info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
        assert info["group_by"] == "dicom:PatientID"
        report = open(os.path.join(out, "report.html")).read()
        assert "groups (dicom:PatientID)" in report
        assert sum(e.get("num_groups", 0) for e in info["splits"].values()) >= len(PATIENTS)
        assert "imgrec verify: OK" in in_process("verify", out).stdout
    assert splits[0] == splits[1]  # adding files moved no patient
    assert len(set(splits[0].values())) == 2  # eight patients over both splits
