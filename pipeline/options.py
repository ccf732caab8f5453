"""Convert options: the Beam `PipelineOptions` subclass users set, and the validated frozen config."""

from __future__ import annotations

import dataclasses
import math

from apache_beam.options.pipeline_options import PipelineOptions

from core.retention import DEFAULT_KEEP_FOR, parse_duration
from core.schema import COMPRESSIONS, STORE_MODES
from transforms.images.limits import (
    BIT_DEPTHS,
    DEFAULT_MAX_PIXELS,
    FRAME_MODES,
    JPEG_VERIFY_MODES,
    RESIZE_FILTERS,
    TRANSCODE_MODES,
    CheckOptions,
)
from transforms.reuse_inspections import RESUME_VERIFY_MODES

__all__ = ["ConvertOptions", "ConvertConfig", "OptionError", "parse_splits"]

# Shards near 128 MB keep TFRecord reads sequential and large on GCS/S3 while leaving enough
# files (>= 10s per split at ImageNet scale) for every input pipeline of a multi-host job.
DEFAULT_TARGET_SHARD_MB = 128.0
# 5 % bad files is more than any healthy corpus has and less than a wrong glob or a broken bucket.
DEFAULT_MAX_BAD_FRACTION = 0.05
# Pixel statistics decode each sampled image at full size (inspection otherwise verifies JPEGs at
# 1/8 DCT scale); a seeded sample this size estimates the mean and std closely enough to
# normalise with, so reruns agree and large corpora skip most of those decodes.
DEFAULT_STATS_MAX_IMAGES = 1_000


# --keep_for's default in seconds (core/retention.py says why a day).
DEFAULT_KEEP_FOR_S = parse_duration(DEFAULT_KEEP_FOR)


class OptionError(ValueError):
    """A convert option has a bad value; the message names the option and the fix."""


