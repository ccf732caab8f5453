"""The --tile grid (core/tile_grid.py): starts, coverage, the last chip moved inward, options."""

from __future__ import annotations

import pytest

from core.tile_grid import TileOptions, axis_starts, chip_windows, parse_tile_size
from transforms.elements import InspectedImage, ListedFile
from transforms.tiles.cut_chips import chips_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("length", "chip", "overlap", "starts"),
    [
        (1000, 256, 0, [0, 256, 512, 744]),  # the last moved inward to end at 1000
        (1024, 256, 0, [0, 256, 512, 768]),  # an exact fit: no extra chip
        (1000, 256, 56, [0, 200, 400, 600, 744]),
        (100, 256, 0, [0]),  # shorter than a chip: one chip of the axis' length
        (256, 256, 10, [0]),
        (257, 256, 0, [0, 1]),
        (10, 3, 2, [0, 1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_axis_starts(length, chip, overlap, starts):
    assert axis_starts(length, chip, overlap) == starts


@pytest.mark.parametrize("length", [1, 7, 255, 256, 257, 1000, 10980])
@pytest.mark.parametrize(("chip", "overlap"), [(256, 0), (256, 32), (100, 99), (1, 0)])
def test_chips_cover_the_axis_inside_it_with_the_overlap(length, chip, overlap):
    starts = axis_starts(length, chip, overlap)
    size = min(chip, length)
    assert starts[0] == 0 and starts[-1] + size == length  # no padding, nothing left out
    assert starts == sorted(set(starts))
    for a, b in zip(starts, starts[1:], strict=False):
        assert 0 < b - a <= chip - overlap  # neighbours share at least the overlap


def test_chip_windows_row_by_row_first_at_the_origin():
    windows = chip_windows(300, 500, (256, 200), 0)
    assert [(w.y, w.x) for w in windows] == [
        (0, 0), (0, 200), (0, 300), (44, 0), (44, 200), (44, 300),
    ]  # fmt: skip
    assert {(w.height, w.width) for w in windows} == {(256, 200)}
    (small,) = chip_windows(30, 40, (256, 256), 8)
    assert (small.y, small.x, small.height, small.width) == (0, 0, 30, 40)


@pytest.mark.parametrize(("text", "size"), [("512", (512, 512)), ("256x128", (256, 128))])
def test_parse_tile_size(text, size):
    assert parse_tile_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "x256", "256x", "-1", "2.5", "256x0"])
def test_bad_tile_size_names_the_option(text):
    with pytest.raises(ValueError, match="--tile"):
        parse_tile_size(text)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"overlap": 256}, "--tile_overlap"),
        ({"overlap": -1}, "--tile_overlap"),
        ({"min_valid": 1.5}, "--tile_min_valid"),
        ({"min_object": -0.1}, "--tile_min_object"),
        ({"keep_empty": 2}, "--tile_keep_empty"),
    ],
)
def test_bad_tile_options_name_the_option(kwargs, option):
    with pytest.raises(ValueError, match=option):
        TileOptions(256, 512, **kwargs)


def _inspected(key: str, height: int, width: int, size: int) -> InspectedImage:
    listed = ListedFile(f"/data/{key}", key, "a", "train", size, None, group="g")
    return InspectedImage.of(
        listed,
        size=size,
        sha256="0" * 64,
        format="png",
        source_format="tiff",
        height=height,
        width=width,
        channels=4,
        transcode="decoded_pixels",
        stats=None,
    )


def test_chips_keep_the_source_split_and_group_and_share_its_bytes():
    chips = chips_of(_inspected("s/scene.tif", 300, 500, 3_000_000), TileOptions(256, 200))
    assert len(chips) == 6
    assert {(c.split, c.group, c.path, c.sha256) for c in chips} == {
        ("train", "g", "/data/s/scene.tif", "0" * 64)
    }
    assert len({c.key for c in chips}) == 6 and all(c.key.startswith("s/scene.tif#") for c in chips)
    assert [c.chip.carrier for c in chips] == [True] + [False] * 5
    assert all(c.transcode == "decoded_pixels,tile" for c in chips)
    assert all((c.height, c.width) == (256, 200) for c in chips)
    assert {(c.chip.source_height, c.chip.source_width) for c in chips} == {(300, 500)}
    assert sum(c.size for c in chips) == pytest.approx(3_000_000 * 6 * 256 * 200 / (300 * 500))


def _config(*flags: str):
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.options import ConvertConfig

    return ConvertConfig.from_options(PipelineOptions(["--input", "x", "--output", "o", *flags]))


def test_tile_options_parse_into_the_config():
    assert _config().tiles is None
    tiles = _config("--tile", "256x512", "--tile_overlap", "32", "--tile_min_valid", "0.5").tiles
    assert (tiles.height, tiles.width, tiles.overlap, tiles.min_valid) == (256, 512, 32, 0.5)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--tile_overlap", "8"), "apply to --tile: give --tile"),
        (("--tile", "big"), "--tile must be H or HxW"),
        (("--tile", "64", "--tile_overlap", "64"), "--tile_overlap must be in"),
        (("--tile", "64", "--max_side", "32"), "--tile with --max_side"),
        (("--tile", "64", "--frames", "all"), "--tile with --frames all"),
    ],
)
def test_bad_tile_flags_name_the_option_and_the_fix(flags, message):
    from pipeline.options import OptionError

    with pytest.raises(OptionError, match=message):
        _config(*flags)
