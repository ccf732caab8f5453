"""Images decoded to arrays, beyond DICOM's own rules: 16-bit PNGs (8-bit by default, kept with
--bit_depth 16), --max_side on DICOM and 16-bit PNG frames, --store pixels|smart records.

Sources are written by other programs (libpng through imagecodecs, Pillow, pydicom) and the
stored pixels compared with those programs' own reads."""

from __future__ import annotations

import io

import imagecodecs
import numpy as np
import pytest
from PIL import Image

from core.rejects import Rejected
from pipeline.options import ConvertConfig, OptionError
from tests.dicom_files import make_ct
from transforms.images import array_contract, arrays, store_modes
from transforms.images.check import check_image, encode_for_storage
from transforms.images.limits import CheckOptions

tf = pytest.importorskip("tensorflow")

# PNG's channel counts: gray, gray + alpha, RGB, RGBA.
CHANNELS = (1, 2, 3, 4)


def _samples(channels: int, height: int = 30, width: int = 44, seed: int = 0) -> np.ndarray:
    """16-bit samples over the whole range, the extremes included."""
    rng = np.random.default_rng(seed + channels)
    samples = rng.integers(0, 65536, (height, width, channels), dtype=np.uint16)
    samples[0, 0], samples[0, 1] = 0, 65535
    return samples


def _png16(samples: np.ndarray) -> bytes:
    """A 16-bit PNG written by libpng (imagecodecs)."""
    data = imagecodecs.png_encode(samples if samples.shape[2] > 1 else samples[:, :, 0])
    assert data[24] == 16  # IHDR bit depth
    return data


