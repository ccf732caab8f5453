"""Tests of the per-file check (transforms/images) on generated hostile files: outcomes,
TF-equivalence, stored bytes."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import os
import random
import struct
import warnings

import numpy as np
import pytest
from PIL import Image

from core.rejects import REASONS, Rejected
from tests.hostile import encode, make_hostile_corpus, photo, png_chunk, tf_decodes
from tests.runs import ROOT as ROOT_PATH
from transforms.images import check, decode, limits, transcode
from transforms.images.check import check_image, encode_for_storage
from transforms.images.limits import CheckOptions, check_file_size
from transforms.images.sniff import sniff_container, sniff_format

tf = pytest.importorskip("tensorflow")

# Rejections that are a policy choice on an image TensorFlow could decode (never a decode verdict).
_POLICY = {"too_many_pixels", "too_small", "too_many_scans", "animated", "file_too_large"}

# Option sets the corpus is checked under; the first is the converter's default.
_OPTION_SETS = {
    "defaults": CheckOptions(),
    "transcode_png_reject_animated": CheckOptions(transcode="png", animated="reject"),
    "no_exif_min_side_20": CheckOptions(apply_exif_orientation=False, min_side=20),
    "transcode_jpeg_max_side_100": CheckOptions(transcode="jpeg", max_side=100, jpeg_quality=90),
}


def _outcome(data: bytes, opts: CheckOptions, compute_stats: bool = True):
    try:
        return check_image(data, opts, compute_stats=compute_stats)
    except Rejected as e:
        return e


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module", params=list(_OPTION_SETS))
def corpus(request, tmp_path_factory):
    """(opts, {path: Expected}, {path: ImageInfo | Rejected}) for one option set."""
    opts = _OPTION_SETS[request.param]
    files = make_hostile_corpus(str(tmp_path_factory.mktemp(request.param)), 200, seed=5, opts=opts)
    return opts, files, {p: _outcome(_read(p), opts) for p in files}


@pytest.fixture(scope="module")
def default_corpus(tmp_path_factory):
    opts = CheckOptions()
    files = make_hostile_corpus(str(tmp_path_factory.mktemp("default")), 200, seed=11)
    return opts, files, {p: _outcome(_read(p), opts) for p in files}


# ----------------------------------------------------------------------------- outcomes
def test_corpus_is_large_and_mixed(default_corpus):
    _, files, _ = default_corpus
    outcomes = {e.outcome for e in files.values()}
    assert len(files) >= 200
    assert {
        "written",
        "truncated",
        "corrupt",
        "not_an_image",
        "unsupported_format",
        "too_many_pixels",
        "empty_file",
    } <= outcomes
    assert {e.transcode for e in files.values()} >= {"", "exif_orientation", "animated_first_frame"}


def test_every_file_gets_its_expected_outcome(corpus):
    _, files, results = corpus
    wrong = []
    for path, want in files.items():
        got = results[path]
        if isinstance(got, Rejected):
            summary = (got.reason, "", "")
        else:
            summary = ("written", got.format, got.transcode)
        if summary != (want.outcome, want.format, want.transcode):
            wrong.append(
                f"{os.path.basename(path)} ({want.case}): expected "
                f"{(want.outcome, want.format, want.transcode)}, got {summary} "
                f"{getattr(got, 'detail', '')}"
            )
    assert not wrong, "\n".join(wrong)


def test_rejects_name_a_known_reason_and_explain_it(corpus):
    _, _, results = corpus
    for path, got in results.items():
        if isinstance(got, Rejected):
            assert got.reason in REASONS, path
            assert got.detail and len(got.detail) > 5, path


def test_decoder_failures_name_the_decoder_error(default_corpus):
    _, _, results = default_corpus
    for path, got in results.items():
        if isinstance(got, Rejected) and got.reason in ("truncated", "corrupt"):
            data = _read(path)
            if sniff_format(data) and len(data) > 8:
                assert "tf.io.decode_" in got.detail, (path, got.detail)


# ----------------------------------------------------------------------------- TF equivalence
def test_accepts_exactly_what_tensorflow_decodes_on_the_corpus(default_corpus):
    """For bytes TensorFlow would decode as JPEG/PNG/GIF: stored unchanged => TF decodes them;
    rejected as truncated/corrupt => TF does not; TF decodes them => any rejection is policy."""
    _, _, results = default_corpus
    checked = 0
    for path, got in results.items():
        data = _read(path)
        if sniff_format(data) is None:
            continue
        checked += 1
        ok = tf_decodes(data)
        if isinstance(got, Rejected):
            if got.reason in ("truncated", "corrupt"):
                assert not ok, f"{path}: TF decodes it, but rejected as {got.reason}"
            if ok:
                assert got.reason in _POLICY, f"{path}: TF decodes it; rejected {got.reason}"
        elif not got.transcode:
            assert ok, f"{path}: stored as is, but TF does not decode it"
        elif "animated_first_frame" not in got.transcode:
            assert ok, f"{path}: transcoded from bytes TF does not decode ({got.transcode})"
    assert checked > 120


def _mutants(data: bytes, rng: random.Random, start: int, count: int):
    """Truncations at many offsets, bit flips anywhere, and in the compressed data."""
    for off in sorted(rng.sample(range(1, len(data)), min(count, len(data) - 1))):
        yield f"cut@{off}", data[:off]
    for _ in range(count):
        off = rng.randrange(len(data))
        yield f"flip@{off}", _flip(data, off, rng.randrange(8))
    for _ in range(count):
        off = rng.randrange(start, len(data))
        yield f"dataflip@{off}", _flip(data, off, rng.randrange(8))


def _flip(data: bytes, offset: int, bit: int) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << bit
    return bytes(out)


@pytest.mark.parametrize("verify", ["dct", "full"])
@pytest.mark.parametrize("kind", ["jpeg", "progressive", "png", "gif", "cmyk"])
def test_accept_iff_tensorflow_decodes_on_mutants(kind, verify):
    """Hundreds of damaged files: check_image accepts one exactly when TF's full-size decoders
    do, also when it verifies JPEGs at 1/8 DCT scale (--jpeg_verify dct, the default)."""
    rng = random.Random(sum(map(ord, kind)))
    im = photo(rng, 96, 72)
    data = {
        "jpeg": lambda: encode(im, "JPEG", quality=85),
        "progressive": lambda: encode(im, "JPEG", progressive=True),
        "png": lambda: encode(im, "PNG"),
        "gif": lambda: encode(im.convert("P"), "GIF"),
        "cmyk": lambda: encode(im.convert("CMYK"), "JPEG"),
    }[kind]()
    if kind == "png":
        start = data.index(b"IDAT") + 4
    elif kind == "gif":
        start = 13 + 3 * (2 << (data[10] & 7)) + 20  # past the global color table
    else:
        start = data.rfind(b"\xff\xda") + 14
    opts = CheckOptions(jpeg_verify=verify)
    disagree = []
    seen = {"accepted": 0, "rejected": 0}
    for name, mutant in _mutants(data, rng, start, 60):
        got = _outcome(mutant, opts, compute_stats=False)
        accepted = not isinstance(got, Rejected)
        seen["accepted" if accepted else "rejected"] += 1
        if accepted != tf_decodes(mutant):
            disagree.append(f"{name}: check {'accepts' if accepted else got.reason}")
        if not accepted:
            assert got.reason in ("truncated", "corrupt", "unsupported_format", "not_an_image"), (
                name,
                got.reason,
                got.detail,
            )
    assert not disagree, "\n".join(disagree)
    assert seen["rejected"] > 30, seen
    if kind != "png":  # every PNG byte past the signature is under a CRC: no mutant decodes
        assert seen["accepted"] > 10, seen


def _excise(data: bytes, start: int, offset: int, length: int) -> bytes:
    """`data` without `length` bytes of its compressed data from `start + offset` on."""
    at = start + offset
    return data[:at] + data[at + length :]


@pytest.mark.parametrize("kind", ["jpeg", "progressive", "gray", "cmyk"])
def test_strict_verify_rejects_jpegs_libjpeg_repaired_and_keeps_healthy_ones(kind):
    """--jpeg_verify strict: a healthy JPEG gets the same ImageInfo as with dct; a JPEG missing a
    stretch of its compressed data, which TensorFlow decodes without an error (libjpeg fills the
    rest with grey), is rejected as corrupt, naming libjpeg's warning; strict never accepts what
    dct rejects."""
    rng = random.Random(sum(map(ord, kind)) + 7)
    im = photo(rng, 320, 240)
    data = {
        "jpeg": lambda: encode(im, "JPEG", quality=90),
        "progressive": lambda: encode(im, "JPEG", progressive=True),
        "gray": lambda: encode(im.convert("L"), "JPEG"),
        "cmyk": lambda: encode(im.convert("CMYK"), "JPEG"),
    }[kind]()
    strict, dct = CheckOptions(jpeg_verify="strict"), CheckOptions(jpeg_verify="dct")
    assert check_image(data, strict) == check_image(data, dct)

    start = data.rfind(b"\xff\xda") + 14
    repaired = 0
    for offset in range(0, len(data) - start - 400, max(1, (len(data) - start) // 12)):
        damaged = _excise(data, start, offset, 200)
        in_dct = _outcome(damaged, dct, compute_stats=False)
        in_strict = _outcome(damaged, strict, compute_stats=False)
        if isinstance(in_dct, Rejected):
            assert isinstance(in_strict, Rejected) and in_strict.reason == in_dct.reason
            continue
        assert tf_decodes(damaged)  # what dct accepts, TF decodes: this is silent damage
        if isinstance(in_strict, Rejected):
            assert in_strict.reason == "corrupt", in_strict
            assert "libjpeg warned while decoding" in in_strict.detail, in_strict.detail
            repaired += 1
        else:
            assert in_strict == in_dct
    assert repaired >= 5, repaired


def test_strict_verify_rejects_warnings_in_the_header_too():
    """A libjpeg warning in the header (junk before a marker, an unknown JFIF version) is a
    strict reject as well, also when it would hide damaged data behind it from the check."""
    data = encode(photo(random.Random(3), 320, 240), "JPEG", quality=90)
    strict = CheckOptions(jpeg_verify="strict")
    check_image(data, strict)  # healthy
    jfif = data.find(b"JFIF\x00") + 5
    dqt = data.find(b"\xff\xdb")
    start = data.rfind(b"\xff\xda") + 14
    cut = data[: start + 500] + data[start + 700 :]
    cases = {
        "junk before DQT": (data[:dqt] + b"\x00\x00" + data[dqt:], "extraneous bytes"),
        "JFIF 2.01": (data[:jfif] + b"\x02" + data[jfif + 1 :], "JFIF revision"),
        "JFIF 2.01, data cut": (cut[:jfif] + b"\x02" + cut[jfif + 1 :], "JFIF revision"),
    }
    for name, (damaged, says) in cases.items():
        assert tf_decodes(damaged), name
        check_image(damaged, CheckOptions())  # the default writes it
        with pytest.raises(Rejected) as e:
            check_image(damaged, strict)
        assert e.value.reason == "corrupt" and says in e.value.detail, (name, e.value.detail)


def test_strict_verify_mutants_are_a_subset_of_dct(monkeypatch):
    """On hundreds of truncated and bit-flipped JPEGs, strict accepts only files dct accepts, and
    each extra reject comes from libjpeg's warning. The check itself runs once per JPEG."""
    rng = random.Random(11)
    data = encode(photo(rng, 96, 72), "JPEG", quality=85)
    start = data.rfind(b"\xff\xda") + 14
    strict, dct = CheckOptions(jpeg_verify="strict"), CheckOptions(jpeg_verify="dct")
    calls = []
    real = decode.libjpeg_warning
    monkeypatch.setattr(check, "libjpeg_warning", lambda d: calls.append(1) or real(d))
    extra = checked = 0
    for name, mutant in _mutants(data, rng, start, 60):
        in_dct = _outcome(mutant, dct, compute_stats=False)
        before = len(calls)
        in_strict = _outcome(mutant, strict, compute_stats=False)
        if isinstance(in_dct, Rejected):
            assert isinstance(in_strict, Rejected), name
            assert len(calls) == before  # no second decoder on what TF already refused
            continue
        checked += 1
        assert len(calls) == before + 1, name
        if isinstance(in_strict, Rejected):
            assert "libjpeg warned" in in_strict.detail, (name, in_strict.detail)
            extra += 1
    assert checked > 10 and extra >= 1, (checked, extra)