def _str2bool(value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise OptionError(f"expected true/false, got {value!r}")


def _check_options(o: ConvertOptions) -> CheckOptions:
    """The per-image options (every CheckOptions field has the option's name), validated.

    Raises:
        OptionError: naming the option.
    """
    try:
        return CheckOptions(
            **{f.name: getattr(o, f.name) for f in dataclasses.fields(CheckOptions)}
        )
    except ValueError as e:
        raise OptionError(str(e)) from e


class ConvertOptions(PipelineOptions):
    """Options of `imgrec convert`, in Beam's underscore style so they mix with Beam's own flags."""

    @classmethod
    def _add_argparse_args(cls, parser):
        g = parser.add_argument_group("imgrec convert")
        _add_input_options(g)
        _add_split_options(g)
        _add_run_options(g)
        _add_version_options(g)
        _add_reject_options(g)
        _add_image_options(g)
        _add_storage_options(g)
        _add_inspection_options(g)
        _add_analysis_options(g)
        g.add_argument(
            "--config", default=None, help="YAML file of these options; command-line flags win."
        )


def _add_input_options(g) -> None:
    """Where the files come from and where the dataset goes."""
    g.add_argument(
        "--input",
        action="append",
        default=None,
        help="File pattern (repeatable); '**' matches across directories. Local, gs:// or s3://.",
    )
    g.add_argument(
        "--manifest",
        default=None,
        help="CSV or JSONL file of path,label[,split] rows (replaces --input).",
    )
    g.add_argument("--output", default=None, help="Output directory (local, gs:// or s3://).")


def _add_split_options(g) -> None:
    """Splits, labels and shard planning."""
    g.add_argument(
        "--splits",
        default="train=0.9,validation=0.1",
        help="Hash split fractions, e.g. train=0.8,validation=0.1,test=0.1.",
    )
    g.add_argument(
        "--split_from",
        default="hash",
        choices=("hash", "path", "manifest"),
        help="hash: salted hash of the file key; path: <split>/<label>/file "
        "layout; manifest: the manifest's split column.",
    )
    g.add_argument(
        "--label_from",
        default="auto",
        help="parent: the file's directory name; manifest: its label column; "
        "dicom:TAG: a DICOM tag's value (e.g. dicom:BodyPartExamined; files without it are "
        "rejected as no_label); none: no labels; auto (default): manifest if given, else parent.",
    )
    g.add_argument(
        "--group_by",
        default="",
        help="Keep every file of a group in one split: dicom:TAG (e.g. dicom:PatientID, "
        "dicom:StudyInstanceUID), path:REGEX (its first capture group on the file's key) or "
        "manifest (its group column). A file without a group is a group of its own. Records "
        "hold only a salted hash of the group (image/group). See docs/dicom.md.",
    )
    g.add_argument(
        "--group_salt",
        default="",
        help="Secret mixed into the image/group hash (default: derived from --seed); set it "
        "when the group is a patient ID, so the hash cannot be matched against a list of IDs.",
    )
    g.add_argument(
        "--target_shard_mb",
        type=float,
        default=DEFAULT_TARGET_SHARD_MB,
        help="Planned shard size in MB (default %(default)s).",
    )
    g.add_argument("--min_shards", type=int, default=1, help="At least this many shards per split.")
    g.add_argument(
        "--seed", type=int, default=0, help="Salt of the split hash and of the in-shard order."
    )


def _add_run_options(g) -> None:
    """Local workers, resuming and replacing a dataset."""
    g.add_argument(
        "--workers",
        type=int,
        default=0,
        help="Local DirectRunner workers (default: 1, in-process, for inputs under "
        "3,000 files; one worker process per core from there, forked ready-imported; "
        "20,000 files where Beam starts its own worker processes).",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="Keep finished shards of an interrupted run with the same plan.",
    )
    g.add_argument(
        "--resume_verify",
        default="stamp",
        choices=RESUME_VERIFY_MODES,
        help="With --resume: stamp (default) reuses the earlier run's inspection of each "
        "file whose size and modification stamp (local: mtime, ctime, inode; bucket: "
        "update time) are unchanged, without reading it; full reads and inspects every "
        "file again. See docs/resume.md.",
    )
    g.add_argument(
        "--overwrite", action="store_true", help="Replace a dataset already in --output."
    )


def _add_version_options(g) -> None:
    """Versioned roots and their retention."""
    g.add_argument(
        "--versioned",
        action="store_true",
        help="Write each run into a new version folder under --output (ROOT/vYYYYMMDDTHHMMSSZ) "
        "and point ROOT/LATEST at it once it is complete; with --resume, continue the newest "
        "unfinished version instead.",
    )
    g.add_argument(
        "--full",
        action="store_true",
        help="With --versioned: convert from scratch, reusing nothing of the previous "
        "version (by default a versioned run takes the inspection of each unchanged file, "
        "and every shard whose planned content is unchanged, from the version LATEST "
        "names). See docs/scheduling.md.",
    )
    g.add_argument(
        "--keep_versions",
        type=int,
        default=0,
        help="With --versioned: keep this many complete versions, LATEST included, and "
        "delete older ones (0: keep all), except versions a running reader holds a lease "
        "on and versions superseded less than --keep_for ago: a later run deletes those.",
    )
    g.add_argument(
        "--keep_for",
        default=DEFAULT_KEEP_FOR,
        help="With --keep_versions: never delete a version sooner than this after a newer "
        f"one replaced it as LATEST: 0, 90s, 30m, 12h, 7d, 2w (default {DEFAULT_KEEP_FOR}; "
        "covers readers that hold no lease). See docs/scheduling.md.",
    )


def _add_reject_options(g) -> None:
    """Which files are rejected or dropped, and when the job fails."""
    g.add_argument(
        "--max_bad_fraction",
        type=float,
        default=DEFAULT_MAX_BAD_FRACTION,
        help="Fail the job (after writing rejected.jsonl) if more of the listed "
        "files than this are rejected.",
    )
    g.add_argument(
        "--dedupe",
        type=_str2bool,
        nargs="?",
        # A bare flag is true, as Beam's PipelineOptions.from_dictionary writes it (it drops
        # a false one, so a worker rebuilding the options reads the default: none does).
        const=True,
        default=True,
        help="Drop files whose bytes equal another's (default true).",
    )
    g.add_argument(
        "--max_pixels",
        type=int,
        default=DEFAULT_MAX_PIXELS,
        help="Reject images whose header declares more pixels (decompression bombs).",
    )
    g.add_argument(
        "--min_side",
        type=int,
        default=1,
        help="Reject images whose shorter side is below this.",
    )
    g.add_argument(
        "--max_file_mb",
        type=float,
        default=0.0,
        help="Reject files larger than this many MB (0: no limit).",
    )
    g.add_argument(
        "--apply_exif_orientation",
        type=_str2bool,
        nargs="?",
        const=True,  # a bare flag is true, as Beam's PipelineOptions.from_dictionary writes it
        default=True,
        help="Re-encode images whose EXIF orientation is not upright (default true).",
    )
    g.add_argument(
        "--animated",
        default="first_frame",
        choices=("first_frame", "reject"),
        help="Animated GIF/APNG/WebP: keep the first frame or reject.",
    )


def _add_image_options(g) -> None:
    """Which formats are kept or re-encoded, and at what size."""
    g.add_argument(
        "--transcode",
        default="auto",
        choices=TRANSCODE_MODES,
        help="What to do with formats other than JPEG/PNG/GIF. auto (default): keep every "
        "image TensorFlow decodes: BMP stored as lossless PNG, WebP as is (as PNG with alpha "
        "or animation); reject TIFF, PSD, ... as unsupported_format. none: the strict mode "
        "of old, JPEG/PNG/GIF only (BMP and WebP rejected as unsupported_format). png|jpeg: "
        "as auto, and also re-encode every other format Pillow decodes (TIFF, PSD, ICO, ...; "
        "decoded in a subprocess) to png/jpeg. jpeg: every record is a JPEG, for readers "
        "that decode JPEG only (tf.io.decode_jpeg, decode_and_crop_jpeg, TF Model Garden's "
        "decode_jpeg_only): JPEGs kept byte for byte, PNG/GIF/BMP/WebP/... re-encoded "
        "(RGB, transparency composited onto white, --jpeg_quality). See docs/reader.md.",
    )
    g.add_argument(
        "--bit_depth",
        type=int,
        default=8,
        choices=BIT_DEPTHS,
        help="DICOM (and other images decoded to arrays): 8 (default) stores 8-bit PNG as a "
        "viewer shows it (modality LUT, the file's VOI window, MONOCHROME1 inverted); 16 keeps "
        "the full range (16-bit PNG, image/value_scale and image/value_offset give the "
        "modality values back). See docs/dicom.md.",
    )
    g.add_argument(
        "--frames",
        default="first",
        choices=FRAME_MODES,
        help="Multi-frame DICOM: first (default) stores the first frame; all stores one "
        "record per frame (image/frame), every frame of a file in one split and shard.",
    )
    g.add_argument(
        "--max_side",
        type=int,
        default=0,
        help="Re-encode images whose longer side exceeds this (0: keep size).",
    )
    g.add_argument(
        "--resize_filter",
        default="lanczos",
        choices=RESIZE_FILTERS,
        help="Resampling filter of --max_side downscales (Pillow, antialiased): lanczos "
        "(default, sharpest), bicubic (~0.7x its CPU), bilinear (~0.4x).",
    )


def _add_storage_options(g) -> None:
    """How records and shards are stored."""
    g.add_argument(
        "--store",
        default="encoded",
        choices=STORE_MODES,
        help="How images are stored: encoded (default: the file's bytes, JPEG/PNG/GIF), "
        "pixels (raw uint8 RGB at the --max_side size, image/format raw: no decode at "
        "read time, several times the disk; needs --max_side), smart (raw pixels for "
        "images up to 32k pixels, encoded otherwise). See docs/storage_modes.md.",
    )
    g.add_argument(
        "--compression",
        default="none",
        choices=COMPRESSIONS,
        help="Shard compression: none (default) or gzip (TFRecord GZIP, shards named "
        ".tfrecord.gz; worth it for --store pixels, ~nothing for JPEG).",
    )
    g.add_argument(
        "--jpeg_quality",
        type=int,
        default=95,
        help="Quality of JPEG re-encodes (default 95; TensorFlow's Inception/ImageNet "
        "conversion scripts used 95-100).",
    )
    g.add_argument(
        "--dali_index",
        action="store_true",
        help="Also write NVIDIA DALI's index beside each shard, <shard file>.idx (one line "
        "per record: byte offset and size, as DALI's tfrecord2idx writes), for "
        "fn.readers.tfrecord(index_path=...). Not with --compression gzip (DALI reads "
        "uncompressed TFRecords only).",
    )


def _add_inspection_options(g) -> None:
    """How inspection decodes and reads files."""
    g.add_argument(
        "--jpeg_verify",
        default="dct",
        choices=JPEG_VERIFY_MODES,
        help="How inspection decodes JPEGs: dct (default) runs libjpeg over every "
        "coefficient of every block but outputs 1/8-scale pixels, which rejects exactly "
        "the files a full decode rejects for ~30%% less CPU; full also builds "
        "full-size pixels; strict is dct and also rejects JPEGs libjpeg warns about "
        "(damaged data it silently repairs, such as cut or zeroed stretches, which "
        "TensorFlow decodes without an error; also header oddities), ~1.9x dct's CPU.",
    )
    g.add_argument(
        "--read_concurrency",
        type=int,
        default=8,
        help="Files read at once per worker (hides bucket latency).",
    )
    g.add_argument(
        "--decode_threads",
        type=int,
        default=0,
        help="Threads decoding images per worker (default: cores / local "
        "workers on DirectRunner, 1 on distributed runners).",
    )


def _add_analysis_options(g) -> None:
    """The pixel statistics and the report."""
    g.add_argument(
        "--no_analyze",
        action="store_true",
        help="Skip the tensorflow-transform statistics phase.",
    )
    g.add_argument(
        "--no_report",
        action="store_true",
        help="Do not write DIR/report.html at the end (`imgrec preview DIR` writes it later).",
    )
    g.add_argument(
        "--stats_sample_fraction",
        type=float,
        default=1.0,
        help="Fraction of training images feeding pixel statistics.",
    )
    g.add_argument(
        "--stats_max_images",
        type=int,
        default=DEFAULT_STATS_MAX_IMAGES,
        help="Sample pixel statistics from about this many training images "
        "(0: no cap). Label counts and sizes always cover every image.",
    )


def parse_splits(text: str) -> tuple[tuple[str, float], ...]:
    """Parse `train=0.9,validation=0.1` into ordered (name, fraction) pairs summing to 1.

    Raises:
        OptionError: naming --splits and the expected form.
    """
    pairs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, frac = part.partition("=")
        name = name.strip()
        try:
            value = float(frac)
        except ValueError:
            value = -1.0
        if not sep or not name or not name.replace("_", "").replace("-", "").isalnum() or value < 0:
            raise OptionError(
                f"--splits: bad entry {part!r}; expected name=fraction, e.g. "
                "--splits train=0.9,validation=0.1"
            )
        pairs.append((name, value))
    if not pairs:
        raise OptionError("--splits is empty; e.g. --splits train=0.9,validation=0.1")
    if len({n for n, _ in pairs}) != len(pairs):
        raise OptionError(f"--splits names a split twice: {text!r}")
    total = sum(v for _, v in pairs)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise OptionError(f"--splits fractions sum to {total:g}, not 1: {text!r}")
    return tuple(pairs)


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """The validated convert settings the builder and the DoFns see (pickles small)."""

    inputs: tuple[str, ...]
    manifest: str | None
    output: str
    splits: tuple[tuple[str, float], ...] = (("train", 0.9), ("validation", 0.1))
    split_from: str = "hash"
    label_from: str = "parent"
    # --group_by: "", dicom:TAG, path:REGEX or manifest; --group_salt: the group hash's secret.
    group_by: str = ""
    group_salt: str = ""
    target_shard_mb: float = DEFAULT_TARGET_SHARD_MB
    min_shards: int = 1
    seed: int = 0
    resume: bool = False
    resume_verify: str = "stamp"
    overwrite: bool = False
    versioned: bool = False
    keep_versions: int = 0
    # --keep_for in seconds (the option's text is parsed by from_options).
    keep_for_s: float = DEFAULT_KEEP_FOR_S
    full: bool = False
    # Set by core.versions.plan_run, not by an option: the complete version a --versioned
    # run reuses unchanged files' inspections and unchanged shards from ("" for none).
    previous_version: str = ""
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION
    dedupe: bool = True
    # The per-image limits and transcode choices (--max_pixels ... --resize_filter), validated by
    # CheckOptions itself; inspection, the writer and the plan digests take it as it is.
    check: CheckOptions = dataclasses.field(default_factory=CheckOptions)
    store: str = "encoded"
    compression: str = "none"
    # --dali_index: a DALI index file (<shard>.idx) beside each shard.
    dali_index: bool = False
    read_concurrency: int = 8
    decode_threads: int = 1
    analyze: bool = True
    stats_sample_fraction: float = 1.0
    stats_max_images: int = DEFAULT_STATS_MAX_IMAGES

    def __post_init__(self):
        self._check_sources()
        self._check_versions()
        self._check_storage()
        self._check_throughput()

    def _check_sources(self) -> None:
        """--input/--manifest, --output, where splits and labels come from, shard planning."""
        if not self.inputs and not self.manifest:
            raise OptionError("give --input PATTERN (repeatable) or --manifest FILE")
        if self.inputs and self.manifest:
            raise OptionError("--input and --manifest exclude each other; give one")
        if not self.output:
            raise OptionError("--output DIR is required")
        if self.split_from == "manifest" and not self.manifest:
            raise OptionError("--split_from manifest needs --manifest FILE with a split column")
        if self.label_from == "manifest" and not self.manifest:
            raise OptionError("--label_from manifest needs --manifest FILE")
        _check_label_from(self.label_from)
        _check_group_by(self.group_by, self.manifest, self.split_from)
        if not self.target_shard_mb > 0:
            raise OptionError(f"--target_shard_mb must be > 0, got {self.target_shard_mb}")
        if self.resume_verify not in RESUME_VERIFY_MODES:
            raise OptionError(
                f"--resume_verify must be one of {', '.join(RESUME_VERIFY_MODES)}, "
                f"got {self.resume_verify!r}"
            )
        if self.min_shards < 1:
            raise OptionError(f"--min_shards must be >= 1, got {self.min_shards}")

    def _check_versions(self) -> None:
        """--keep_versions, --keep_for, --full and --overwrite against --versioned."""
        if self.keep_versions < 0:
            raise OptionError(
                f"--keep_versions must be >= 0 (0: keep all), got {self.keep_versions}"
            )
        if self.keep_versions and not self.versioned:
            raise OptionError("--keep_versions needs --versioned (it prunes old versions)")
        if not self.keep_for_s >= 0:
            raise OptionError(f"--keep_for must be a duration >= 0, got {self.keep_for_s} s")
        if self.full and not self.versioned:
            raise OptionError(
                "--full needs --versioned (it stops a versioned run from reusing the previous "
                "version; an unversioned run converts from scratch unless --resume)"
            )
        if self.previous_version and not self.versioned:
            raise OptionError("previous_version is only for --versioned runs")
        if self.versioned and self.overwrite:
            raise OptionError(
                "--overwrite does not apply to --versioned (each run writes a new version); "
                "drop one of them"
            )

    def _check_storage(self) -> None:
        """--max_bad_fraction, the per-image options and how records are stored."""
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise OptionError(f"--max_bad_fraction must be in [0, 1], got {self.max_bad_fraction}")
        if not isinstance(self.check, CheckOptions):
            raise OptionError(f"check must be a CheckOptions, got {type(self.check).__name__}")
        if self.store not in STORE_MODES:
            raise OptionError(
                f"--store must be one of {', '.join(STORE_MODES)}, got {self.store!r}"
            )
        if self.store == "pixels" and not self.check.max_side:
            raise OptionError(
                "--store pixels needs --max_side N (the stored size's longer side, e.g. "
                "--max_side 256 for 224x224 training): raw pixels at full photo size would be "
                "tens of times the JPEG bytes"
            )
        if self.compression not in COMPRESSIONS:
            raise OptionError(
                f"--compression must be one of {', '.join(COMPRESSIONS)}, got {self.compression!r}"
            )
        if self.dali_index and self.compression != "none":
            raise OptionError(
                "--dali_index with --compression gzip: DALI's fn.readers.tfrecord reads "
                "uncompressed TFRecord files only (it fails on GZIP shards), so these indexes "
                "would be of no use; drop --compression gzip (or --dali_index)"
            )
        if self.check.transcode == "jpeg" and self.check.bit_depth == 16:
            raise OptionError(
                "--transcode jpeg with --bit_depth 16: JPEG holds 8 bits; drop one of them"
            )
        if self.check.transcode == "jpeg" and self.store != "encoded":
            raise OptionError(
                f"--transcode jpeg with --store {self.store}: --transcode jpeg makes every "
                "record a JPEG for JPEG-only readers, --store pixels|smart writes raw-pixel "
                "records those readers cannot decode; drop one of them"
            )

    def _check_throughput(self) -> None:
        """Decoding threads, read concurrency and the pixel-statistics sample."""
        if self.decode_threads < 1:
            raise OptionError(f"--decode_threads must be >= 1, got {self.decode_threads}")
        if self.read_concurrency < 1:
            raise OptionError(f"--read_concurrency must be >= 1, got {self.read_concurrency}")
        if self.stats_max_images < 0:
            raise OptionError(
                f"--stats_max_images must be >= 0 (0: no cap), got {self.stats_max_images}"
            )
        if not 0.0 < self.stats_sample_fraction <= 1.0:
            raise OptionError(
                f"--stats_sample_fraction must be in (0, 1], got {self.stats_sample_fraction}"
            )

    @property
    def split_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.splits)

    @property
    def train_split(self) -> str:
        """The split whose images feed statistics: 'train' if present, else the first one."""
        names = self.split_names
        return "train" if "train" in names else names[0]

    @classmethod
    def from_options(cls, options: PipelineOptions) -> ConvertConfig:
        """Build from parsed pipeline options; raises OptionError on bad values."""
        o = options.view_as(ConvertOptions)
        return cls(
            inputs=tuple(o.input or ()),
            manifest=o.manifest,
            output=(o.output or "").rstrip("/"),
            splits=parse_splits(o.splits),
            split_from=o.split_from,
            label_from=(
                ("manifest" if o.manifest else "parent") if o.label_from == "auto" else o.label_from
            ),
            group_by=o.group_by or "",
            group_salt=o.group_salt or "",
            target_shard_mb=o.target_shard_mb,
            min_shards=o.min_shards,
            seed=o.seed,
            resume=o.resume,
            resume_verify=o.resume_verify,
            overwrite=o.overwrite,
            versioned=o.versioned,
            keep_versions=o.keep_versions,
            keep_for_s=_keep_for_seconds(o.keep_for),
            full=o.full,
            max_bad_fraction=o.max_bad_fraction,
            dedupe=o.dedupe,
            check=_check_options(o),
            store=o.store,
            compression=o.compression,
            dali_index=o.dali_index,
            read_concurrency=o.read_concurrency,
            decode_threads=o.decode_threads or 1,
            analyze=not o.no_analyze,
            stats_sample_fraction=o.stats_sample_fraction,
            stats_max_images=o.stats_max_images,
        )


