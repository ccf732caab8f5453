"""DICOM (transforms/images/dicom.py): sniffed from its bytes, decoded in the decoder process,
stored pixels equal to pydicom's own decode + LUTs (windowing, inversion, palette, YBR), every
kind of file (CT/MR/US-like colour/secondary capture; uncompressed, JPEG, JPEG-LS, JPEG 2000,
RLE; big/little endian; single/multi-frame), and the rejects that name what is wrong."""

from __future__ import annotations

import io
import random

import numpy as np
import pydicom
import pytest
import tensorflow as tf
from pydicom.pixels import apply_color_lut, apply_modality_lut, apply_voi_lut

from core.rejects import REASONS, Rejected
from tests.dicom_files import bundled, make_ct
from transforms.images import array_contract, arrays, dicom
from transforms.images.check import check_image
from transforms.images.limits import CheckOptions
from transforms.images.sniff import array_format, sniff_container

# (file shipped with pydicom, what it is)
KINDS = {
    "CT_small.dcm": "CT, explicit little endian, signed, windowed",
    "MR_small.dcm": "MR, uncompressed",
    "MR_small_implicit.dcm": "MR, implicit VR",
    "MR_small_bigendian.dcm": "MR, explicit big endian",
    "MR_small_RLE.dcm": "MR, RLE",
    "MR_small_jpeg_ls_lossless.dcm": "MR, JPEG-LS lossless",
    "MR_small_jp2klossless.dcm": "MR, JPEG 2000 lossless",
    "JPEG2000.dcm": "JPEG 2000",
    "JPGExtended.dcm": "JPEG extended (12-bit)",
    "JPEGLSNearLossless_08.dcm": "JPEG-LS near-lossless",
    "SC_rgb_jpeg_dcmtk.dcm": "secondary capture, JPEG baseline, YBR",
    "SC_rgb_rle_2frame.dcm": "RGB, RLE, two frames",
    "SC_ybr_full_422_uncompressed.dcm": "YBR_FULL_422 uncompressed",
    "examples_ybr_color.dcm": "ultrasound-like colour cine, YBR, 30 frames",
    "examples_palette.dcm": "PALETTE COLOR",
    "image_dfl.dcm": "deflated explicit little endian",
}


def _first_frame(ds) -> np.ndarray:
    arr = ds.pixel_array
    return arr[0] if int(ds.get("NumberOfFrames") or 1) > 1 else arr


def _viewed(ds) -> np.ndarray:
    """What a viewer shows, from pydicom's pixel_array and LUTs: uint8 H x W x C."""
    arr = _first_frame(ds)
    kind = ds.PhotometricInterpretation
    if kind == "PALETTE COLOR":
        bits = ds.RedPaletteColorLookupTableDescriptor[2]
        rgb = apply_color_lut(arr, ds).astype(np.float64)
        return np.rint(rgb * 255 / (2**bits - 1)).astype(np.uint8)
    if kind not in ("MONOCHROME1", "MONOCHROME2"):  # pixel_array converts YBR to RGB
        return np.rint(arr * 255.0 / (2**ds.BitsStored - 1)).astype(np.uint8)
    values = apply_modality_lut(arr, ds).astype(np.float64)
    if "WindowCenter" in ds:
        signed = ds.PixelRepresentation == 1
        low = -(2 ** (ds.BitsStored - 1)) if signed else 0
        high = 2 ** (ds.BitsStored - 1) - 1 if signed else 2**ds.BitsStored - 1
        slope, intercept = float(ds.get("RescaleSlope", 1)), float(ds.get("RescaleIntercept", 0))
        low, high = low * slope + intercept, high * slope + intercept
        values = apply_voi_lut(values, ds, index=0, prefer_lut=False)
    elif "VOILUTSequence" in ds:  # a VOI LUT table instead of a window
        low, high = 0, 2 ** ds.VOILUTSequence[0].LUTDescriptor[2] - 1
        values = apply_voi_lut(values, ds, index=0)
    else:
        low, high = values.min(), values.max()
    out = np.clip(np.rint((values - low) * 255 / (high - low)), 0, 255).astype(np.uint8)
    return 255 - out if kind == "MONOCHROME1" else out


