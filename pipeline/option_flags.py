"""The flags of `imgrec convert`: names, defaults and help, in argparse groups by job.

pipeline/options.py's ConvertOptions adds them; ConvertConfig validates what they parse to.
"""

from __future__ import annotations

from core.retention import DEFAULT_KEEP_FOR
from core.schema import COMPRESSIONS, STORE_MODES
from transforms.annotations.options import (
    DEFAULT_MASK_IGNORE,
    RELABEL_MODES,
    UNANNOTATED_MODES,
)
from transforms.hamming import DEFAULT_THRESHOLD, NEAR_DUPLICATE_MODES
from transforms.images.limits import (
    BIT_DEPTHS,
    DEFAULT_MAX_PIXELS,
    FRAME_MODES,
    JPEG_VERIFY_MODES,
    RESIZE_FILTERS,
    TRANSCODE_MODES,
)
from transforms.reuse_inspections import RESUME_VERIFY_MODES

__all__ = [
    "DEFAULT_MAX_BAD_FRACTION",
    "DEFAULT_STATS_MAX_IMAGES",
    "DEFAULT_TARGET_SHARD_MB",
    "add_flag_groups",
]

# Shards near 128 MB keep TFRecord reads sequential and large on GCS/S3 while leaving enough
# files (>= 10s per split at ImageNet scale) for every input pipeline of a multi-host job.
DEFAULT_TARGET_SHARD_MB = 128.0
# 5 % bad files is more than any healthy corpus has and less than a wrong glob or a broken bucket.
DEFAULT_MAX_BAD_FRACTION = 0.05
# Pixel statistics decode each sampled image at full size (inspection otherwise verifies JPEGs at
# 1/8 DCT scale); a seeded sample this size estimates the mean and std closely enough to
# normalise with, so reruns agree and large corpora skip most of those decodes.
DEFAULT_STATS_MAX_IMAGES = 1_000


def _str2bool(value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true/false, got {value!r}")


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
        choices=("hash", "path", "manifest", "annotations"),
        help="hash: salted hash of the file key; path: <split>/<label>/file "
        "layout; manifest: the manifest's split column; annotations: the annotation file "
        "naming the image (COCO instances_train2017: train; a YOLO YAML's train/val folders).",
    )
    g.add_argument(
        "--label_from",
        default="auto",
        help="parent: the file's directory name; manifest: its label column; dicom:TAG: a "
        "tag's value; none: no labels; auto (default): manifest if given, else parent.",
    )
    g.add_argument(
        "--group_by",
        default="",
        help="Every file of a group in one split: dicom:TAG (dicom:PatientID), path:REGEX (its "
        "first capture group) or manifest (a group column). docs/dicom.md.",
    )
    g.add_argument(
        "--group_salt",
        default="",
        help="Secret key of the image/group hash (default: from --seed); set it for patient IDs.",
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
        "--near_duplicates",
        choices=NEAR_DUPLICATE_MODES,
        default="report",
        help="Near-copies (resized, re-encoded, cropped, brightened; a perceptual hash): report "
        "(near_duplicates.jsonl, the default), group (each cluster in one split), drop (keep the "
        "first by key) or off. See docs/options.md.",
    )
    g.add_argument(
        "--near_duplicates_threshold",
        type=int,
        default=DEFAULT_THRESHOLD,
        help=f"Hash bits (of 64) near-copies may differ by (default {DEFAULT_THRESHOLD}).",
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
        help="DICOM and 16-bit PNG: 8 (default): 8-bit as a viewer shows it; 16: the full "
        "range, 16-bit PNG (image/value_scale, image/value_offset give DICOM's modality "
        "values). docs/dicom.md.",
    )
    g.add_argument(
        "--frames",
        default="first",
        choices=FRAME_MODES,
        help="Multi-frame DICOM: the first frame (default), or all: one record per frame.",
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


def _add_tile_options(g) -> None:
    """Chips of scenes (--tile): one record per chip. docs/tiles.md."""
    g.add_argument(
        "--tile",
        default=None,
        help="H or HxW: cut every image into chips of H x W source pixels, one record each "
        "(image/tile/x, image/tile/y; geo/transform of the chip). TIFFs are read by window.",
    )
    g.add_argument(
        "--tile_overlap", type=int, default=0, help="Pixels shared by neighbouring chips."
    )
    g.add_argument(
        "--tile_min_valid",
        type=float,
        default=0.0,
        help="Skip chips whose fraction of valid pixels (GDAL's dataset mask) is below this.",
    )
    g.add_argument(
        "--tile_min_object",
        type=float,
        default=0.5,
        help="With --annotations: keep an object in a chip when this much of its area is inside.",
    )
    g.add_argument(
        "--tile_keep_empty",
        type=float,
        default=1.0,
        help="With --annotations: the fraction of chips without objects kept (deterministic).",
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


def _add_annotation_options(g) -> None:
    """Objects and masks (docs/annotations.md)."""
    g.add_argument(
        "--annotations",
        action="append",
        default=None,
        help="COCO JSON, Pascal VOC XML, a YOLO dataset YAML or labels/ (repeatable; a file, glob or "
        "folder; local, gs:// or s3://), found from the content. Without --input, the images "
        "are the ones the annotations name.",
    )
    g.add_argument(
        "--masks",
        default="",
        help="Semantic label-map PNG of each image, e.g. 'masks/{stem}.png' ({stem}, {name}, "
        "{key_stem}: the image's base name without/with extension, its key without extension).",
    )
    g.add_argument(
        "--mask_classes",
        default="",
        help="Text file naming the --masks values: one name per line (line N: value N), or "
        "'VALUE NAME' lines.",
    )
    g.add_argument(
        "--mask_ignore",
        type=int,
        default=DEFAULT_MASK_IGNORE,
        help="The --masks value meaning 'ignore' (default %(default)s).",
    )
    g.add_argument(
        "--unannotated",
        default="keep",
        choices=UNANNOTATED_MODES,
        help="A listed image no annotation names: keep (a negative, no objects; default) or "
        "reject (no_annotation).",
    )
    g.add_argument(
        "--no_instance_masks",
        action="store_true",
        help="Leave image/object/mask out (written by default where objects have polygons or RLE).",
    )
    g.add_argument(
        "--relabel",
        default="keep",
        choices=RELABEL_MODES,
        help="keep (default): the files' category ids; contiguous: ids 1..N in id order.",
    )


def add_flag_groups(g) -> None:
    """Every convert flag, added to the argparse group `g`."""
    _add_input_options(g)
    _add_annotation_options(g)
    _add_split_options(g)
    _add_run_options(g)
    _add_version_options(g)
    _add_reject_options(g)
    _add_image_options(g)
    _add_tile_options(g)
    _add_storage_options(g)
    _add_inspection_options(g)
    _add_analysis_options(g)
    g.add_argument(
        "--config", default=None, help="YAML file of these options; command-line flags win."
    )
