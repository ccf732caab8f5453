"""make_dataset's dtype=, channels= and bands= resolved against a split's pixel layouts
(pipeline/reader/bands.py): which path records take, and the errors that name the fix."""

from __future__ import annotations

import numpy as np
import pytest

from core import raw_pixels
from pipeline.reader.bands import pixel_output, pixel_output_of_info

tf = pytest.importorskip("tensorflow")

PHOTOS = {"pixel_layouts": {"uint8x1": 4, "uint8x3": 90, "uint16x1": 2}}
SCENES = {"pixel_layouts": {"uint16x13": 8}}
MIXED = {"pixel_layouts": {"uint8x3": 5, "uint16x13": 8}}


def test_photos_with_defaults_keep_the_photo_path():
    out = pixel_output(PHOTOS, "train")
    assert (out.dtype, out.channels, out.general) == (tf.uint8, 3, False)


def test_a_dataset_without_layouts_is_read_as_photos():
    assert not pixel_output({}, "train").general


def test_multi_band_records_take_the_general_path_even_with_defaults():
    out = pixel_output(SCENES, "train")
    assert out.general and out.channels == 3 and "uint16" in out.raw_dtypes


@pytest.mark.parametrize(
    "kwargs, channels",
    [({"channels": None}, 13), ({"bands": [3, 2, 1]}, 3), ({"bands": [7]}, 1),
     ({"dtype": tf.uint16}, 3), ({"dtype": "float32", "channels": None}, 13)],
)  # fmt: skip
def test_asking_for_bands_or_depth_sets_the_output(kwargs, channels):
    out = pixel_output(SCENES, "train", **kwargs)
    assert out.general and out.channels == channels


def test_channels_none_needs_one_band_count():
    with pytest.raises(ValueError, match=r"\[3, 13\] bands.*channels=3 or bands"):
        pixel_output(MIXED, "split 'train'", channels=None)


def test_channels_none_on_an_unrecorded_dataset_says_to_convert_again():
    with pytest.raises(ValueError, match="older imgrec"):
        pixel_output({}, "split 'train'", channels=None)


def test_bands_beyond_the_images_are_refused_up_front():
    with pytest.raises(ValueError, match="picks band 5.*3 band"):
        pixel_output(MIXED, "split 'train'", bands=[0, 5])


@pytest.mark.parametrize("kwargs", [{"dtype": tf.int32}, {"channels": 4}, {"bands": []}])
def test_unsupported_arguments_name_what_is_allowed(kwargs):
    with pytest.raises(ValueError, match="dtype must|channels must|bands must"):
        pixel_output(SCENES, "train", **kwargs)


def test_the_report_view_covers_every_split():
    info = {"splits": {"train": PHOTOS, "validation": SCENES}}
    assert pixel_output_of_info(info).general
    assert not pixel_output_of_info({"splits": {"train": PHOTOS}}).general


def test_as_photo_is_what_the_default_reader_returns():
    cube = np.arange(2 * 2 * 5, dtype=np.uint16).reshape(2, 2, 5) * 3000
    view = raw_pixels.as_photo(cube).numpy()
    np.testing.assert_array_equal(view, (cube[..., :3] >> 8).astype(np.uint8))
    gray = raw_pixels.as_photo(np.full((2, 2, 1), 0.5, np.float32)).numpy()
    # Float samples are fractions of the range: 0.5 * 255.5, truncated.
    assert gray.shape == (2, 2, 3) and (gray == 127).all()
