"""`imgrec verify DIR`: re-read every shard, check CRCs, Examples, images and dataset_info.json."""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import hashlib
import io
import json
import sys
import zlib

from core import dali_index, schema, storage
from core.tfrecord import read_record
from core.versions import VersionError, resolve_dataset_dir
from pipeline import verify_objects
from pipeline.verify_tiles import TileChecks
from transforms.images.headers import probe_png

__all__ = ["verify_dataset", "main", "VerifyReport"]

# Longest problem line printed (see Report.problem).
_MAX_PROBLEM_CHARS = 300
# A PNG record's bits per sample for its image/dtype (records of images decoded to arrays).
_PNG_DEPTHS = {"uint8": 8, "uint16": 16}


class VerifyReport:
    """What verification found: counts per split and the list of problems (empty when clean)."""

    def __init__(self):
        self.problems: list[str] = []
        self.records = 0
        self.shards = 0
        self.bytes = 0
        self.data_dir = ""  # the folder checked (a versioned root resolves to its LATEST version)

    def problem(self, text: str) -> None:
        # One line each, capped: a decoder's message can embed the record's bytes (a 90 KB hex
        # dump); the first line and _MAX_PROBLEM_CHARS name the problem.
        first = text.splitlines()[0] if text else text
        if len(first) > _MAX_PROBLEM_CHARS or first != text:
            first = f"{first[:_MAX_PROBLEM_CHARS]}... ({len(text)} chars cut)"
        self.problems.append(first)

    @property
    def ok(self) -> bool:
        return not self.problems


def _records(data: bytes, shard: str):
    """Yield TFRecord payloads, checking both CRCs of every record (Beam's TFRecord codec)."""
    f = io.BytesIO(data)
    index = 0
    while True:
        try:
            record = read_record(f)
        except ValueError as e:
            raise ValueError(f"{shard}: record {index}: {e}") from e
        if record is None:
            return
        yield record
        index += 1


def _gunzip(data: bytes, shard: str) -> bytes:
    """A GZIP shard's TFRecord bytes; damage raises ValueError naming the shard."""
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise ValueError(f"{shard}: damaged gzip data ({e}); re-convert it") from e


def _count_lines(path: str) -> int | None:
    if not storage.exists(path):
        return None
    return sum(1 for line in storage.read_bytes(path).splitlines() if line.strip())


def _raw_problem(example: dict, size: int) -> str | None:
    """What is wrong with a raw-pixel record's stated shape, or None.

    Raw records hold little-endian samples of image/dtype (core/raw_pixels.py's RAW_DTYPES; ""
    is the uint8 of --store pixels) in height x width x channels order, any band count.
    """
    from core.raw_pixels import RAW_CHANNELS, RAW_DTYPES  # TensorFlow's import

    h, w, c = (int(example[k].numpy()) for k in (schema.HEIGHT, schema.WIDTH, schema.CHANNELS))
    dtype = example[schema.DTYPE].numpy().decode()
    if dtype not in RAW_DTYPES:
        known = ", ".join(sorted(d for d in RAW_DTYPES if d))
        return f"raw pixels of unknown image/dtype {dtype!r} (known: {known})"
    if h < 1 or w < 1 or c < 1:
        return f"raw pixels with shape {h}x{w}x{c}; expected height, width and channels >= 1"
    if not dtype and c != RAW_CHANNELS:  # --store pixels of a photo: RGB, as the reader reads it
        return f"raw pixels without image/dtype in {c} channels; --store pixels records hold 3"
    item = RAW_DTYPES[dtype].size
    if size != h * w * c * item:
        return (
            f"raw pixels: {size} bytes, height*width*channels*itemsize = "
            f"{h}*{w}*{c}*{item} = {h * w * c * item}"
        )
    return None


