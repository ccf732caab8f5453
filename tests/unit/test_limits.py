"""Per-file refusals by size and declared dimensions (transforms/images/limits.py), with the exact
reason and detail a user reads in rejected.jsonl (mutants bench/MUTATION.md found alive)."""

from __future__ import annotations

import pytest

from core.rejects import Rejected
from transforms.images.limits import CheckOptions, check_dims, check_file_size


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
    assert _refusal(check_dims, width, height, CheckOptions(), "PNG header") == (
        "corrupt",
        f"the PNG header declares a {width}x{height} image",
    )


def test_declared_dimensions_against_the_pixel_and_side_limits():
    opts = CheckOptions(max_pixels=100, min_side=3)
    check_dims(10, 10, opts, "JPEG header")  # exactly max_pixels
    check_dims(3, 33, opts, "JPEG header")  # exactly min_side
    assert _refusal(check_dims, 11, 10, opts, "JPEG header") == (
        "too_many_pixels",
        "the JPEG header declares 11x10 = 110 pixels > --max_pixels 100",
    )
    assert _refusal(check_dims, 2, 40, opts, "JPEG header") == (
        "too_small",
        "2x40: shorter side < --min_side 3",
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_pixels", 0, "--max_pixels must be >= 1, got 0"),
        ("min_side", 0, "--min_side must be >= 1, got 0"),
        ("max_file_mb", -0.5, "--max_file_mb must be >= 0 (0: no limit), got -0.5"),
        ("animated", "all", "--animated must be first_frame or reject, got 'all'"),
        ("transcode", "gif", "--transcode must be one of auto, none, png, jpeg, got 'gif'"),
        ("max_side", -1, "--max_side must be >= 0 (0: keep size), got -1"),
        ("jpeg_quality", 0, "--jpeg_quality must be in 1..100, got 0"),
        ("jpeg_quality", 101, "--jpeg_quality must be in 1..100, got 101"),
        (
            "resize_filter",
            "nearest",
            "--resize_filter must be one of lanczos, bicubic, bilinear, got 'nearest'",
        ),
        ("jpeg_verify", "fast", "--jpeg_verify must be one of dct, full, strict, got 'fast'"),
    ],
)
def test_options_out_of_range_are_refused_with_the_option_and_the_allowed_values(
    field, value, message
):
    """The exact one-line message the command prints for a bad option (pipeline/options.py)."""
    with pytest.raises(ValueError) as e:
        CheckOptions(**{field: value})
    assert str(e.value) == message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_pixels": 1},
        {"min_side": 1},
        {"max_file_mb": 0},
        {"max_side": 0},
        {"jpeg_quality": 1},
        {"jpeg_quality": 100},
    ],
)
def test_options_at_the_edge_of_their_range_are_accepted(kwargs):
    opts = CheckOptions(**kwargs)
    assert all(getattr(opts, k) == v for k, v in kwargs.items())


def test_strict_jpeg_verify_without_simplejpeg_names_the_package_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "simplejpeg" else real(name)
    )
    with pytest.raises(ValueError) as e:
        CheckOptions(jpeg_verify="strict")
    assert str(e.value) == (
        "--jpeg_verify strict needs the simplejpeg package, which is not installed: "
        "pip install simplejpeg==1.9.0 (it is in requirements.txt)"
    )
