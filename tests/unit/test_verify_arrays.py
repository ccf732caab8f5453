"""`imgrec verify` on records of images decoded to arrays, written here by hand: raw samples of
any dtype and band count, 8- and 16-bit PNGs of 1-4 channels, --store pixels RGB; and what it
names when one of them is broken (size, dtype, channels, PNG depth, pixel_layouts)."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
import tensorflow as tf

from core import schema
from core.tfrecord import write_record
from pipeline.verify import verify_dataset

_RNG = np.random.default_rng(59)
_SHARD = "train/train-00000-of-00001.tfrecord"


def _png(array: np.ndarray) -> bytes:
    return tf.io.encode_png(array).numpy()


def _jpeg(array: np.ndarray) -> bytes:
    return tf.io.encode_jpeg(array).numpy()


def _record(encoded: bytes, fmt: str, shape: tuple, dtype: str, **extra) -> dict:
    """One record's fields: make_example's arguments and its image/dtype (as arrays.py writes)."""
    h, w, c = shape
    return {
        "encoded": encoded,
        "image_format": fmt,
        "height": h,
        "width": w,
        "channels": c,
        "extra": {schema.DTYPE: dtype, **extra} if dtype is not None else None,
    }


def _raw(array: np.ndarray) -> dict:
    """A raw record as arrays.encode_frame stores it: little-endian samples, H x W x C."""
    data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return _record(data, "raw", array.shape, array.dtype.name, **{schema.VALUE_SCALE: 1.0})


def _every_form() -> list[dict]:
    rgb = _RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    forms = [
        _record(_jpeg(rgb), "jpeg", (6, 5, 3), None),  # a photo: no image/dtype
        _record(rgb.tobytes(), "raw", (6, 5, 3), ""),  # --store pixels of a photo
        _raw(rgb),  # --store pixels of an array image: uint8 RGB
        _raw(_RNG.integers(0, 10000, (7, 4, 13), dtype=np.uint16)),  # multispectral
        _raw(_RNG.random((3, 9, 1), dtype=np.float32)),  # a float TIFF, --bit_depth 16
        _raw(_RNG.integers(-5, 5, (2, 3, 6), dtype=np.int16)),
        _raw(_RNG.random((4, 4, 2)).astype(np.float64)),
    ]
    for c in (1, 2, 3, 4):
        for dtype, top in ((np.uint8, 256), (np.uint16, 65536)):
            pixels = _RNG.integers(0, top, (5, 8, c), dtype=dtype)
            forms.append(_record(_png(pixels), "png", pixels.shape, np.dtype(dtype).name))
    return forms


def _layout(fields: dict) -> str:
    dtype = (fields["extra"] or {}).get(schema.DTYPE) or "uint8"
    return f"{dtype}x{fields['channels']}"


def _write(root, records: list[dict], transcode: str = "auto", layouts: dict | None = None) -> str:
    """A dataset of one shard holding `records`, with the dataset_info.json the writer makes."""
    (root / "train").mkdir(parents=True)
    buf = io.BytesIO()
    for index, fields in enumerate(records):
        example = schema.make_example(
            label=0, label_text="a", filename=f"{index}.tif",
            sha256=hashlib.sha256(fields["encoded"]).hexdigest(), **fields,
        )  # fmt: skip
        write_record(buf, example)
    data = buf.getvalue()
    (root / _SHARD).write_bytes(data)
    counted = {}
    for fields in records:
        counted[_layout(fields)] = counted.get(_layout(fields), 0) + 1
    n = len(records)
    split = {
        "num_examples": n,
        "num_bytes": len(data),
        "shards": [
            {
                "file": _SHARD,
                "num_examples": n,
                "num_bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        ],
        "pixel_layouts": counted if layouts is None else layouts,
    }
    info = {
        "num_listed": n, "num_written": n, "num_rejected": 0, "num_duplicates": 0,
        "label_names": ["a"], "splits": {"train": split}, "transcode": transcode,
    }  # fmt: skip
    (root / schema.DATASET_INFO).write_text(json.dumps(info))
    return str(root)


def test_every_stored_form_verifies(tmp_path):
    report = verify_dataset(_write(tmp_path, _every_form()))
    assert report.ok, report.problems
    assert report.records == len(_every_form())


@pytest.mark.parametrize(
    "broken, expected",
    [
        (
            lambda r: r | {"encoded": r["encoded"][:-2]},  # two bytes short
            "raw pixels: 726 bytes, height*width*channels*itemsize = 7*4*13*2 = 728",
        ),
        (
            lambda r: r | {"extra": r["extra"] | {schema.DTYPE: "uint12"}},
            "raw pixels of unknown image/dtype 'uint12'",
        ),
        (lambda r: r | {"channels": 12}, "= 7*4*12*2 = 672"),
        (lambda r: r | {"height": 0}, "raw pixels with shape 0x4x13"),
    ],
    ids=["size", "dtype", "channels", "height"],
)
def test_a_broken_raw_record_is_named_by_shard_and_record(tmp_path, broken, expected):
    records = _every_form()
    records[3] = broken(records[3])  # the 13-band uint16 record
    report = verify_dataset(_write(tmp_path, records, layouts={}))
    problems = [p for p in report.problems if "pixel layouts" not in p]
    assert len(problems) == 1 and problems[0].startswith(f"{_SHARD}: record 3: "), problems
    assert expected in problems[0]


def test_a_store_pixels_record_without_dtype_holds_three_channels(tmp_path):
    gray = _record(bytes(30), "raw", (6, 5, 1), "")
    (problem,) = verify_dataset(_write(tmp_path, [gray])).problems
    assert "raw pixels without image/dtype in 1 channels" in problem


def test_a_png_whose_depth_or_channels_differ_from_the_example_is_named(tmp_path):
    wide = _RNG.integers(0, 65536, (5, 8, 3), dtype=np.uint16)
    records = [
        _record(_png(wide), "png", wide.shape, "uint8"),  # 16-bit samples said to be 8
        _record(_png(wide[:, :, :1]), "png", (5, 8, 3), "uint16"),  # gray said to be RGB
    ]
    problems = verify_dataset(_write(tmp_path, records)).problems
    assert problems == [
        f"{_SHARD}: record 0: a 16-bit PNG, image/dtype says uint8",
        f"{_SHARD}: record 1: decoded 1 channels, image/channels says 3",
    ]


def test_pixel_layouts_must_match_the_records(tmp_path):
    records = _every_form()
    wrong = {"uint8x3": len(records)}
    (problem,) = verify_dataset(_write(tmp_path, records, layouts=wrong)).problems
    assert problem.startswith("split train: pixel layouts ") and "uint16x13 1" in problem
    assert problem.endswith(f"dataset_info says uint8x3 {len(records)}")


def test_a_transcode_jpeg_dataset_keeps_bands_jpeg_cannot_hold_raw(tmp_path):
    rgb = _RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8)
    records = [
        _record(_jpeg(rgb), "jpeg", rgb.shape, "uint8"),
        _raw(_RNG.integers(0, 10000, (7, 4, 13), dtype=np.uint16)),  # no JPEG holds it
        _raw(rgb),  # 8-bit: that run would have written a JPEG
        _record(_png(rgb), "png", rgb.shape, "uint8"),
        _raw(_RNG.integers(0, 256, (7, 4, 6), dtype=np.uint8)),  # 6 bands: no JPEG holds them
    ]
    problems = verify_dataset(_write(tmp_path, records, transcode="jpeg")).problems
    assert problems == [
        f"{_SHARD}: record {i}: '{fmt}' record in a --transcode jpeg dataset "
        "(JPEG-only readers fail on it)"
        for i, fmt in ((2, "raw"), (3, "png"))
    ]
