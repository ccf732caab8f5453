"""DICOM: what a DICOM file is, its pixels as a viewer shows them or at full range, the tags kept.

Every DICOM rule of imgrec lives here (docs/dicom.md says what is kept and why). The pixels are
decoded by pydicom and its pylibjpeg plugins in a decoder subprocess (decoder_pool.arrays), so a
crash in a native decoder costs one file. No patient-identifying value (name, ID, birth date)
leaves this module except through `read_tags` for --group_by, whose callers hash it.
"""

from __future__ import annotations

import io
import warnings
from typing import Any, BinaryIO

import numpy as np

from core import schema
from core.rejects import Rejected
from transforms.images.array_contract import (
    ArrayImage,
    ArrayRequest,
    check_declared,
    scaled_to_8bit,
)

__all__ = [
    "IDENTIFYING_KEYWORDS",
    "decode_arrays",
    "looks_like_dicom",
    "read_tags",
    "valid_keyword",
]

# Tags that identify a patient (PS3.15 Annex E's basic profile, the patient and visit ones): never
# written; --group_by may use them (hashed), --label_from may not.
IDENTIFYING_KEYWORDS = frozenset(
    {
        "PatientName",
        "PatientID",
        "PatientBirthDate",
        "PatientBirthTime",
        "PatientBirthName",
        "PatientMotherBirthName",
        "OtherPatientIDs",
        "OtherPatientIDsSequence",
        "OtherPatientNames",
        "IssuerOfPatientID",
        "PatientAddress",
        "PatientTelephoneNumbers",
        "MedicalRecordLocator",
        "AccessionNumber",
        "ReferringPhysicianName",
        "InstitutionName",
        "InstitutionAddress",
        "StudyID",
    }
)

# Part 10 files: a 128-byte preamble, then "DICM", then the file meta group.
_PREAMBLE = 128
_MAGIC = b"DICM"
# Files written without the preamble and meta group start at a dataset's first element: a tag
# of group 0002 (meta) or 0008 (identification), in either byte order.
_FIRST_GROUPS = (0x0002, 0x0008)
_VRS = {
    b"AE", b"AS", b"AT", b"CS", b"DA", b"DS", b"DT", b"FL", b"FD", b"IS", b"LO", b"LT", b"OB",
    b"OD", b"OF", b"OL", b"OV", b"OW", b"PN", b"SH", b"SL", b"SQ", b"SS", b"ST", b"SV", b"TM",
    b"UC", b"UI", b"UL", b"UN", b"UR", b"US", b"UT", b"UV",
}  # fmt: skip
# Implicit-VR files hold a 4-byte length where explicit ones hold the VR; identification
# elements are short.
_MAX_FIRST_LENGTH = 1 << 16

# pydicom's messages for data that ends early: a cut download or copy.
_CUT_MESSAGES = (
    "end of file",
    "no tag to read",
    "unpack requires a buffer",
    "less than expected",
    "eof",
    "truncat",
)

# Monochrome photometric interpretations (windowed); MONOCHROME1 shows its lowest value white.
_MONOCHROME = ("MONOCHROME1", "MONOCHROME2")
_MAX_8BIT = 255


def looks_like_dicom(data: bytes) -> bool:
    """Whether `data` starts like a DICOM file: the preamble and DICM, or a bare dataset."""
    if data[_PREAMBLE : _PREAMBLE + 4] == _MAGIC:
        return True
    if len(data) < 8:
        return False
    for order in ("little", "big"):
        group = int.from_bytes(data[0:2], order)
        element = int.from_bytes(data[2:4], order)
        if group not in _FIRST_GROUPS or element > 0x00FF:
            continue
        if data[4:6] in _VRS or int.from_bytes(data[4:8], "little") < _MAX_FIRST_LENGTH:
            return order == "little" or data[4:6] in _VRS  # big endian is always explicit
    return False


def valid_keyword(keyword: str) -> bool:
    """Whether `keyword` names a tag of the DICOM dictionary (PatientID, BodyPartExamined...)."""
    from pydicom.datadict import tag_for_keyword

    return tag_for_keyword(keyword) is not None


