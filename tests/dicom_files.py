"""DICOM files for tests: pydicom's own bundled test files, and CT-like files written with
pydicom for planted patients (names, IDs and birth dates the PHI tests look for)."""

from __future__ import annotations

import os

import numpy as np


def bundled(name: str) -> str:
    """The path of one of the test files pydicom's wheel ships (no download)."""
    import pydicom

    path = os.path.join(os.path.dirname(pydicom.__file__), "data", "test_files", name)
    assert os.path.exists(path), f"{name} is not in pydicom's wheel"
    return path


def make_ct(
    path: str,
    *,
    patient_id: str = "PID-0001",
    patient_name: str = "Doe^Jane",
    birth_date: str = "19610203",
    body_part: str = "CHEST",
    rows: int = 24,
    columns: int = 32,
    frames: int = 1,
    photometric: str = "MONOCHROME2",
    window: tuple[float, float] | None = (40.0, 400.0),
    syntax: str = "1.2.840.10008.1.2.1",
    seed: int = 0,
    study_uid: str | None = None,
) -> np.ndarray:
    """Write a signed 12-bit CT (slope 1, intercept -1024) with the planted patient; returns the
    stored pixel values (frames x rows x columns, int16)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import UID, CTImageStorage, generate_uid

    rng = np.random.default_rng(seed)
    pixels = rng.integers(-1000, 2000, size=(frames, rows, columns)).astype(np.int16)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = CTImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = UID("1.2.840.10008.1.2.1")
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = CTImageStorage
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.StudyInstanceUID = study_uid or generate_uid()
    ds.SeriesInstanceUID = generate_uid()
    ds.PatientName = patient_name
    ds.PatientID = patient_id
    ds.PatientBirthDate = birth_date
    ds.Modality = "CT"
    ds.BodyPartExamined = body_part
    ds.PixelSpacing = [0.5, 0.75]
    ds.RescaleSlope = 1
    ds.RescaleIntercept = -1024
    if window:
        ds.WindowCenter, ds.WindowWidth = window
    data = pixels[0] if frames == 1 else pixels
    ds.set_pixel_data(data, photometric, 12)
    if frames > 1:
        ds.NumberOfFrames = frames
    if syntax != meta.TransferSyntaxUID:
        ds.compress(UID(syntax))
    ds.save_as(path, enforce_file_format=True)
    return pixels