def test_outcomes_without_stats_match_the_full_path(corpus):
    """Without pixel statistics, JPEGs are verified at 1/8 DCT scale (--jpeg_verify dct, the
    default) or at full size (full), and a JPEG that only needs --max_side is not transcoded at
    inspection (its output sides are computed). Either way the outcome is the one of the full
    path (which decodes full size and transcodes), file by file: same reason, or the same
    format, sides, channels and transcode."""
    opts, _, results = corpus
    scaled = deferred = 0
    for verify in ("dct", "full"):
        mode = dataclasses.replace(opts, jpeg_verify=verify)
        for path, with_stats in results.items():
            got = _outcome(_read(path), mode, compute_stats=False)
            if isinstance(with_stats, Rejected):
                assert isinstance(got, Rejected), (verify, path, with_stats.reason)
                assert got.reason == with_stats.reason, (verify, path, got.reason)
            else:
                assert not isinstance(got, Rejected), (verify, path, got.reason, got.detail)
                assert got == dataclasses.replace(with_stats, stats=None), (verify, path)
                scaled += verify == "dct" and got.format == "jpeg" and not got.transcode
                deferred += verify == "dct" and got.format == "jpeg" and got.transcode == "max_side"
    if opts.max_side:
        assert deferred > 30, deferred  # many JPEGs took the computed-sides path
    else:
        assert scaled > 30, scaled  # the scaled path was taken, on many accepted JPEGs