def read_tags(fp: BinaryIO, keywords: tuple[str, ...]) -> dict[str, str]:
    """The values of `keywords` in the DICOM file `fp` (header only), as text; absent or empty
    ones are left out. A file that is not DICOM, or that pydicom cannot parse, gives {}."""
    import pydicom

    head = fp.read(_PREAMBLE + 4)
    if not looks_like_dicom(head):
        return {}
    fp.seek(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(
                fp, stop_before_pixels=True, specific_tags=list(keywords), force=True
            )
            found = {k: ds.get(k) for k in keywords}
    except Exception:  # noqa: BLE001  (damage is inspection's to report, with its reason)
        return {}
    return {k: _text(v) for k, v in found.items() if v is not None and _text(v)}


def decode_arrays(data: bytes, request: ArrayRequest) -> ArrayImage:
    """One DICOM file's frames (array_contract.ArrayImage): 8-bit as a viewer shows them, or the full
    range with --bit_depth 16; the kept tags as dicom/... features.

    Raises:
        Rejected: not_an_image, truncated, corrupt, no_pixel_data, unsupported_format (no
            installed decoder for its transfer syntax, named), too_many_pixels.
    """
    ds = _read(data)
    decoder = _decoder(ds)
    try:
        rows, columns = int(ds.get("Rows") or 0), int(ds.get("Columns") or 0)
        num_frames = max(1, int(ds.get("NumberOfFrames") or 1))
    except (TypeError, ValueError) as e:  # a damaged value of an integer tag
        raise _read_failure(e, "reading Rows, Columns, NumberOfFrames") from e
    check_declared(columns, rows, request, "DICOM header (Rows, Columns)")
    indices = range(num_frames) if request.frames == "all" else range(1)
    try:
        raw = [_native(decoder.as_array(ds, index=i, as_rgb=True)[0]) for i in indices]
        if request.bit_depth == 16:
            frames, scale, offset, window = _full_range(ds, raw)
        else:
            frames, window = _as_viewed(ds, raw)
            scale, offset = 1.0, 0.0
        kept = _kept_tags(ds, num_frames, window)
    except Exception as e:  # noqa: BLE001  (pydicom and its plugins raise many types)
        raise _read_failure(e, "decoding its pixel data") from e
    return ArrayImage(frames, num_frames, kept, scale, offset)


def _native(frame: np.ndarray) -> np.ndarray:
    """`frame` in this machine's byte order (big-endian files decode to big-endian arrays)."""
    return frame.astype(frame.dtype.newbyteorder("="), copy=False)


def _read(data: bytes):
    """The parsed dataset, or Rejected: not DICOM, cut (truncated) or damaged (corrupt)."""
    import pydicom

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ds = pydicom.dcmread(io.BytesIO(data), force=True)
            cut = [e.tag for e in ds.elements() if _cut_short(e)]
        except Exception as e:  # noqa: BLE001  (pydicom's parser raises many types)
            raise _read_failure(e, "reading its header") from e
    if cut:
        raise Rejected("truncated", f"DICOM element {cut[-1]} ends before its declared length")
    for w in caught:
        if "end of file" in str(w.message).lower():
            raise Rejected("truncated", f"DICOM: {w.message}")
    if not len(ds):
        raise Rejected("not_an_image", "a DICOM preamble without a dataset")
    return ds


def _cut_short(element) -> bool:
    """A raw element whose value holds fewer bytes than its header declares (pydicom keeps
    what there is of a cut file's last element without a word)."""
    value, length = getattr(element, "value", None), getattr(element, "length", None)
    if not isinstance(value, bytes) or length is None or length == 0xFFFFFFFF:
        return False
    return len(value) < length


def _read_failure(error: Exception, doing: str) -> Rejected:
    if isinstance(error, Rejected):
        return error
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    reason = "truncated" if any(m in text.lower() for m in _CUT_MESSAGES) else "corrupt"
    if isinstance(error, EOFError):
        reason = "truncated"
    return Rejected(reason, f"DICOM, {doing}: {type(error).__name__}: {text}"[:300])


def _decoder(ds):
    """pydicom's pixel decoder for `ds`'s transfer syntax, or Rejected (no pixels, no decoder)."""
    from pydicom.pixels import get_decoder
    from pydicom.uid import UID

    if not any(k in ds for k in ("PixelData", "FloatPixelData", "DoubleFloatPixelData")):
        meta = getattr(ds, "file_meta", None)
        sop = ds.get("SOPClassUID") or (meta.get("MediaStorageSOPClassUID") if meta else None)
        what = UID(str(sop)).name if sop else "no SOP Class UID"
        if "Image" in what or "Rows" in ds:
            # An image's file whose elements stop before its pixels: cut at an element's end.
            raise Rejected("truncated", f"DICOM {what} ends before its Pixel Data")
        raise Rejected("no_pixel_data", f"DICOM {what} without pixel data")
    syntax = _transfer_syntax(ds)
    try:
        decoder = get_decoder(syntax)
    except NotImplementedError:
        decoder = None
    if decoder is None or not decoder.is_available:
        raise Rejected(
            "unsupported_format",
            f"DICOM transfer syntax {syntax.name} ({syntax}): no installed decoder reads it; "
            "convert the file (e.g. dcmdjpeg/gdcmconv --raw) before the run",
        )
    return decoder


def _transfer_syntax(ds):
    """The transfer syntax from the file meta; for a bare dataset, the encoding it was read in."""
    from pydicom import uid

    syntax = ds.file_meta.get("TransferSyntaxUID") if hasattr(ds, "file_meta") else None
    if syntax:
        return uid.UID(str(syntax))
    implicit, little = ds.original_encoding
    if implicit:
        found = uid.ImplicitVRLittleEndian
    else:
        found = uid.ExplicitVRLittleEndian if little else uid.ExplicitVRBigEndian
    ds.file_meta = getattr(ds, "file_meta", None) or _empty_meta()
    ds.file_meta.TransferSyntaxUID = found
    return found


def _empty_meta():
    from pydicom.dataset import FileMetaDataset

    return FileMetaDataset()


def _as_viewed(ds, raw: list[np.ndarray]) -> tuple[list[np.ndarray], tuple[float, float]]:
    """8-bit frames as a viewer shows them, and the (center, width) window used.

    Monochrome: the modality LUT, then the file's first VOI window (or VOI LUT), else the
    frames' full range; MONOCHROME1 inverted. Palette: its colour LUT. Colour (RGB, YBR
    already converted by the decoder): scaled from BitsStored to 8 bits.
    """
    from pydicom.pixels import apply_color_lut, apply_modality_lut, apply_voi_lut

    kind = str(ds.get("PhotometricInterpretation", "")).upper()
    if kind == "PALETTE COLOR":
        bits = int(ds.RedPaletteColorLookupTableDescriptor[2])
        scaled = [scaled_to_8bit(apply_color_lut(f, ds), 0.0, 2.0**bits - 1) for f in raw]
        return scaled, (0.0, 0.0)
    if kind not in _MONOCHROME:
        top = 2.0 ** int(ds.get("BitsStored") or 8) - 1
        return [scaled_to_8bit(f, 0.0, top) for f in raw], (0.0, 0.0)
    values = [apply_modality_lut(f, ds) for f in raw]
    low, high, window = _voi_range(ds, values)
    if window != (0.0, 0.0) and "WindowWidth" in ds and "WindowCenter" in ds:
        values = [apply_voi_lut(v, ds, index=0, prefer_lut=False) for v in values]
    elif "VOILUTSequence" in ds:
        values = [apply_voi_lut(v, ds, index=0) for v in values]
    frames = [scaled_to_8bit(v, low, high) for v in values]
    if kind == "MONOCHROME1":
        frames = [_MAX_8BIT - f for f in frames]
    return frames, window


def _voi_range(ds, values: list[np.ndarray]) -> tuple[float, float, tuple[float, float]]:
    """(low, high) of what the VOI step outputs, and the window (center, width) it used."""
    center, width = _first(ds.get("WindowCenter")), _first(ds.get("WindowWidth"))
    if center is not None and width is not None and width >= 1:
        # apply_windowing's output range (PS3.3 C.11.2.1.2): the stored range through the
        # modality LUT.
        low, high = _modality_range(ds)
        return min(low, high), max(low, high), (center, width)
    if "VOILUTSequence" in ds:
        bits = int(ds.VOILUTSequence[0].LUTDescriptor[2])
        return 0.0, 2.0**bits - 1, (0.0, 0.0)
    low = float(min(v.min() for v in values))
    high = float(max(v.max() for v in values))
    return low, high, ((low + high) / 2, high - low + 1)


def _modality_range(ds) -> tuple[float, float]:
    bits = int(ds.get("BitsStored") or 16)
    if "ModalityLUTSequence" in ds:
        return 0.0, 2.0 ** int(ds.ModalityLUTSequence[0].LUTDescriptor[2]) - 1
    if int(ds.get("PixelRepresentation") or 0) == 0:
        low, high = 0.0, 2.0**bits - 1
    else:
        low, high = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1
    slope, intercept = ds.get("RescaleSlope"), ds.get("RescaleIntercept")
    if slope is not None and intercept is not None:
        low, high = low * float(slope) + float(intercept), high * float(slope) + float(intercept)
    return low, high


def _full_range(ds, raw: list[np.ndarray]):
    """--bit_depth 16: (frames, value scale, value offset, window) with stored * scale + offset =
    the modality values. Signed samples are shifted into uint16; deeper ones stay raw."""
    from pydicom.pixels import apply_color_lut, apply_modality_lut

    kind = str(ds.get("PhotometricInterpretation", "")).upper()
    if kind == "PALETTE COLOR":
        return [_channels(apply_color_lut(f, ds)) for f in raw], 1.0, 0.0, (0.0, 0.0)
    if kind not in _MONOCHROME or "ModalityLUTSequence" in ds:
        frames = raw if kind not in _MONOCHROME else [apply_modality_lut(f, ds) for f in raw]
        return [_channels(_unsigned(f)) for f in frames], 1.0, 0.0, (0.0, 0.0)
    slope = float(ds.get("RescaleSlope") or 1.0)
    intercept = float(ds.get("RescaleIntercept") or 0.0)
    bits = int(ds.get("BitsStored") or 16)
    shift = 2 ** (bits - 1) if int(ds.get("PixelRepresentation") or 0) else 0
    frames = [f.astype(np.int64) + shift for f in raw] if shift else raw
    frames = [_channels(_unsigned(f)) for f in frames]
    center, width = _first(ds.get("WindowCenter")), _first(ds.get("WindowWidth"))
    window = (center, width) if center is not None and width is not None else (0.0, 0.0)
    return frames, slope, intercept - slope * shift, window


def _unsigned(frame: np.ndarray) -> np.ndarray:
    """uint16 when every sample fits (PNG); other dtypes are stored raw as they are."""
    if frame.dtype.kind in "ui" and frame.size and frame.min() >= 0 and frame.max() <= 0xFFFF:
        return frame.astype(np.uint16)
    return frame


def _channels(frame: np.ndarray) -> np.ndarray:
    return frame[:, :, None] if frame.ndim == 2 else frame


def _first(value) -> float | None:
    """The first value of a DS element that may hold several (a window per preset)."""
    if value is None or value == "":
        return None
    try:
        return float(
            value[0] if hasattr(value, "__len__") and not isinstance(value, str) else value
        )
    except (TypeError, ValueError, IndexError):
        return None


# The tags kept in every record (schema.DICOM_KEYS), never a patient's name, ID or birth date.
_TEXT_TAGS = (
    "Modality",
    "BodyPartExamined",
    "PhotometricInterpretation",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "SOPInstanceUID",
)
_INT_TAGS = ("BitsStored", "Rows", "Columns")


def _kept_tags(ds, num_frames: int, window: tuple[float, float]) -> dict[str, Any]:
    keys = schema.DICOM_KEYS
    kept: dict[str, Any] = {keys[t]: _text(ds.get(t)) for t in _TEXT_TAGS}
    kept.update({keys[t]: int(ds.get(t) or 0) for t in _INT_TAGS})
    kept[keys["NumberOfFrames"]] = num_frames
    spacing = ds.get("PixelSpacing")
    kept[keys["PixelSpacing"]] = (
        [float(spacing[0]), float(spacing[1])] if spacing and len(spacing) == 2 else [0.0, 0.0]
    )
    kept[keys["RescaleSlope"]] = float(ds.get("RescaleSlope") or 1.0)
    kept[keys["RescaleIntercept"]] = float(ds.get("RescaleIntercept") or 0.0)
    kept[keys["WindowCenter"]], kept[keys["WindowWidth"]] = map(float, window)
    return kept


def _text(value) -> str:
    if value is None:
        return ""
    if hasattr(value, "value") and not isinstance(value, str):  # a DataElement
        value = value.value
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return "\\".join(str(v) for v in value)
    return str(value).strip()
