"""Convert options: the Beam `PipelineOptions` subclass users set, and the validated frozen config."""

from __future__ import annotations

import dataclasses
import math

from apache_beam.options.pipeline_options import PipelineOptions

from core.retention import DEFAULT_KEEP_FOR, parse_duration
from core.schema import COMPRESSIONS, STORE_MODES
from core.tile_grid import TileOptions, parse_tile_size
from transforms import groups
from transforms.annotations.options import AnnotationOptions
from transforms.hamming import DEFAULT_THRESHOLD, check_near_duplicates
from transforms.images.limits import (
    CheckOptions,
)
from transforms.reuse_inspections import RESUME_VERIFY_MODES

__all__ = ["ConvertOptions", "ConvertConfig", "OptionError", "parse_splits"]

from pipeline.option_flags import (
    DEFAULT_MAX_BAD_FRACTION,
    DEFAULT_STATS_MAX_IMAGES,
    DEFAULT_TARGET_SHARD_MB,
    add_flag_groups,
)

# --keep_for's default in seconds (core/retention.py says why a day).
DEFAULT_KEEP_FOR_S = parse_duration(DEFAULT_KEEP_FOR)


class OptionError(ValueError):
    """A convert option has a bad value; the message names the option and the fix."""


def _check_options(o: ConvertOptions) -> CheckOptions:
    """The per-image options (every CheckOptions field has the option's name), validated.

    Raises:
        OptionError: naming the option.
    """
    try:
        return CheckOptions(
            **{
                f.name: getattr(o, f.name)
                for f in dataclasses.fields(CheckOptions)
                if f.name != "phash"
            },
            phash=o.near_duplicates != "off",
        )
    except ValueError as e:
        raise OptionError(str(e)) from e


class ConvertOptions(PipelineOptions):
    """Options of `imgrec convert`, in Beam's underscore style so they mix with Beam's own flags."""

    @classmethod
    def _add_argparse_args(cls, parser):
        add_flag_groups(parser.add_argument_group("imgrec convert"))


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
    # --near_duplicates (transforms/near_duplicates.py) and its Hamming threshold in bits.
    near_duplicates: str = "report"
    near_threshold: int = DEFAULT_THRESHOLD
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
    # --annotations, --masks and their choices; None: a run without objects (today's records).
    annotations: AnnotationOptions | None = None
    # --tile and its companions; None: one record per image.
    tiles: TileOptions | None = None

    def __post_init__(self):
        self._check_sources()
        self._check_versions()
        self._check_storage()
        self._check_throughput()
        self._check_tiles()

    def _check_tiles(self) -> None:
        """--tile against the options that decide a record's pixels some other way."""
        if self.tiles is None:
            return
        clashes = {
            "--max_side": bool(self.check.max_side),
            "--frames all": self.check.frames == "all",
            f"--store {self.store}": self.store != "encoded",
        }
        for option, clash in clashes.items():
            if clash:
                raise OptionError(
                    f"--tile with {option}: chips are cut from the first page or frame at "
                    f"source resolution and stored encoded; drop {option} (or --tile)"
                )

    def _check_sources(self) -> None:
        """--input/--manifest, --output, where splits and labels come from, shard planning."""
        if not self.inputs and not self.manifest and not self._annotated:
            raise OptionError(
                "give --input PATTERN (repeatable), --manifest FILE or --annotations PATH"
            )
        if self.inputs and self.manifest:
            raise OptionError("--input and --manifest exclude each other; give one")
        if not self.output:
            raise OptionError("--output DIR is required")
        if self.split_from == "manifest" and not self.manifest:
            raise OptionError("--split_from manifest needs --manifest FILE with a split column")
        if self.split_from == "annotations" and not self._annotated:
            raise OptionError("--split_from annotations needs --annotations PATH")
        if self.label_from == "manifest" and not self.manifest:
            raise OptionError("--label_from manifest needs --manifest FILE")
        try:
            groups.check_label_from(self.label_from)
            groups.check_group_by(self.group_by, self.manifest, self.split_from)
        except ValueError as e:
            raise OptionError(str(e)) from e
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
        try:
            check_near_duplicates(self.near_duplicates, self.near_threshold, self.split_from)
        except ValueError as e:
            raise OptionError(str(e)) from e
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
        if self.store != "encoded" and self.check.bit_depth == 16:
            raise OptionError(
                f"--store {self.store} with --bit_depth 16: raw-pixel records hold uint8 RGB "
                "(what the reader's pixel path reads); keep 16 bits with --store encoded "
                "(16-bit PNG), or drop --bit_depth 16"
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
    def _annotated(self) -> bool:
        return self.annotations is not None and bool(self.annotations.paths)

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
            label_from=_label_from(o),
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
            near_duplicates=o.near_duplicates,
            near_threshold=o.near_duplicates_threshold,
            check=_check_options(o),
            store=o.store,
            compression=o.compression,
            dali_index=o.dali_index,
            read_concurrency=o.read_concurrency,
            decode_threads=o.decode_threads or 1,
            analyze=not o.no_analyze,
            stats_sample_fraction=o.stats_sample_fraction,
            stats_max_images=o.stats_max_images,
            annotations=_annotation_options(o),
            tiles=_tile_options(o),
        )


def _tile_options(o: ConvertOptions) -> TileOptions | None:
    """--tile and its companions; None without --tile (the companions then refused)."""
    if not o.tile:
        defaults = TileOptions(1, 1)
        if (o.tile_overlap, o.tile_min_valid, o.tile_min_object, o.tile_keep_empty) != (
            defaults.overlap,
            defaults.min_valid,
            defaults.min_object,
            defaults.keep_empty,
        ):
            raise OptionError(
                "--tile_overlap, --tile_min_valid, --tile_min_object and --tile_keep_empty "
                "apply to --tile: give --tile H[xW]"
            )
        return None
    try:
        height, width = parse_tile_size(o.tile)
        return TileOptions(
            height,
            width,
            overlap=o.tile_overlap,
            min_valid=o.tile_min_valid,
            min_object=o.tile_min_object,
            keep_empty=o.tile_keep_empty,
        )
    except ValueError as e:
        raise OptionError(str(e)) from e


def _label_from(o: ConvertOptions) -> str:
    """--label_from auto: the manifest's label column, none for a detection dataset (its
    classes are its objects'), else the parent folder's name."""
    if o.label_from != "auto":
        return o.label_from
    if o.manifest:
        return "manifest"
    return "none" if o.annotations else "parent"


def _annotation_options(o: ConvertOptions) -> AnnotationOptions | None:
    """--annotations and its companions; None for a run without objects or masks."""
    try:
        options = AnnotationOptions(
            paths=tuple(o.annotations or ()),
            masks=o.masks or "",
            mask_classes=o.mask_classes or "",
            mask_ignore=o.mask_ignore,
            unannotated=o.unannotated,
            instance_masks=not o.no_instance_masks,
            relabel=o.relabel,
        )
    except ValueError as e:
        raise OptionError(str(e)) from e
    if not options.active:
        if o.unannotated != "keep" or o.relabel != "keep" or o.no_instance_masks:
            raise OptionError(
                "--unannotated, --relabel and --no_instance_masks apply to --annotations: "
                "give --annotations PATH"
            )
        return None
    return options


def _keep_for_seconds(text: str) -> float:
    """--keep_for's seconds; OptionError naming the accepted forms otherwise."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise OptionError(str(e)) from None
