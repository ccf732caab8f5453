"""Every pixel layout the converter writes (dataset_info.json's `pixel_layouts`: image/dtype x
channels) converted from a real input and read back through `make_dataset` with each `dtype`,
`channels` and `bands` choice: DICOM (pydicom's bundled files, and the float and 64-bit ones
written here), TIFFs of each sample format and band count, 16-bit PNGs; `--bit_depth 16`,
the defaults and `--store pixels`. docs/training.md says what each choice returns."""

from __future__ import annotations

import dataclasses
import io
import json
import os

import imagecodecs
import numpy as np
import pytest
import tifffile

from core import schema
from pipeline.reader import dataset as reader
from pipeline.reader.modality import VALUE_KEYS, decode_values, to_values
from tests.dicom_files import bundled
from tests.runs import in_process, read_records

tf = pytest.importorskip("tensorflow")

HEIGHT, WIDTH = 12, 16
# Sample types of the multi-band TIFFs -> the type their records hold (transforms/images/tiff.py:
# uint32 into int64, half floats as float32: types tf.io.decode_raw reads).
CUBE_TYPES = {
    "uint8": "uint8",
    "int8": "int8",
    "uint16": "uint16",
    "int16": "int16",
    "int32": "int32",
    "uint32": "int64",
    "float16": "float32",
    "float32": "float32",
    "float64": "float64",
}
# Each conversion's flags; a split per folder of its sources (--split_from path).
CONVERSIONS = {
    "deep": ("--bit_depth", "16"),
    "eight": (),
    "pixels": ("--store", "pixels", "--max_side", "64"),
}
# split -> (its conversion, the pixel layouts its records have). Layouts of one band count and
# size share a split: one make_dataset call reads them all (channels=None needs one count).
SPLITS = {
    "dicom_ct": ("deep", {"uint16x1"}),  # 16-bit PNG
    "dicom_rgb16": ("deep", {"uint16x3"}),
    "dicom_dose": ("deep", {"uint32x1"}),  # raw 32-bit samples: decode_raw has no uint32
    "dicom_rgb32": ("deep", {"uint32x3"}),
    "png_gray_alpha": ("deep", {"uint16x2"}),
    "png_rgba": ("deep", {"uint16x4"}),
    "one_band": ("deep", {"float32x1", "float64x1", "int64x1", "uint64x1"}),
    "three_bands": ("deep", {"float32x3"}),
    "cubes": ("deep", {f"{kept}x5" for kept in CUBE_TYPES.values()}),
    "dicom_gray8": ("eight", {"uint8x1"}),
    "dicom_rgb8": ("eight", {"uint8x3"}),
    "tiff_gray_alpha": ("eight", {"uint8x2"}),
    "rgba8": ("eight", {"uint8x4"}),
    "pixels_rgb": ("pixels", {"uint8x3"}),  # raw uint8 RGB, the photo path's pixels
    "pixels_cube": ("pixels", {"uint16x5"}),
}


@dataclasses.dataclass(frozen=True)
class Source:
    """One input file and the samples its record holds (H x W x C, the stored dtype)."""

    split: str
    name: str
    data: bytes
    stored: np.ndarray


def _tiff(samples: np.ndarray, **kwargs) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, samples, **kwargs)
    return buf.getvalue()


def _cube_tiff(cube: np.ndarray) -> bytes:
    """A multi-band TIFF (bands planar, as satellite scenes are) of an H x W x C cube."""
    return _tiff(np.moveaxis(cube, 2, 0), photometric="minisblack", planarconfig="separate")