@pytest.mark.parametrize("size", [(1601, 1201), (640, 481), (257, 3), (300, 299)])
def test_max_side_jpeg_is_not_transcoded_at_inspection_and_its_sides_are_exact(size, monkeypatch):
    """The writer's transcode later yields exactly the sides inspection computed."""
    rng = random.Random(sum(size))
    data = encode(photo(rng, 200, 150).resize(size, Image.Resampling.BICUBIC), "JPEG")
    opts = CheckOptions(max_side=256)
    calls = []
    real = transcode.transcode_bytes
    monkeypatch.setattr(check, "transcode_bytes", lambda *a: calls.append(1) or real(*a))
    info = check_image(data, opts)
    assert info.transcode == "max_side" and not calls
    stored = encode_for_storage(data, info, opts)
    assert calls  # the writer transcodes
    decoded = tf.io.decode_jpeg(stored).numpy()
    assert decoded.shape == (info.height, info.width, info.channels)
    assert max(info.height, info.width) == 256


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_resize_filter_changes_the_pixels_not_the_sides(fmt):
    """--resize_filter picks Pillow's resampling for --max_side: every filter gives the sides
    inspection recorded, different pixels, and the same bytes on every call."""
    rng = random.Random(5)
    data = encode(photo(rng, 200, 150).resize((640, 481), Image.Resampling.BICUBIC), fmt)
    stored, sides = {}, set()
    for name in limits.RESIZE_FILTERS:
        opts = CheckOptions(max_side=128, resize_filter=name)
        info = check_image(data, opts)
        assert info.width == 128 and "max_side" in info.transcode
        sides.add((info.height, info.width))
        stored[name] = encode_for_storage(data, info, opts)
        assert encode_for_storage(data, info, opts) == stored[name]
        decoded = tf.io.decode_image(stored[name], channels=3).numpy()
        assert decoded.shape == (info.height, info.width, 3)
    assert len(sides) == 1
    assert len(set(stored.values())) == len(stored)