def verify_dataset(data_dir: str, decode: bool = True) -> VerifyReport:
    """Check a converted dataset end to end (local, gs://, s3:// through Beam FileSystems).

    Args:
        data_dir: the conversion's --output.
        decode: also decode every image with TensorFlow (the training decoder).

    Returns:
        A VerifyReport; `.ok` is False with problems naming shard and record on any mismatch.
    """
    report = VerifyReport()
    try:
        data_dir = resolve_dataset_dir(data_dir, fs="beam")  # a versioned root: LATEST's version
    except VersionError as e:
        report.problem(str(e))
        return report
    report.data_dir = data_dir
    info_path = storage.join(data_dir, schema.DATASET_INFO)
    if not storage.exists(info_path):
        report.problem(f"{info_path}: missing; not a converted dataset (or the run failed)")
        return report
    info = json.loads(storage.read_bytes(info_path))
    # Annotated datasets only: the others parse no object keys.
    objects = verify_objects.object_checks(info, decode)
    checks = _RecordChecks(
        label_names=info.get("label_names", []),
        spec=schema.feature_spec() | (objects.spec if objects else {}),
        # The run asked for JPEG only (--transcode jpeg): every record must be a JPEG.
        jpeg_only=info.get("transcode") == "jpeg",
        decode=decode,
        group_splits={},
        layouts={},
        objects=objects,
        tiles=TileChecks() if info.get("tiles") else None,
    )
    for split, entry in info["splits"].items():
        split_records = 0
        for shard in entry["shards"]:
            split_records += _check_shard(report, data_dir, shard, checks)
        report.records += split_records
        if split_records != entry["num_examples"]:
            report.problem(
                f"split {split}: {split_records} records, dataset_info says {entry['num_examples']}"
            )
    for problem in verify_objects.count_problems(info, objects) if objects else ():
        report.problem(problem)
    for problem in checks.tiles.problems(info) if checks.tiles else ():
        report.problem(problem)
    _check_groups(report, info, checks.group_splits)
    _check_layouts(report, info, checks.layouts)
    _check_totals(report, data_dir, info)
    return report


def _check_groups(report: VerifyReport, info: dict, group_splits: dict) -> None:
    """--group_by: no group in two splits, and each split's num_groups as the records say."""
    for group, splits in sorted(group_splits.items()):
        if len(splits) > 1:
            report.problem(f"group {group} is in splits {', '.join(sorted(splits))}")
    for split, entry in info["splits"].items():
        if "num_groups" not in entry:
            continue
        found = sum(1 for splits in group_splits.values() if split in splits)
        if found != entry["num_groups"]:
            report.problem(
                f"split {split}: {found} groups, dataset_info says {entry['num_groups']}"
            )


def _check_layouts(report: VerifyReport, info: dict, layouts: dict) -> None:
    """Each split's pixel_layouts (records per dtype x channels, what the reader's dtype and
    bands arguments work from) as the records say; older datasets do not record them."""
    for split, entry in info["splits"].items():
        want = entry.get("pixel_layouts")
        found = dict(layouts.get(split, {}))
        if want is not None and found != want:
            report.problem(
                f"split {split}: pixel layouts {_layouts_text(found)} in the records, "
                f"dataset_info says {_layouts_text(want)}"
            )


def _layouts_text(layouts: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(layouts.items())) or "none"


@dataclasses.dataclass(frozen=True)
class _RecordChecks:
    """What every record of a dataset is checked against."""

    label_names: list[str]
    spec: dict
    jpeg_only: bool
    decode: bool
    group_splits: dict  # image/group -> the splits its records are in (filled while checking)
    layouts: dict  # split -> Counter of "uint16x13" pixel layouts (filled while checking)
    objects: verify_objects.ObjectChecks | None = None  # an annotated dataset's
    tiles: TileChecks | None = None  # a --tile dataset's