def _dicom(pixels: np.ndarray, *, signed: bool = False) -> bytes:
    """A one-band DICOM of `pixels` (2-D) as pydicom writes it: integers as Pixel Data,
    float32/float64 as (Double) Float Pixel Data of a parametric map."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import (
        CTImageStorage,
        ExplicitVRLittleEndian,
        ParametricMapStorage,
        generate_uid,
    )

    floats = pixels.dtype.kind == "f"
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ParametricMapStorage if floats else CTImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, generate_uid()
    ds.Modality = "OT"
    ds.Rows, ds.Columns = pixels.shape
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    bits = pixels.dtype.itemsize * 8
    ds.BitsAllocated = bits
    if floats:
        setattr(ds, "FloatPixelData" if bits == 32 else "DoubleFloatPixelData", pixels.tobytes())
    else:
        ds.BitsStored, ds.HighBit, ds.PixelRepresentation = bits, bits - 1, int(signed)
        ds.PixelData = pixels.astype(pixels.dtype.newbyteorder("<")).tobytes()
    buf = io.BytesIO()
    ds.save_as(buf, enforce_file_format=True)
    return buf.getvalue()


def _bundled(split: str, name: str, shift: int = 0) -> Source:
    """A pydicom test file; its stored samples are pydicom's, signed ones shifted by `shift`
    into uint16 (docs/dicom.md)."""
    import pydicom

    with open(bundled(name), "rb") as f:
        data = f.read()
    pixels = pydicom.dcmread(io.BytesIO(data)).pixel_array
    if shift:
        pixels = (pixels.astype(np.int64) + shift).astype(np.uint16)
    return Source(split, name, data, pixels[:, :, None] if pixels.ndim == 2 else pixels)


def _full_range(rng, dtype, bands: int) -> np.ndarray:
    """HEIGHT x WIDTH x bands samples over the dtype's whole range (floats: -0.5..1.5, fractions
    of the range past both ends)."""
    shape = (HEIGHT, WIDTH, bands)
    if np.dtype(dtype).kind == "f":
        return (rng.random(shape) * 2 - 0.5).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _deep_sources(rng) -> list[Source]:
    """--bit_depth 16: 16-bit PNGs (DICOM, libpng's own) and raw 32-bit DICOM samples."""
    found = [
        _bundled("dicom_ct", "CT_small.dcm", shift=2**15),  # signed, shifted into uint16
        _bundled("dicom_rgb16", "SC_rgb_rle_16bit.dcm"),
        _bundled("dicom_dose", "rtdose_1frame.dcm"),
        _bundled("dicom_rgb32", "SC_rgb_rle_32bit.dcm"),
    ]
    for split, bands in (("png_gray_alpha", 2), ("png_rgba", 4)):
        pixels = _full_range(rng, np.uint16, bands)
        found.append(Source(split, f"{split}.png", imagecodecs.png_encode(pixels), pixels))
    return found + _float_and_wide_sources(rng) + _cube_sources(rng)


def _float_and_wide_sources(rng) -> list[Source]:
    """--bit_depth 16: float TIFFs of 1 and 3 bands (kept as float32), float and 64-bit DICOMs,
    and a signed 32-bit one (shifted by 2**31 into int64)."""
    gray = _full_range(rng, np.float32, 1)
    found = [Source("one_band", "float32.tif", _tiff(gray[:, :, 0]), gray)]
    signed = rng.integers(-(10**6), 10**6, (HEIGHT, WIDTH), dtype=np.int32)
    for name, pixels, stored in (
        ("float32.dcm", gray[:, :, 0], None),
        ("float64.dcm", gray[:, :, 0].astype(np.float64) / 3, None),
        ("int32.dcm", signed, signed.astype(np.int64) + 2**31),
        ("uint64.dcm", _full_range(rng, np.uint64, 1)[:, :, 0], None),
    ):
        data = _dicom(pixels, signed=pixels.dtype == np.int32)
        found.append(
            Source("one_band", name, data, (pixels if stored is None else stored)[..., None])
        )
    rgb = _full_range(rng, np.float16, 3)
    data = _tiff(rgb, photometric="rgb")
    return found + [Source("three_bands", "float16.tif", data, rgb.astype(np.float32))]


def _cube_sources(rng) -> list[Source]:
    """5-band TIFFs of every sample type, kept whole in the type tiff.py stores it as."""
    found = []
    for dtype, kept in CUBE_TYPES.items():
        cube = _full_range(rng, dtype, 5)
        found.append(Source("cubes", f"{dtype}.tif", _cube_tiff(cube), cube.astype(kept)))
    return found


def _eight_sources(rng) -> list[Source]:
    """Defaults (--bit_depth 8): 8-bit PNGs of DICOMs whose viewed pixels are their own (no
    window, the full 0..255 range), TIFFs, and a 16-bit PNG rounded to 8 bits."""
    found = [_bundled("dicom_gray8", "image_dfl.dcm"), _bundled("dicom_rgb8", "SC_rgb_rle.dcm")]
    gray_alpha = _full_range(rng, np.uint8, 2)
    data = _tiff(gray_alpha, photometric="minisblack", extrasamples=["unassalpha"])
    found.append(Source("tiff_gray_alpha", "gray_alpha.tif", data, gray_alpha))
    rgba = _full_range(rng, np.uint8, 4)
    data = _tiff(rgba, photometric="rgb", extrasamples=["unassalpha"])
    found.append(Source("rgba8", "rgba.tif", data, rgba))
    rgba16 = _full_range(rng, np.uint16, 4)
    rounded = ((rgba16.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)
    found.append(Source("rgba8", "rgba16.png", imagecodecs.png_encode(rgba16), rounded))
    return found


def _pixels_sources(rng) -> list[Source]:
    """--store pixels: an RGB TIFF as raw uint8 RGB; a cube keeps its own samples, raw."""
    rgb = _full_range(rng, np.uint8, 3)
    cube = _full_range(rng, np.uint16, 5)
    return [
        Source("pixels_rgb", "rgb.tif", _tiff(rgb, photometric="rgb"), rgb),
        Source("pixels_cube", "cube.tif", _cube_tiff(cube), cube),
    ]


@dataclasses.dataclass(frozen=True)
class Converted:
    outputs: dict  # conversion -> its output folder
    infos: dict  # conversion -> its dataset_info.json
    sources: dict  # split -> {file name: Source}


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Converted:
    """Each conversion of its sources, `<split>/<label>/<file>` under its own input root."""
    rng = np.random.default_rng(68)
    root = tmp_path_factory.mktemp("layouts")
    built = {"deep": _deep_sources(rng), "eight": _eight_sources(rng)}
    built["pixels"] = _pixels_sources(rng)
    outputs, infos = {}, {}
    for conversion, flags in CONVERSIONS.items():
        src, out = root / conversion, str(root / f"{conversion}-out")
        for source in built[conversion]:
            folder = src / source.split / "scan"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / source.name).write_bytes(source.data)
        names = sorted({s.split for s in built[conversion]})
        fractions = ",".join(f"{n}={int(n == names[0])}" for n in names)  # fractions sum to 1
        in_process("convert", "--input", f"{src}/**", "--output", out, *flags, "--split_from",
                   "path", "--splits", fractions, "--no_analyze", "--no_report")  # fmt: skip
        outputs[conversion] = out
        with open(os.path.join(out, schema.DATASET_INFO)) as f:
            infos[conversion] = json.load(f)
    sources: dict = {}
    for source in (s for found in built.values() for s in found):
        sources.setdefault(source.split, {})[source.name] = source
    return Converted(outputs, infos, sources)


def as_output(stored: np.ndarray, dtype: str) -> np.ndarray:
    """What `make_dataset(dtype=...)` returns of `stored` samples (docs/training.md): float32 the
    values; integers as tf.image.convert_image_dtype converts (wider ones keep their high bits;
    uint8 -> uint16 times 257); floats as fractions of the range, truncated and clipped."""
    if dtype == "float32":
        return stored.astype(np.float32)
    if stored.dtype == dtype:
        return stored
    top = np.iinfo(dtype).max
    if stored.dtype.kind == "f":  # scaled in the stored precision, as convert_image_dtype does
        return np.clip(stored * stored.dtype.type(top + 0.5), 0, top).astype(dtype)
    if stored.dtype == np.uint8:
        return stored.astype(dtype) * 257
    in_top = np.iinfo(stored.dtype).max
    if in_top > top:
        return np.clip(stored // stored.dtype.type((in_top + 1) // (top + 1)), 0, top).astype(dtype)
    return (np.clip(stored.astype(np.int64), 0, top) * ((top + 1) // (in_top + 1))).astype(dtype)


def _three(stored: np.ndarray) -> list[int]:
    """The bands channels=3 picks: gray repeated (and its alpha dropped), else the first three."""
    return [0, 0, 0] if stored.shape[2] < 3 else [0, 1, 2]


def _read(converted: Converted, split: str, **kwargs) -> dict[str, np.ndarray]:
    """{file name: the image} of every record of `split`, evaluated whole (no crop, no
    resize: the stored samples exactly)."""
    sources = converted.sources[split]
    height, width = next(iter(sources.values())).stored.shape[:2]
    out = converted.outputs[SPLITS[split][0]]
    ds = reader.make_dataset(out, split, 1, image_size=(height, width), crop_fraction=1.0,
                             extra_features=[schema.FILENAME], **kwargs)  # fmt: skip
    images = {}
    for batch, _, extras in ds:
        name = os.path.basename(extras[schema.FILENAME].numpy()[0].decode())
        images[name] = batch.numpy()[0]
    assert sorted(images) == sorted(sources), split
    return images


@pytest.mark.parametrize("conversion", sorted({c for c, _ in SPLITS.values()}))
def test_verify_reads_every_layout(converted, conversion):
    from pipeline.verify import verify_dataset

    report = verify_dataset(converted.outputs[conversion])
    assert not report.problems, report.problems[:3]


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_each_split_holds_the_layouts_it_stands_for(converted, split):
    conversion, layouts = SPLITS[split]
    info = converted.infos[conversion]
    assert info["num_rejected"] == 0, conversion
    assert set(info["splits"][split]["pixel_layouts"]) == layouts


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_defaults_return_uint8_rgb(converted, split):
    for name, image in _read(converted, split).items():
        stored = converted.sources[split][name].stored
        assert image.dtype == np.uint8, name
        np.testing.assert_array_equal(image, as_output(stored, "uint8")[..., _three(stored)], name)


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_uint16_returns_every_band(converted, split):
    for name, image in _read(converted, split, dtype=tf.uint16, channels=None).items():
        stored = converted.sources[split][name].stored
        assert image.dtype == np.uint16, name
        np.testing.assert_array_equal(image, as_output(stored, "uint16"), name)


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_float32_returns_the_stored_values_of_the_bands_picked(converted, split):
    channels = next(iter(converted.sources[split].values())).stored.shape[2]
    bands = [channels - 1, 0]  # the last band first: an order the images do not have
    for name, image in _read(converted, split, dtype=tf.float32, bands=bands).items():
        stored = converted.sources[split][name].stored
        assert image.dtype == np.float32, name
        np.testing.assert_array_equal(image, as_output(stored, "float32")[..., bands], name)


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_uint8_returns_every_band(converted, split):
    for name, image in _read(converted, split, channels=None).items():
        stored = converted.sources[split][name].stored
        np.testing.assert_array_equal(image, as_output(stored, "uint8"), name)


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_training_reads_with_every_default(converted, split):
    """Random crops, flips and the resize to 224 x 224, of every layout."""
    out = converted.outputs[SPLITS[split][0]]
    images, labels = next(iter(reader.make_dataset(out, split, 1, training=True, seed=1)))
    assert images.dtype == tf.uint8 and images.shape == (1, 224, 224, 3)
    assert labels.numpy().tolist() == [0]  # one label: the folder "scan"


def _modality_values(source: Source) -> np.ndarray:
    """pydicom's modality values of a DICOM source (its rescale slope and intercept)."""
    import pydicom
    from pydicom.pixels import apply_modality_lut

    ds = pydicom.dcmread(io.BytesIO(source.data))
    values = apply_modality_lut(ds.pixel_array, ds).astype(np.float64)
    return values[:, :, None] if values.ndim == 2 else values


# (split, file): DICOMs whose --bit_depth 16 records map back to modality values: a shifted
# signed CT as a 16-bit PNG, an RT dose's uint32 and a signed 32-bit image's int64 (raw).
_DICOM_VALUES = [("dicom_ct", "CT_small.dcm"), ("dicom_dose", "rtdose_1frame.dcm"),
                 ("one_band", "int32.dcm")]  # fmt: skip


@pytest.mark.parametrize("split, name", _DICOM_VALUES)
def test_a_records_values_are_the_dicoms_modality_values(converted, split, name):
    source = converted.sources[split][name]
    (path,) = [
        os.path.join(converted.outputs["deep"], shard["file"])
        for shard in converted.infos["deep"]["splits"][split]["shards"]
    ]
    found = {}
    for record in read_records(path):
        ex = tf.io.parse_single_example(record, schema.feature_spec())
        found[os.path.basename(ex[schema.FILENAME].numpy().decode())] = ex
    ex = found[name]
    raw = None
    if ex[schema.FORMAT].numpy() == schema.RAW_FORMAT.encode():
        raw = tuple(ex[k] for k in (schema.HEIGHT, schema.WIDTH, schema.CHANNELS, schema.DTYPE))
    values = decode_values(ex[schema.ENCODED], *(ex[k] for k in VALUE_KEYS), raw=raw)
    assert values.dtype == tf.float32
    np.testing.assert_array_equal(values.numpy(), _modality_values(source).astype(np.float32))


@pytest.mark.parametrize("split, name", _DICOM_VALUES[:2])  # float32 holds their samples
def test_float32_batches_map_to_the_dicoms_modality_values(converted, split, name):
    out = converted.outputs["deep"]
    height, width = converted.sources[split][name].stored.shape[:2]
    ds = reader.make_dataset(out, split, 1, image_size=(height, width), crop_fraction=1.0,
                             dtype=tf.float32, channels=None, extra_features=VALUE_KEYS)  # fmt: skip
    images, _, extras = next(iter(ds))
    values = to_values(images, *(extras[k] for k in VALUE_KEYS)).numpy()[0]
    want = _modality_values(converted.sources[split][name]).astype(np.float32)
    np.testing.assert_array_equal(values, want)