def test_dct_verify_checks_the_header_sides_against_the_decoder(monkeypatch):
    """If our header parser and libjpeg disagree on the sides, the decoder's full-size answer
    wins (the scaled output is compared with the header, not trusted)."""
    data = encode(photo(random.Random(1), 100, 60), "JPEG")
    real = check._probe

    def lying_probe(data, opts):
        fmt, h = real(data, opts)
        return fmt, dataclasses.replace(h, width=h.width + 40)

    monkeypatch.setattr(check, "_probe", lying_probe)
    info = check_image(data, CheckOptions(jpeg_verify="dct"))
    assert (info.width, info.height) == (100, 60)


def test_decode_jpeg_and_decode_image_agree_on_jpeg_mutants():
    """One decode_jpeg call stands for both ops: same kernel, same flags, same verdict/pixels."""
    rng = random.Random(3)
    data = encode(photo(rng, 80, 64), "JPEG")
    for name, mutant in _mutants(data, rng, data.rfind(b"\xff\xda") + 14, 40):
        try:
            a = tf.io.decode_jpeg(mutant, channels=3).numpy()
        except tf.errors.InvalidArgumentError:
            a = None
        try:
            b = tf.io.decode_image(mutant, channels=3, expand_animations=False).numpy()
        except tf.errors.InvalidArgumentError:
            b = None
        if a is None or b is None:
            assert a is None and b is None, name
        else:
            assert np.array_equal(a, b), name