def _check_shard(report: VerifyReport, data_dir: str, shard: dict, checks: _RecordChecks) -> int:
    """Check one shard's bytes, its DALI index and every record; returns the records read."""
    rel = shard["file"]
    path = storage.join(data_dir, rel)
    try:
        data = storage.read_bytes(path)
    except storage.ReadError as e:
        report.problem(f"{rel}: cannot read ({e.detail})")
        return 0
    report.shards += 1
    report.bytes += len(data)
    if len(data) != shard["num_bytes"]:
        report.problem(f"{rel}: {len(data)} bytes, dataset_info says {shard['num_bytes']}")
    if hashlib.sha256(data).hexdigest() != shard["sha256"]:
        report.problem(f"{rel}: sha256 differs from dataset_info.json")
    if "dali_index" in shard:
        _check_dali_index(report, data_dir, shard["dali_index"], data)
    count = 0
    try:
        if rel.endswith(".gz"):  # --compression gzip: the hashes above are of the file
            data = _gunzip(data, rel)
        for index, record in enumerate(_records(data, rel)):
            count += 1
            split = rel.split("/", 1)[0]
            _check_record(report, f"{rel}: record {index}", split, record, checks)
            _note_group(record, split, checks)
    except ValueError as e:  # CRC or framing damage: the rest of the shard is unreadable.
        report.problem(str(e))
    if count != shard["num_examples"]:
        report.problem(f"{rel}: {count} records, dataset_info says {shard['num_examples']}")
    return count


def _check_record(
    report: VerifyReport, where: str, split: str, record: bytes, checks: _RecordChecks
) -> None:
    """Check one record: a valid Example, its sha256, label, format and image; count its layout."""
    import tensorflow as tf

    try:
        ex = tf.io.parse_single_example(record, checks.spec)
    except tf.errors.InvalidArgumentError as e:
        report.problem(f"{where}: not a valid Example ({e.message[:200]})")
        return
    encoded = ex[schema.ENCODED].numpy()
    if hashlib.sha256(encoded).hexdigest() != ex[schema.SHA256].numpy().decode():
        report.problem(f"{where}: image/key/sha256 does not match image/encoded")
    label = int(ex[schema.LABEL].numpy())
    text = ex[schema.LABEL_TEXT].numpy().decode()
    label_names = checks.label_names
    if label_names and (not 0 <= label < len(label_names) or label_names[label] != text):
        report.problem(f"{where}: label {label} / {text!r} not in label_names")
    if checks.objects is not None:
        for problem in verify_objects.record_problems(ex, split, checks.objects):
            report.problem(f"{where}: {problem}")
    if checks.tiles is not None and (problem := checks.tiles.note(ex, split)):
        report.problem(f"{where}: {problem}")
    dtype = ex[schema.DTYPE].numpy().decode()
    layout = schema.pixel_layout(dtype, ex[schema.CHANNELS].numpy())
    checks.layouts.setdefault(split, collections.Counter())[layout] += 1
    image_format = ex[schema.FORMAT].numpy().decode()
    if checks.jpeg_only and not _jpeg_only_holds(image_format, layout, encoded):
        report.problem(
            f"{where}: {image_format!r} record in a "
            "--transcode jpeg dataset (JPEG-only readers fail on it)"
        )
        return
    if image_format == schema.RAW_FORMAT:
        # Raw pixels (--store pixels|smart, or more bands or bits than PNG holds): no decoder;
        # the size is the check.
        problem = _raw_problem(ex, len(encoded))
    elif checks.decode:
        problem = _decode_problem(ex, encoded)
    else:
        problem = None
    if problem:
        report.problem(f"{where}: {problem}")


def _jpeg_only_holds(image_format: str, layout: str, encoded: bytes) -> bool:
    """Whether a record belongs in a --transcode jpeg dataset: a JPEG, or raw samples no JPEG
    holds (16-bit or float bands, more than 4 bands: that run keeps them rather than cut them)."""
    if image_format == "jpeg":
        return encoded.startswith(b"\xff\xd8")
    dtype, channels = schema.pixel_layout_parts(layout)
    return image_format == schema.RAW_FORMAT and (dtype != "uint8" or channels > 4)


def _note_group(record: bytes, split: str, checks: _RecordChecks) -> None:
    """Remember the split of the record's image/group (--group_by)."""
    import tensorflow as tf

    try:
        ex = tf.io.parse_single_example(record, schema.feature_spec((schema.GROUP,)))
    except tf.errors.InvalidArgumentError:
        return  # _check_record reported it
    group = ex[schema.GROUP].numpy().decode()
    if group:
        checks.group_splits.setdefault(group, set()).add(split)