def _decode(data: bytes, **opts) -> array_contract.ArrayImage:
    return arrays.decode("dicom", data, CheckOptions(**opts))


def _read(name: str) -> bytes:
    with open(bundled(name), "rb") as f:
        return f.read()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_stored_pixels_are_pydicoms_decode_as_a_viewer_shows_it(name):
    data = _read(name)
    assert array_format(data) == "dicom" and sniff_container(data) == "dicom"
    image = _decode(data)
    want = _viewed(pydicom.dcmread(io.BytesIO(data)))
    got = image.frames[0]
    assert got.dtype == np.uint8 and got.shape[:2] == want.shape[:2], KINDS[name]
    want = want[:, :, None] if want.ndim == 2 else want
    # The stored PNG decodes to the same pixels with a plain tf.io.decode_image.
    stored = arrays.encode_frame(got)
    assert stored.format == "png"
    decoded = tf.io.decode_image(stored.data, expand_animations=False).numpy()
    np.testing.assert_array_equal(decoded, want, err_msg=KINDS[name])


def test_a_built_ct_is_windowed_by_its_own_tags_and_keeps_the_tags(tmp_path):
    path = str(tmp_path / "ct.dcm")
    stored = make_ct(path, window=(40.0, 400.0))[0]
    image = _decode(open(path, "rb").read())
    hu = stored.astype(np.float64) - 1024
    # PS3.3 C.11.2.1.2.1, LINEAR: the window (40, 400) onto 0..255.
    want = np.clip(np.rint(((hu - 39.5) / 399 + 0.5) * 255), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(image.frames[0][:, :, 0], want)
    features = image.features
    assert features["dicom/Modality"] == "CT" and features["dicom/BodyPartExamined"] == "CHEST"
    assert features["dicom/WindowCenter"] == 40.0 and features["dicom/WindowWidth"] == 400.0
    assert features["dicom/PixelSpacing"] == [0.5, 0.75]
    assert features["dicom/BitsStored"] == 12 and features["dicom/Rows"] == 24
    assert not any("Doe" in str(v) or "PID-0001" in str(v) for v in features.values())


def test_without_a_window_the_full_range_is_shown_and_monochrome1_is_inverted(tmp_path):
    path = str(tmp_path / "m1.dcm")
    stored = make_ct(path, window=None, photometric="MONOCHROME1")[0]
    got = _decode(open(path, "rb").read()).frames[0][:, :, 0]
    low, high = stored.min(), stored.max()
    want = 255 - np.rint((stored - low) * 255.0 / (high - low)).astype(np.uint8)
    np.testing.assert_array_equal(got, want)
    assert got[stored == low].min() == 255  # the lowest value shows white


def test_bit_depth_16_gives_the_modality_values_back(tmp_path):
    path = str(tmp_path / "ct.dcm")
    stored = make_ct(path, frames=3, syntax="1.2.840.10008.1.2.5")  # RLE, 3 frames
    image = _decode(open(path, "rb").read(), bit_depth=16, frames="all")
    assert len(image.frames) == 3 and image.num_frames == 3
    for frame, want in zip(image.frames, stored, strict=True):
        assert frame.dtype == np.uint16
        values = frame[:, :, 0] * image.value_scale + image.value_offset
        np.testing.assert_array_equal(values, want.astype(np.float64) - 1024)
        png = arrays.encode_frame(frame)
        back = tf.io.decode_png(png.data, dtype=tf.uint16).numpy()
        np.testing.assert_array_equal(back, frame)


def test_bit_depth_16_of_bundled_files_matches_the_modality_lut():
    for name in ("CT_small.dcm", "MR_small_bigendian.dcm", "JPEG2000.dcm"):
        data = _read(name)
        ds = pydicom.dcmread(io.BytesIO(data))
        image = _decode(data, bit_depth=16)
        values = image.frames[0][:, :, 0] * image.value_scale + image.value_offset
        np.testing.assert_allclose(values, apply_modality_lut(ds.pixel_array, ds), err_msg=name)


def test_preamble_less_files_are_dicom_in_either_byte_order():
    for name in ("ExplVR_LitEndNoMeta.dcm", "ExplVR_BigEndNoMeta.dcm"):
        assert dicom.looks_like_dicom(_read(name)), name
    for not_dicom in (b"hello world, plain text", b"\x89PNG\r\n\x1a\n" + bytes(200), bytes(300)):
        assert not dicom.looks_like_dicom(not_dicom)


@pytest.mark.parametrize(
    "name, reason, words",
    [
        ("rtplan.dcm", "no_pixel_data", "RT Plan Storage"),
        ("rtstruct.dcm", "no_pixel_data", "RT Structure Set"),
        ("test-SR.dcm", "no_pixel_data", "SR Storage"),
        ("waveform_ecg.dcm", "no_pixel_data", "ECG"),
        ("MR_truncated.dcm", "truncated", "(7FE0,0010)"),
        ("rtplan_truncated.dcm", "truncated", "ends before"),
    ],
)
def test_dicom_without_an_image_or_cut_is_rejected_by_name(name, reason, words):
    with pytest.raises(Rejected) as e:
        check_image(_read(name), CheckOptions())
    assert e.value.reason == reason and words in e.value.detail, e.value.detail


def test_a_cut_file_is_truncated_wherever_it_is_cut():
    data = _read("CT_small.dcm")
    for cut in (400, 2000, len(data) // 2, len(data) - 10):
        with pytest.raises(Rejected) as e:
            check_image(data[:cut], CheckOptions())
        assert e.value.reason == "truncated", (cut, e.value.detail)


def test_a_transfer_syntax_without_a_decoder_is_named():
    # The same encapsulated JPEG 2000 data, declared as Part 2 multi-component (same length).
    data = _read("JPEG2000.dcm").replace(b"1.2.840.10008.1.2.4.91", b"1.2.840.10008.1.2.4.93")
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions())
    assert e.value.reason == "unsupported_format"
    assert "JPEG 2000 Part 2" in e.value.detail and "1.2.840.10008.1.2.4.93" in e.value.detail


def test_check_image_stores_png_and_names_multi_frame_reasons():
    data = _read("SC_rgb_rle_2frame.dcm")
    info = check_image(data, CheckOptions())
    assert (info.format, info.source_format, info.channels) == ("png", "dicom", 3)
    assert info.transcode == "decoded_pixels,animated_first_frame"
    info = check_image(data, CheckOptions(frames="all"))
    assert info.transcode == "decoded_pixels,frame_per_record"
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions(animated="reject"))
    assert e.value.reason == "animated"
    with pytest.raises(Rejected) as e:
        check_image(_read("CT_small.dcm"), CheckOptions(max_pixels=100))
    assert e.value.reason == "too_many_pixels" and "Rows, Columns" in e.value.detail


