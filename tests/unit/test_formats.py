"""Every image TensorFlow decodes is kept: BMP (every header version) as PNG, WebP as is or PNG;
`--transcode none` keeps the strict JPEG/PNG/GIF-only behaviour."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image

from core.rejects import Rejected
from tests.format_corpus import (
    _photo,
    bmp_variant,
    webp_variants,
)
from transforms.images.check import check_image, encode_for_storage
from transforms.images.limits import CheckOptions
from transforms.images.sniff import sniff_container

tf = pytest.importorskip("tensorflow")

_IM = _photo(random.Random(4), 37, 22)  # odd width: BMP rows carry padding


def _encode(im, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _bmps() -> list[tuple[str, bytes]]:
    out = [(f"pillow_{m}", _encode(_IM.convert(m), "BMP")) for m in ("RGB", "RGBA", "L", "P", "1")]
    for size in (12, 40, 52, 56, 64, 108, 124):
        for bpp in (24, 16, 32):
            if size in (12, 64) and bpp != 24:
                continue
            for top_down in (False, True) if size != 12 else (False,):
                name = f"v{size}_{bpp}bpp{'_topdown' if top_down else ''}"
                out.append((name, bmp_variant(_IM, size, bpp, top_down)))
    return out


@pytest.mark.parametrize("name, data", _bmps(), ids=[n for n, _ in _bmps()])
def test_every_bmp_header_version_is_sniffed_and_stored_as_lossless_png(name, data):
    assert sniff_container(data) == "bmp"
    assert int.from_bytes(data[14:18], "little") in (12, 40, 52, 56, 64, 108, 124)
    info = check_image(data, CheckOptions())
    assert (info.format, info.source_format, info.transcode) == ("png", "bmp", "bmp_to_png")
    assert (info.width, info.height) == _IM.size
    stored = encode_for_storage(data, info, CheckOptions())
    assert stored.startswith(b"\x89PNG")
    got = tf.io.decode_image(stored, channels=3).numpy()
    want = np.asarray(_IM.convert("RGB"))
    if name.startswith("pillow_") and name != "pillow_RGB" and name != "pillow_RGBA":
        want = np.asarray(_IM.convert(name.split("_")[1]).convert("RGB"))
    if "16bpp" in name:  # 5-6-5: the low bits are gone
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 8, name
    else:
        assert np.array_equal(got, want), name  # lossless, top-down or bottom-up alike
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions(transcode="none"))
    assert e.value.reason == "unsupported_format" and "--transcode none" in e.value.detail
    jpeg = check_image(data, CheckOptions(transcode="jpeg"))
    assert (jpeg.format, jpeg.transcode) == ("jpeg", "unsupported_format")


def test_bm_text_and_unknown_bmp_header_sizes_are_not_bmp():
    assert sniff_container(b"BM is how this text starts" * 4) is None
    data = bytearray(bmp_variant(_IM, 40))
    data[14:18] = (41).to_bytes(4, "little")
    assert sniff_container(bytes(data)) is None
    with pytest.raises(Rejected) as e:
        check_image(bytes(data), CheckOptions())
    assert e.value.reason == "not_an_image"


@pytest.mark.parametrize("name, data", webp_variants(_IM), ids=[n for n, _ in webp_variants(_IM)])
def test_webp_variants_are_kept_as_is_when_tensorflow_reads_them_else_as_png(name, data):
    assert sniff_container(data) == "webp"
    assert data[12:16] in (b"VP8 ", b"VP8L", b"VP8X")
    info = check_image(data, CheckOptions())
    stored = encode_for_storage(data, info, CheckOptions())
    if "alpha" in name or "animated" in name:
        assert info.format == "png" and info.transcode.startswith("webp_to_png"), info
        assert ("animated_first_frame" in info.transcode) == ("animated" in name)
    else:
        assert (info.format, info.transcode) == ("webp", ""), info
        assert stored is data
    # What the reader and `imgrec verify` call on every non-JPEG record:
    image = tf.io.decode_image(stored, channels=3, expand_animations=False)
    assert tuple(image.shape) == (info.height, info.width, 3)
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions(transcode="none"))
    assert e.value.reason == "unsupported_format"
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions(animated="reject")) if "animated" in name else (
            _raise_rejected()
        )
    if "animated" in name:
        assert e.value.reason == "animated"


def _raise_rejected():
    raise Rejected("animated", "not animated: nothing to check")


def _one_frame_animation(data: bytes) -> bytes:
    """An animated WebP cut to its first ANMF frame (the VP8X animation flag stays set)."""
    out, i, frames = bytearray(data[:12]), 12, 0
    while i + 8 <= len(data):
        size = int.from_bytes(data[i + 4 : i + 8], "little")
        chunk = data[i : i + 8 + size + (size & 1)]
        frames += chunk[:4] == b"ANMF"
        if chunk[:4] != b"ANMF" or frames == 1:
            out += chunk
        i += len(chunk)
    out[4:8] = (len(out) - 8).to_bytes(4, "little")
    return bytes(out)


def test_a_one_frame_animated_webp_is_stored_as_png_not_handed_to_tensorflow():
    """libwebp calls it animated (TF refuses channels=3, and TF 2.21 corrupts its heap on
    animated WebP with channels=0), though Pillow counts one frame."""
    data = _one_frame_animation(dict(webp_variants(_IM))["animated"])
    assert data[12:16] == b"VP8X" and data[20] & 0x02 and data.count(b"ANMF") == 1
    assert Image.open(io.BytesIO(data)).n_frames == 1
    info = check_image(data, CheckOptions())
    assert (info.format, info.transcode) == ("png", "webp_to_png")
    stored = encode_for_storage(data, info, CheckOptions())
    assert tf.io.decode_image(stored, channels=3).shape == (info.height, info.width, 3)


def test_a_stored_webp_reads_through_the_reader(tmp_path):
    """The training reader decodes a record whose image/encoded is a WebP."""
    from core import schema
    from pipeline.reader import make_dataset

    data = dict(webp_variants(_IM))["lossy"]
    info = check_image(data, CheckOptions())
    assert info.format == "webp"
    ex = schema.make_example(
        encoded=data,
        image_format="webp",
        height=info.height,
        width=info.width,
        channels=info.channels,
        label=0,
        label_text="a",
        filename="x.webp",
        sha256="0" * 64,
    )
    shard = tmp_path / "train" / "train-00000-of-00001.tfrecord"
    shard.parent.mkdir()
    with tf.io.TFRecordWriter(str(shard)) as w:
        w.write(ex)
    import json

    (tmp_path / schema.DATASET_INFO).write_text(
        json.dumps(
            {
                "schema_version": schema.SCHEMA_VERSION,
                "num_listed": 1,
                "num_written": 1,
                "num_rejected": 0,
                "num_duplicates": 0,
                "label_names": ["a"],
                "splits": {
                    "train": {
                        "num_examples": 1,
                        "num_bytes": shard.stat().st_size,
                        "shards": [
                            {
                                "file": "train/train-00000-of-00001.tfrecord",
                                "num_examples": 1,
                                "num_bytes": shard.stat().st_size,
                            }
                        ],
                    }
                },
            }
        )
    )
    ds = make_dataset(str(tmp_path), "train", global_batch_size=1, image_size=(16, 16))
    images, labels = next(iter(ds))
    assert images.shape == (1, 16, 16, 3) and int(labels[0]) == 0