def _check_label_from(label_from: str) -> None:
    """--label_from: parent, none, manifest or dicom:TAG (never a patient-identifying tag)."""
    if label_from in ("parent", "none", "manifest"):
        return
    kind, _, keyword = label_from.partition(":")
    if kind != "dicom" or not keyword:
        raise OptionError(
            f"--label_from must be auto, parent, none, manifest or dicom:TAG, got {label_from!r}"
        )
    from transforms.images import dicom

    _check_dicom_keyword("--label_from", keyword)
    if keyword in dicom.IDENTIFYING_KEYWORDS:
        raise OptionError(
            f"--label_from dicom:{keyword} would write a patient-identifying value into every "
            "record; use --group_by dicom:" + keyword + " (records hold only a salted hash)"
        )


def _check_dicom_keyword(option: str, keyword: str) -> None:
    from transforms.images import dicom

    if not dicom.valid_keyword(keyword):
        raise OptionError(
            f"{option} dicom:{keyword}: not a DICOM keyword; use the dictionary's name, e.g. "
            "PatientID, StudyInstanceUID, BodyPartExamined"
        )


def _check_group_by(group_by: str, manifest: str | None, split_from: str) -> None:
    """--group_by: "", dicom:TAG, path:REGEX (one capture group at least) or manifest."""
    import re

    if not group_by:
        return
    if split_from != "hash":
        raise OptionError(
            f"--group_by with --split_from {split_from}: the splits come from the "
            f"{split_from}, so there is nothing to group; drop one of them"
        )
    kind, _, arg = group_by.partition(":")
    if kind == "manifest" and not arg:
        if not manifest:
            raise OptionError("--group_by manifest needs --manifest FILE with a group column")
        return
    if kind == "dicom" and arg:
        _check_dicom_keyword("--group_by", arg)
        return
    if kind == "path" and arg:
        try:
            groups = re.compile(arg).groups
        except re.error as e:
            raise OptionError(f"--group_by path:{arg}: not a regular expression ({e})") from e
        if groups < 1:
            raise OptionError(
                f"--group_by path:{arg} has no capture group; e.g. path:^([^/]+)/ groups by "
                "the first folder under the input root"
            )
        return
    raise OptionError(f"--group_by must be dicom:TAG, path:REGEX or manifest, got {group_by!r}")


def _keep_for_seconds(text: str) -> float:
    """--keep_for's seconds; OptionError naming the accepted forms otherwise."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise OptionError(str(e)) from None