def test_fuzzed_dicom_costs_one_file_with_a_known_reason():
    """Mutated bytes of several kinds: each ends written or rejected with a reason, never an
    exception out of check_image (the decoder process absorbs crashes as decoder_error)."""
    rng = random.Random(58)
    seeds = [_read(n) for n in ("CT_small.dcm", "MR_small_RLE.dcm", "SC_rgb_jpeg_dcmtk.dcm")]
    outcomes = set()
    for i in range(60):
        data = bytearray(seeds[i % len(seeds)])
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(132, len(data))] = rng.randrange(256)
        if i % 5 == 0:
            data = data[: rng.randrange(200, len(data))]
        try:
            check_image(bytes(data), CheckOptions())
            outcomes.add("written")
        except Rejected as e:
            assert e.reason in REASONS
            outcomes.add(e.reason)
    assert "written" in outcomes and len(outcomes) > 1, outcomes


def test_read_tags_reads_the_header_only_and_ignores_other_files(tmp_path):
    path = str(tmp_path / "ct.dcm")
    make_ct(path, patient_id="P-77", body_part="HEAD")
    with open(path, "rb") as f:
        assert dicom.read_tags(f, ("PatientID", "BodyPartExamined", "Laterality")) == {
            "PatientID": "P-77",
            "BodyPartExamined": "HEAD",
        }
    assert dicom.read_tags(io.BytesIO(b"\xff\xd8\xff" + bytes(300)), ("PatientID",)) == {}
