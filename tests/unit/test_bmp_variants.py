"""BMP variants TensorFlow's decode_image decodes and Pillow refused (BI_BITFIELDS masks, an
over-long palette, short OS/2 v2 headers, an overrunning RLE stream): each is kept, stored as a
PNG with the pixels the masks/palette say (tests/bmp_variants.py builds them byte by byte)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tests import bmp_variants
from transforms.images import bmp_repair
from transforms.images.check import check_image, encode_for_storage
from transforms.images.limits import CheckOptions

_MAX = CheckOptions().max_pixels


@pytest.mark.parametrize("name", sorted(bmp_variants.VARIANTS))
def test_variant_is_kept_as_png_with_its_pixels(name):
    data, want = bmp_variants.build(name)
    opts = CheckOptions()
    info = check_image(data, opts)
    assert (info.source_format, info.format, info.transcode) == ("bmp", "png", "bmp_to_png")
    assert (info.height, info.width, info.channels) == want.shape
    stored = encode_for_storage(data, info, opts)
    with Image.open(io.BytesIO(stored)) as im:
        assert im.format == "PNG"
        np.testing.assert_array_equal(np.asarray(im), want)


def test_bmps_pillow_reads_are_left_byte_for_byte():
    """Only the layouts Pillow refuses are rewritten: the stored PNG of every other BMP (the
    ones Pillow writes, an RLE stream, OS/2 v2 at 64 bytes) is what it was before."""
    rng = np.random.default_rng(3)
    image = Image.fromarray(rng.integers(0, 256, (6, 9, 3), dtype=np.uint8))
    for mode in ("RGB", "P", "L", "1"):
        buf = io.BytesIO()
        image.convert(mode).save(buf, "BMP")
        assert bmp_repair.for_pillow(buf.getvalue(), _MAX) is buf.getvalue()
    for name in ("rgb32bf", "rgba32abf", "pal4os2v2", "rle8overrun"):
        data, _ = bmp_variants.build(name)
        assert bmp_repair.for_pillow(data, _MAX) is data, name
    for name in ("rgb32-111110", "pal8oversize", "pal8os2v2-16", "pal4os2v2-16", "rle8wrapping"):
        data, _ = bmp_variants.build(name)
        assert bmp_repair.for_pillow(data, _MAX) != data, name


def test_damaged_headers_are_still_rejected_not_repaired():
    data, _ = bmp_variants.build("rgb32-111110")
    for cut in (20, 40, 60, 80):
        assert bmp_repair.for_pillow(data[:cut], _MAX) is not None  # never raises
    from core.rejects import Rejected

    with pytest.raises(Rejected) as e:
        check_image(data[:70], CheckOptions())
    assert e.value.reason in ("corrupt", "truncated")
    # An RLE stream that just stops (a cut file, no end-of-bitmap) is not padded: still rejected.
    data, _ = bmp_variants.build("rle8overrun")
    cut = data[: len(data) - 40]
    assert bmp_repair.for_pillow(cut, _MAX) is cut
    with pytest.raises(Rejected) as e:
        check_image(cut, CheckOptions())
    assert e.value.reason in ("corrupt", "truncated")