def _decode_problem(example: dict, encoded: bytes) -> str | None:
    """What is wrong with decoding an encoded record's image with TensorFlow, or None.

    Records of images decoded to arrays (image/dtype set: DICOM, TIFF, 16-bit PNG) are decoded
    with their own channel count, checked against image/channels, and a PNG's bit depth against
    image/dtype (what the reader's dtype= returns depends on it); photos as the reader decodes
    them, in 3 channels.
    """
    import tensorflow as tf

    dtype = example[schema.DTYPE].numpy().decode()
    image_format = example[schema.FORMAT].numpy()
    try:
        img = tf.io.decode_image(encoded, channels=0 if dtype else 3, expand_animations=False)
        if image_format == b"jpeg":
            tf.io.decode_jpeg(encoded, channels=3)
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError) as e:
        return f"image does not decode ({e.message[:200]})"
    shape = (int(example[schema.HEIGHT].numpy()), int(example[schema.WIDTH].numpy()))
    if tuple(img.shape[:2]) != shape:
        return f"decoded {tuple(img.shape[:2])}, Example says {shape}"
    channels = int(example[schema.CHANNELS].numpy())
    if dtype and img.shape[2] != channels:
        return f"decoded {img.shape[2]} channels, image/channels says {channels}"
    depth = probe_png(encoded).bit_depth
    if image_format == b"png" and _PNG_DEPTHS.get(dtype, depth) != depth:
        return f"a {depth}-bit PNG, image/dtype says {dtype}"
    return None


def _check_totals(report: VerifyReport, data_dir: str, info: dict) -> None:
    """dataset_info.json's totals against its splits, and the reject and duplicate files."""
    written = sum(e.get("num_files", e["num_examples"]) for e in info["splits"].values())
    if written != info["num_written"]:
        report.problem(f"num_written {info['num_written']} != sum of splits {written}")
    if info["num_listed"] != info["num_written"] + info["num_rejected"] + info["num_duplicates"]:
        report.problem("num_listed != num_written + num_rejected + num_duplicates")
    for name, key in ((schema.REJECTED, "num_rejected"), (schema.DUPLICATES, "num_duplicates")):
        lines = _count_lines(storage.join(data_dir, name))
        if lines is not None and lines != info[key]:
            report.problem(f"{name}: {lines} lines, dataset_info says {key} = {info[key]}")


def _check_dali_index(report, data_dir: str, entry: dict, shard_bytes: bytes) -> None:
    """--dali_index: the shard's index file is there, as recorded, and indexes every record."""
    rel = entry["file"]
    try:
        found = storage.read_bytes(storage.join(data_dir, rel))
    except storage.ReadError as e:
        report.problem(f"{rel}: cannot read ({e.detail})")
        return
    if (len(found), hashlib.sha256(found).hexdigest()) != (entry["num_bytes"], entry["sha256"]):
        report.problem(f"{rel}: size or sha256 differs from dataset_info.json")
    try:
        want = dali_index.index_of_shard(shard_bytes)
    except ValueError:
        return  # the shard's own framing problem is reported with the shard
    if found != want:
        report.problem(
            f"{rel}: does not index its shard's records (DALI would read wrong offsets); "
            "rerun the conversion with --resume --dali_index"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="imgrec verify",
        description=(
            "Re-read every shard of a converted dataset: TFRecord CRCs, Examples, image decodes, "
            "an annotated dataset's objects (boxes, labels, masks), counts, bytes and sha256 "
            "against dataset_info.json."
        ),
    )
    parser.add_argument("data_dir")
    parser.add_argument("--no_decode", action="store_true", help="Skip decoding images.")
    args = parser.parse_args(argv)
    report = verify_dataset(args.data_dir.rstrip("/"), decode=not args.no_decode)
    if report.ok:
        print(
            f"imgrec verify: OK: {report.records} records in {report.shards} shards "
            f"({report.bytes / 1e6:.1f} MB) match dataset_info.json"
            + (f" of {report.data_dir}" if report.data_dir != args.data_dir.rstrip("/") else "")
        )
        return 0
    for p in report.problems[:50]:
        print(f"imgrec verify: {p}", file=sys.stderr)
    more = len(report.problems) - 50
    if more > 0:
        print(f"imgrec verify: ... and {more} more problems", file=sys.stderr)
    print(f"imgrec verify: FAILED: {len(report.problems)} problems", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
