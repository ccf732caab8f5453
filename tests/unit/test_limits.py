"""Per-file refusals by size and declared dimensions (transforms/images/limits.py), with the exact
reason and detail a user reads in rejected.jsonl (mutants bench/MUTATION.md found alive)."""

from __future__ import annotations

import pytest

from pipeline.core.rejects import Rejected
from transforms.images.limits import CheckOptions, _check_dims, check_file_size


def _refusal(fn, *args) -> tuple[str, str]:
    with pytest.raises(Rejected) as e:
        fn(*args)
    return e.value.reason, e.value.detail


def test_an_empty_file_is_refused_with_its_size():
    assert _refusal(check_file_size, 0, CheckOptions()) == ("empty_file", "0 bytes")
    check_file_size(1, CheckOptions())  # one byte is not empty


def test_a_file_over_max_file_mb_is_refused_in_decimal_megabytes():
    opts = CheckOptions(max_file_mb=2)
    check_file_size(2_000_000, opts)
    assert _refusal(check_file_size, 2_000_001, opts) == (
        "file_too_large",
        "2000001 bytes > --max_file_mb 2",
    )


@pytest.mark.parametrize("width, height", [(0, 5), (5, 0), (0, 0), (-1, 5), (5, -3)])
def test_a_header_declaring_no_pixels_is_corrupt(width, height):
    assert _refusal(_check_dims, width, height, CheckOptions(), "PNG header") == (
        "corrupt",
        f"the PNG header declares a {width}x{height} image",
    )


def test_declared_dimensions_against_the_pixel_and_side_limits():
    opts = CheckOptions(max_pixels=100, min_side=3)
    _check_dims(10, 10, opts, "JPEG header")  # exactly max_pixels
    _check_dims(3, 33, opts, "JPEG header")  # exactly min_side
    assert _refusal(_check_dims, 11, 10, opts, "JPEG header") == (
        "too_many_pixels",
        "the JPEG header declares 11x10 = 110 pixels > --max_pixels 100",
    )
    assert _refusal(_check_dims, 2, 40, opts, "JPEG header") == (
        "too_small",
        "2x40: shorter side < --min_side 3",
    )