def _to_8bit(samples: np.ndarray) -> np.ndarray:
    """The documented rule: round(v * 255 / 65535), computed here independently."""
    return ((samples.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)


def _store(data: bytes, opts: CheckOptions, store: str = "encoded"):
    info = check_image(data, opts)
    return info, store_modes.store_records(data, info, opts, store)


def _ct(tmp_path, **kwargs) -> bytes:
    path = str(tmp_path / "ct.dcm")
    make_ct(path, **kwargs)
    return open(path, "rb").read()


# ----------------------------------------------------------------------------- 16-bit PNG
@pytest.mark.parametrize("channels", CHANNELS)
def test_a_16bit_png_is_stored_8bit_by_default_rounded_from_its_full_range(channels):
    samples = _samples(channels)
    data = _png16(samples)
    assert np.array_equal(imagecodecs.png_decode(data).reshape(samples.shape), samples)
    info, [record] = _store(data, CheckOptions())
    assert (info.format, info.source_format, info.transcode) == ("png", "png16", "decoded_pixels")
    assert (record.format, record.height, record.width, record.channels) == (
        "png",
        30,
        44,
        channels,
    )
    assert record.data[24] == 8 and record.features["image/dtype"] == "uint8"
    stored = tf.io.decode_png(record.data, channels=0).numpy()
    assert np.array_equal(stored, _to_8bit(samples))
    # The stored bytes are what the inspection decoded and encode_for_storage returns.
    assert encode_for_storage(data, info, CheckOptions()) == record.data


def test_a_16bit_gray_png_written_by_pillow_matches_pillows_own_read():
    samples = _samples(1)[:, :, 0]
    out = io.BytesIO()
    Image.fromarray(samples).save(out, "PNG")
    data = out.getvalue()
    pillow = np.asarray(Image.open(io.BytesIO(data)))
    assert Image.open(io.BytesIO(data)).mode == "I;16" and np.array_equal(pillow, samples)
    _, [record] = _store(data, CheckOptions())
    assert np.array_equal(tf.io.decode_png(record.data).numpy()[:, :, 0], _to_8bit(pillow))
    _, [kept] = _store(data, CheckOptions(bit_depth=16))
    decoded = tf.io.decode_png(kept.data, dtype=tf.uint16).numpy()[:, :, 0]
    assert np.array_equal(decoded, pillow)


@pytest.mark.parametrize("channels", CHANNELS)
def test_bit_depth_16_stores_the_png_as_it_is(channels):
    samples = _samples(channels)
    data = _png16(samples)
    info, [record] = _store(data, CheckOptions(bit_depth=16))
    assert (info.format, info.source_format, info.transcode, info.channels) == (
        "png",
        "png",
        "",
        channels,
    )
    assert record.data is data and not record.raw
    assert np.array_equal(tf.io.decode_png(record.data, dtype=tf.uint16).numpy(), samples)


def test_the_8bit_png_path_is_untouched():
    pixels = _samples(3).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    info, [record] = _store(out.getvalue(), CheckOptions())
    assert (info.source_format, info.transcode, record.features) == ("png", "", None)


@pytest.mark.parametrize("channels", CHANNELS)
def test_max_side_resizes_a_16bit_png_at_either_depth(channels):
    samples = _samples(channels, height=60, width=90)
    data = _png16(samples)
    eight, [small] = _store(data, CheckOptions(max_side=30))
    assert eight.transcode == "decoded_pixels,max_side" and (small.height, small.width) == (20, 30)
    # 8 bits: Pillow's resize of the 8-bit image in its own mode, as a photo is resized.
    viewed = _to_8bit(samples)
    mode_pixels = viewed[:, :, 0] if channels == 1 else viewed
    want = np.asarray(Image.fromarray(mode_pixels).resize((30, 20), Image.Resampling.LANCZOS))
    got = tf.io.decode_png(small.data, channels=0).numpy()
    assert np.array_equal(got.reshape(want.shape), want)
    # 16 bits: each band through Pillow's 32-bit integer resize, 16-bit PNG, dtype recorded.
    wide, [kept] = _store(data, CheckOptions(max_side=30, bit_depth=16, resize_filter="bilinear"))
    assert wide.transcode == "decoded_pixels,max_side" and kept.features["image/dtype"] == "uint16"
    got16 = tf.io.decode_png(kept.data, dtype=tf.uint16).numpy()
    for b in range(channels):
        band = Image.fromarray(samples[:, :, b].astype(np.int32))
        ref = np.asarray(band.resize((30, 20), Image.Resampling.BILINEAR))
        assert np.array_equal(got16[:, :, b], np.clip(ref, 0, 65535)), b


def test_a_16bit_png_is_turned_upright_by_its_exif_orientation():
    samples = _samples(1, height=20, width=30)[:, :, 0]
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees clockwise to view
    out = io.BytesIO()
    Image.fromarray(samples).save(out, "PNG", exif=exif)
    data = out.getvalue()
    info, [record] = _store(data, CheckOptions(bit_depth=16))
    assert info.transcode == "decoded_pixels,exif_orientation" and (info.height, info.width) == (
        30,
        20,
    )
    upright = np.asarray(Image.fromarray(samples).transpose(Image.Transpose.ROTATE_270))
    assert np.array_equal(tf.io.decode_png(record.data, dtype=tf.uint16).numpy()[:, :, 0], upright)
    plain = check_image(data, CheckOptions(bit_depth=16, apply_exif_orientation=False))
    assert (plain.transcode, plain.height) == ("", 20)


def test_transcode_jpeg_re_encodes_a_16bit_png_as_any_png():
    info = check_image(_png16(_samples(3)), CheckOptions(transcode="jpeg"))
    assert (info.format, info.source_format, info.transcode) == ("jpeg", "png", "png_to_jpeg")


def test_a_cut_16bit_png_is_truncated():
    data = _png16(_samples(3, height=80, width=80))
    with pytest.raises(Rejected) as e:
        check_image(data[: len(data) // 2], CheckOptions())
    assert e.value.reason == "truncated", e.value.detail


# ----------------------------------------------------------------------------- --max_side
def test_max_side_downscales_dicom_frames_as_photos_are(tmp_path):
    data = _ct(tmp_path, rows=40, columns=100, frames=2)
    full = arrays.decode("dicom", data, CheckOptions(frames="all"))
    small = arrays.decode("dicom", data, CheckOptions(frames="all", max_side=50))
    assert full.reasons == [] and small.reasons == ["max_side"]
    assert [f.shape for f in small.frames] == [(20, 50, 1)] * 2
    for before, after in zip(full.frames, small.frames, strict=True):
        want = Image.fromarray(before[:, :, 0]).resize((50, 20), Image.Resampling.LANCZOS)
        assert np.array_equal(after[:, :, 0], np.asarray(want))
    info = check_image(data, CheckOptions(max_side=50))
    assert (info.height, info.width) == (20, 50)
    assert info.transcode == "decoded_pixels,animated_first_frame,max_side"
    # The tags stay the file's (docs/dicom.md: the spacing of the stored pixels scales).
    assert small.features["dicom/Columns"] == 100


def test_max_side_keeps_bit_depth_16_values_in_range_and_leaves_small_images_alone(tmp_path):
    data = _ct(tmp_path, rows=40, columns=100)
    small = arrays.decode("dicom", data, CheckOptions(bit_depth=16, max_side=25))
    assert small.frames[0].dtype == np.uint16 and small.frames[0].shape == (10, 25, 1)
    same = arrays.decode("dicom", data, CheckOptions(max_side=100))
    assert same.frames[0].shape == (40, 100, 1) and same.reasons == []


def test_a_frame_downscaled_below_min_side_is_too_small(tmp_path):
    data = _ct(tmp_path, rows=8, columns=100)
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions(max_side=50, min_side=5))
    assert e.value.reason == "too_small" and "--min_side 5" in e.value.detail


@pytest.mark.parametrize("dtype", ["int16", "uint32", "float32"])
def test_other_dtypes_resize_band_by_band_in_their_dtype(dtype):
    rng = np.random.default_rng(3)
    frame = (rng.random((30, 60, 5)) * 1000).astype(dtype)
    image = array_contract.ArrayImage([frame], 1)
    small = arrays.fit_max_side(image, CheckOptions(max_side=20, resize_filter="bicubic"))
    got = small.frames[0]
    assert got.dtype == frame.dtype and got.shape == (10, 20, 5)
    mode = np.int32 if dtype == "int16" else np.float32
    band = Image.fromarray(frame[:, :, 4].astype(mode)).resize((20, 10), Image.Resampling.BICUBIC)
    want = np.asarray(band)
    if dtype != "float32":
        want = np.clip(np.rint(want), np.iinfo(dtype).min, np.iinfo(dtype).max)
    assert np.array_equal(got[:, :, 4], want.astype(dtype))


# ----------------------------------------------------------------------------- --store pixels
def test_store_pixels_writes_dicom_frames_as_raw_rgb_like_photos(tmp_path):
    data = _ct(tmp_path, rows=40, columns=60, frames=3)
    opts = CheckOptions(frames="all", max_side=30)
    _, encoded = _store(data, opts)
    _, pixels = _store(data, opts, "pixels")
    assert len(pixels) == len(encoded) == 3
    for png, raw in zip(encoded, pixels, strict=True):
        assert (raw.format, raw.raw, raw.channels) == ("raw", True, 3)
        assert (raw.height, raw.width) == (png.height, png.width) == (20, 30)
        shown = tf.io.decode_image(png.data, channels=3).numpy()
        assert np.array_equal(np.frombuffer(raw.data, np.uint8).reshape(20, 30, 3), shown)
        assert raw.features["image/frame"] == png.features["image/frame"]
        assert "image/value_scale" not in raw.features
    assert [r.raw for r in encoded] == [False] * 3


def test_store_smart_keeps_small_dicom_frames_raw_and_large_ones_png(tmp_path):
    _, [small] = _store(_ct(tmp_path, rows=24, columns=32), CheckOptions(), "smart")
    assert (small.format, small.raw) == ("raw", True)
    _, [large] = _store(_ct(tmp_path, rows=200, columns=200), CheckOptions(), "smart")
    assert (large.format, large.raw) == ("png", False)


@pytest.mark.parametrize("store", ["pixels", "smart"])
def test_store_pixels_or_smart_with_bit_depth_16_is_refused(store):
    with pytest.raises(OptionError, match=rf"--store {store} with --bit_depth 16"):
        ConvertConfig(
            inputs=("x/*",),
            manifest=None,
            output="out",
            store=store,
            check=CheckOptions(bit_depth=16, max_side=64),
        )


def test_transcode_jpeg_keeps_more_than_four_bands_raw():
    """--transcode jpeg: a JPEG holds 1 or 3 bands; an 8-bit image of more stays whole, raw."""
    bands = np.random.default_rng(6).integers(0, 256, (5, 7, 6), dtype=np.uint8)
    stored = arrays.encode_frame(bands, jpeg_quality=90)
    assert (stored.format, stored.channels, stored.dtype) == ("raw", 6, "uint8")
    assert np.frombuffer(stored.data, np.uint8).reshape(5, 7, 6).tolist() == bands.tolist()
    rgb = arrays.encode_frame(bands[:, :, :3], jpeg_quality=90)
    assert (rgb.format, rgb.channels) == ("jpeg", 3)


def test_a_side_past_an_encoders_limit_is_stored_raw():
    """libpng writes no side over a million (TensorFlow's encoder fails), libjpeg none over 65,500:
    such a frame (here a TIFF strip tifffile wrote) is stored raw, every sample kept, where it
    used to stop the check with TensorFlow's InternalError. Shorter frames keep PNG and JPEG."""
    import tifffile

    strip = np.random.default_rng(7).integers(0, 256, (1_000_001, 2, 3), dtype=np.uint8)
    buf = io.BytesIO()
    tifffile.imwrite(buf, strip, photometric="rgb")
    info = check_image(buf.getvalue(), CheckOptions())
    assert (info.format, info.height, info.width, info.channels) == ("raw", 1_000_001, 2, 3)
    stored = encode_for_storage(buf.getvalue(), info, CheckOptions())
    assert np.frombuffer(stored, np.uint8).reshape(strip.shape).tolist() == strip.tolist()
    assert arrays.encode_frame(strip[:1_000_000]).format == "png"
    wide = np.zeros((1, 65_501, 1), np.uint8)
    assert arrays.encode_frame(wide, jpeg_quality=90).format == "png"
    assert arrays.encode_frame(wide[:, :65_500], jpeg_quality=90).format == "jpeg"