# ----------------------------------------------------------------------------- stored bytes
def test_stored_bytes_decode_as_the_reader_decodes(corpus):
    opts, _, results = corpus
    rng = random.Random(0)
    for path, info in results.items():
        if isinstance(info, Rejected):
            continue
        data = _read(path)
        stored = encode_for_storage(data, info, opts)
        assert (stored is data) == (not info.transcode), path
        assert sniff_format(stored) == info.format or (
            info.format == "webp" and sniff_container(stored) == "webp" and stored is data
        ), path
        image = tf.io.decode_image(stored, channels=3, expand_animations=False)
        assert image.dtype == tf.uint8 and image.shape == (info.height, info.width, 3), path
        native = tf.io.decode_image(stored, expand_animations=False)
        assert native.shape[-1] == info.channels, path
        if info.format == "jpeg":
            assert np.array_equal(tf.io.decode_jpeg(stored, channels=3).numpy(), image.numpy())
            # The reader's fused crop+decode, at full and reduced DCT scale.
            h, w = info.height, info.width
            ch, cw = rng.randint(1, h), rng.randint(1, w)
            window = [rng.randint(0, h - ch), rng.randint(0, w - cw), ch, cw]
            tf.io.decode_and_crop_jpeg(stored, [0, 0, h, w], channels=3)
            tf.io.decode_and_crop_jpeg(stored, window, channels=3)
            for ratio in (2, 4, 8):
                small = [0, 0, max(1, h // ratio), max(1, w // ratio)]
                tf.io.decode_and_crop_jpeg(stored, small, channels=3, ratio=ratio)


def test_stats_are_exact_sums_over_the_stored_image(default_corpus):
    opts, _, results = default_corpus
    checked = 0
    for path, info in results.items():
        if isinstance(info, Rejected):
            continue
        stored = encode_for_storage(_read(path), info, opts)
        pixels = tf.io.decode_image(stored, channels=3, expand_animations=False).numpy()
        flat = pixels.reshape(-1, 3).astype(np.float64)
        want = (*flat.sum(0), *(flat * flat).sum(0), flat.shape[0])
        assert info.stats == pytest.approx(want, rel=0, abs=0), path
        checked += 1
    assert checked > 50


def test_transcode_is_deterministic(default_corpus):
    opts, _, results = default_corpus
    transcoded = [(p, i) for p, i in results.items() if not isinstance(i, Rejected) and i.transcode]
    assert len(transcoded) >= 8
    for path, info in transcoded:
        data = _read(path)
        first = encode_for_storage(data, info, opts)
        assert encode_for_storage(bytes(data), info, opts) == first, path
        assert check_image(data, opts, compute_stats=True) == info, path


def test_checking_from_many_threads_matches_serial(default_corpus):
    opts, files, results = default_corpus
    paths = list(files)[:120]

    def summary(path):
        got = _outcome(_read(path), opts)
        return got.reason if isinstance(got, Rejected) else got

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(summary, paths))
    serial = [results[p].reason if isinstance(results[p], Rejected) else results[p] for p in paths]
    assert parallel == serial


# ----------------------------------------------------------------------------- specific cases
def _rgb(seed: int = 0, w: int = 120, h: int = 90) -> Image.Image:
    return photo(random.Random(seed), w, h)


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


@pytest.mark.parametrize("orientation", range(2, 9))
def test_exif_orientation_stores_upright_pixels(orientation):
    from PIL import ImageOps

    im = _rgb(orientation)
    data = encode(im, "JPEG", quality=95, exif=_exif(orientation))
    info = check_image(data, CheckOptions())
    assert info.transcode == "exif_orientation"
    stored = encode_for_storage(data, info, CheckOptions())
    got = tf.io.decode_jpeg(stored, channels=3).numpy().astype(int)
    want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert got.shape == want.shape
    assert np.abs(got - want).mean() < 4  # one extra JPEG generation at quality 95
    assert Image.open(io.BytesIO(stored)).getexif().get(0x0112) is None
    kept = check_image(data, CheckOptions(apply_exif_orientation=False))
    assert kept.transcode == "" and (kept.width, kept.height) == im.size


def test_cmyk_jpeg_decodes_to_the_right_colours_so_it_is_stored_as_is():
    im = _rgb(1)
    data = encode(im.convert("CMYK"), "JPEG", quality=95)
    info = check_image(data, CheckOptions())
    assert (info.format, info.transcode, info.channels) == ("jpeg", "", 3)
    got = tf.io.decode_jpeg(data, channels=3).numpy().astype(int)
    assert np.abs(got - np.asarray(im)).mean() < 4


def test_16bit_png_is_stored_8bit_by_default_and_as_is_with_bit_depth_16():
    wide = (np.arange(40 * 30, dtype=np.uint32).reshape(30, 40) * 53 % 65536).astype(np.uint16)
    data = encode(Image.fromarray(wide), "PNG")
    info = check_image(data, CheckOptions())
    assert (info.format, info.source_format, info.channels) == ("png", "png16", 1)
    assert info.transcode == "decoded_pixels"
    got = tf.io.decode_image(encode_for_storage(data, info, CheckOptions())).numpy()
    assert np.array_equal(got[..., 0], np.rint(wide / 257).astype(np.uint8))
    kept = check_image(data, CheckOptions(bit_depth=16))
    assert (kept.format, kept.source_format, kept.transcode) == ("png", "png", "")
    assert encode_for_storage(data, kept, CheckOptions(bit_depth=16)) is data


def test_animated_gif_keeps_its_first_frame_as_png():
    frames = [_rgb(s).convert("P") for s in range(3)]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:])
    info = check_image(data, CheckOptions())
    assert (info.format, info.source_format, info.transcode) == (
        "png",
        "gif",
        "animated_first_frame",
    )
    stored = encode_for_storage(data, info, CheckOptions())
    got = tf.io.decode_image(stored, channels=3, expand_animations=False).numpy()
    assert np.array_equal(got, np.asarray(frames[0].convert("RGB")))
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions(animated="reject"))
    assert e.value.reason == "animated"


def test_max_side_downscales_keeping_aspect():
    data = encode(_rgb(2, 200, 100), "JPEG")
    info = check_image(data, CheckOptions(max_side=50))
    assert (info.width, info.height, info.transcode) == (50, 25, "max_side")


def test_max_side_on_a_large_jpeg_decodes_at_dct_scale_with_the_same_result(monkeypatch):
    """A 1600-wide JPEG going to 256 is decoded by libjpeg at 1/4 scale before the Lanczos
    resize: same size, pixels within JPEG noise of a full-size decode + Lanczos, and the
    writer's re-encode is byte-identical."""
    rng = random.Random(7)
    large = photo(rng, 400, 300).resize((1600, 1200), Image.Resampling.BICUBIC)
    data = encode(large, "JPEG", quality=90)
    opts = CheckOptions(max_side=256)
    ratios = []
    real_decode = decode.tf_decode

    def spy(*args, **kwargs):
        ratios.append(kwargs.get("ratio", 1))
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(transcode, "tf_decode", spy)  # the writer's source decode
    source = Image.open(io.BytesIO(data)).convert("RGB")
    assert source.size == (1600, 1200)  # 1/4 scale (400x300) stays >= 256
    size = (256, round(source.height * 256 / source.width))
    info = check_image(data, opts)
    assert (info.width, info.height, info.transcode) == (*size, "max_side")
    stored = encode_for_storage(data, info, opts)
    assert 4 in ratios, ratios  # the writer decoded the source at 1/4 scale
    assert stored == encode_for_storage(data, info, opts)
    got = tf.io.decode_jpeg(stored, channels=3).numpy().astype(np.float64)
    want = np.asarray(source.resize(size, Image.Resampling.LANCZOS)).astype(np.float64)
    assert got.shape == want.shape == (size[1], size[0], 3)
    assert np.abs(got - want).mean() < 4.0, np.abs(got - want).mean()


def _bmp_header_only(width: int, height: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54 + 64, 0, 0, 54) + info + bytes(64)


@pytest.mark.parametrize(
    "make",
    [
        lambda: _bmp_header_only(12_000, 12_000),  # 144 Mpx: between Pillow's warning and error
        lambda: _bmp_header_only(30_000, 30_000),  # 900 Mpx: beyond Pillow's error threshold
        lambda: (
            b"\x89PNG\r\n\x1a\n"
            + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 12_000, 12_000, 8, 2, 0, 0, 0))
        ),
    ],
)
def test_bombs_are_refused_from_the_header_without_decoding_or_pillow_warnings(make, monkeypatch):
    def no_decode(*args, **kwargs):
        raise AssertionError("decoded a bomb")

    monkeypatch.setattr(check, "tf_decode", no_decode)
    monkeypatch.setattr(transcode, "tf_decode", no_decode)
    monkeypatch.setattr(transcode, "source_pixels", no_decode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(Rejected) as e:
            check_image(make(), CheckOptions(transcode="png"))
    assert e.value.reason == "too_many_pixels"
    assert "--max_pixels" in e.value.detail
    assert not [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]


def test_size_limits():
    with pytest.raises(Rejected) as e:
        check_file_size(0, CheckOptions())
    assert e.value.reason == "empty_file"
    with pytest.raises(Rejected) as e:
        check_image(b"x" * 2_000_001, CheckOptions(max_file_mb=2))
    assert e.value.reason == "file_too_large" and "--max_file_mb 2" in e.value.detail
    check_file_size(2_000_000, CheckOptions(max_file_mb=2))
    with pytest.raises(Rejected) as e:
        check_image(encode(_rgb(3, 40, 12), "PNG"), CheckOptions(min_side=16))
    assert e.value.reason == "too_small" and "40x12" in e.value.detail


@pytest.mark.parametrize(
    "data, words",
    [
        (b"<!doctype html><html><body>oops</body></html>", "HTML"),
        (b"%PDF-1.4 ...", "PDF"),
        (b"PK\x03\x04" + bytes(30), "ZIP"),
        (b"plain words\n" * 5, "text"),
    ],
)
def test_non_images_say_what_they_look_like(data, words):
    with pytest.raises(Rejected) as e:
        check_image(data, CheckOptions())
    assert e.value.reason == "not_an_image" and words in e.value.detail


def test_truncated_jpeg_detail_names_the_offset_and_the_decoder():
    data = encode(_rgb(4), "JPEG")
    with pytest.raises(Rejected) as e:
        check_image(data[: len(data) // 2], CheckOptions())
    assert e.value.reason == "truncated"
    assert f"byte {len(data) // 2}" in e.value.detail and "tf.io.decode_jpeg" in e.value.detail


def test_png_crc_damage_names_the_chunk():
    data = bytearray(encode(_rgb(5), "PNG"))
    idat = data.index(b"IDAT")
    data[idat + 40] ^= 0x10
    with pytest.raises(Rejected) as e:
        check_image(bytes(data), CheckOptions())
    assert e.value.reason == "corrupt" and "'IDAT'" in e.value.detail and "CRC" in e.value.detail


def test_options_are_validated_with_the_flag_name():
    for kwargs, flag in [
        ({"animated": "loop"}, "--animated"),
        ({"transcode": "gif"}, "--transcode"),
        ({"jpeg_quality": 0}, "--jpeg_quality"),
        ({"max_pixels": 0}, "--max_pixels"),
        ({"min_side": 0}, "--min_side"),
        ({"jpeg_verify": "fast"}, "--jpeg_verify"),
        ({"resize_filter": "nearest"}, "--resize_filter"),
    ]:
        with pytest.raises(ValueError, match=flag):
            CheckOptions(**kwargs)


def test_strict_verify_without_simplejpeg_fails_at_the_option(monkeypatch):
    real = limits.importlib.util.find_spec
    monkeypatch.setattr(
        limits.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "simplejpeg" else real(name, *a),
    )
    with pytest.raises(ValueError, match="--jpeg_verify strict needs the simplejpeg package"):
        CheckOptions(jpeg_verify="strict")
    CheckOptions(jpeg_verify="dct")  # the other modes do not need it


def test_reason_taxonomy_is_stable_and_documented():
    # Renaming a reason breaks users' scripts over rejected.jsonl: extend this set, never edit it.
    assert set(REASONS) >= {
        "unreadable",
        "empty_file",
        "file_too_large",
        "not_an_image",
        "unsupported_format",
        "truncated",
        "corrupt",
        "too_many_pixels",
        "too_many_scans",
        "too_small",
        "animated",
        "changed_during_run",
        "decoder_error",
    }
    from core.rejects import LISTING_REASONS

    text = ""
    for doc in ("README.md", os.path.join("docs", "rejects.md")):
        with open(os.path.join(ROOT_PATH, doc), encoding="utf-8") as f:
            text += f.read()
    for key in (*REASONS, *LISTING_REASONS, *transcode.TRANSCODE_REASONS):
        assert f"`{key}`" in text, f"{key} is documented in neither README.md nor docs/rejects.md"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_transcodes_keep_a_matching_icc_profile_and_drop_a_mismatched_one(fmt):
    from PIL import ImageCms

    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    im = _rgb(6)
    data = encode(im, fmt, icc_profile=srgb, exif=_exif(3))
    info = check_image(data, CheckOptions())
    assert info.transcode == "exif_orientation"
    stored = encode_for_storage(data, info, CheckOptions())
    assert Image.open(io.BytesIO(stored)).info.get("icc_profile") == srgb
    cmyk_tagged = srgb[:16] + b"CMYK" + srgb[20:]  # a profile for another colour space
    data = encode(im, fmt, icc_profile=cmyk_tagged, exif=_exif(3))
    stored = encode_for_storage(data, check_image(data, CheckOptions()), CheckOptions())
    assert Image.open(io.BytesIO(stored)).info.get("icc_profile") is None


@pytest.mark.parametrize("fmt", ["TIFF", "WEBP"])
def test_exif_orientation_of_transcoded_formats(fmt):
    """TIFFs are turned by their Orientation tag (tiff.py); WebP by EXIF. Either way, once."""
    im = _rgb(7, 60, 40)
    data = encode(im, fmt, exif=_exif(6), **({"lossless": True} if fmt == "WEBP" else {}))
    opts = CheckOptions(transcode="png")
    info = check_image(data, opts)
    assert (info.width, info.height) == (40, 60)
    # A still WebP without alpha is stored as is: only the rotation makes it a PNG.
    want = "exif_orientation" if fmt == "WEBP" else "decoded_pixels,exif_orientation"
    assert info.transcode == want
    got = tf.io.decode_image(encode_for_storage(data, info, opts), channels=3).numpy()
    assert np.array_equal(got, np.asarray(im.transpose(Image.Transpose.ROTATE_270)))
