"""The reject taxonomy: every reason written to rejected.jsonl, the Rejected error, the Reject row.

Keys of REASONS are a public interface (users script against rejected.jsonl, docs/rejects.md
documents each): add new ones, never rename or reuse one.
"""

from __future__ import annotations

from core import names

__all__ = [
    "ANNOTATION_REASONS",
    "IMAGE_REASONS",
    "LISTING_REASONS",
    "MAX_ERROR_DETAIL",
    "REASONS",
    "Rejected",
    "decoder_error",
    "make_reject",
]

# Reasons of the per-file checks (inspection and the writer: transforms/images, inspect_images,
# write_shards).
IMAGE_REASONS = {
    "unreadable": "the file could not be read (missing, permission, storage error)",
    "empty_file": "the file has zero bytes",
    "file_too_large": "the file is larger than --max_file_mb",
    "not_an_image": "the bytes are no image format we know (text, HTML, PDF, zip, ...)",
    "no_pixel_data": "a DICOM file that holds no image (RT plan or structure set, structured "
    "report, waveform, dose without pixels); detail names its SOP class",
    "unsupported_format": "an image format TensorFlow does not decode (TIFF, PSD, HEIC, ...); "
    "--transcode png|jpeg converts those Pillow can decode. With --transcode none, also BMP "
    "and WebP. Also a DICOM transfer syntax no installed decoder reads (detail names it)",
    "truncated": "the image data ends early (cut-off download or copy)",
    "corrupt": "the header or the compressed data is damaged; detail names the decoder error "
    "(with --jpeg_verify strict, also JPEGs libjpeg warns about: data it repaired silently)",
    "too_many_pixels": "the header declares more than --max_pixels pixels (decompression bomb)",
    "too_many_scans": "a progressive JPEG with more scans than any encoder writes (CPU bomb)",
    "too_small": "the shorter side is below --min_side",
    "animated": "an animated image (GIF, APNG, WebP, multi-page TIFF) and --animated reject",
    "changed_during_run": "the file's bytes changed between inspection and writing",
    "decoder_error": "a decoder (or our own per-file code) failed on this file in a way nobody "
    "anticipated, or its decoder process died; detail names the exception or the signal. "
    "The file is left out, the job goes on",
}

# Reasons raised while listing (transforms/list_images.py, transforms/match_local.py).
LISTING_REASONS = {
    "no_label": "--label_from dicom:TAG and the file has no such tag (or is not DICOM)",
    "bad_manifest_row": "a manifest row without a path or label; detail has the line number",
    "no_split": "--split_from path|manifest found no split for this file",
    "broken_link": "the pattern matched a symbolic link whose target does not exist",
    "unreadable_dir": "a folder the pattern reaches could not be listed (permissions); what it "
    "holds is unknown and not converted",
    "not_a_file": "the pattern matched a folder (e.g. one named x.jpg) or a FIFO/socket/device",
}

# Reasons of the annotation join and the writer's masks (transforms/match_annotations.py,
# transforms/shard_objects.py).
ANNOTATION_REASONS = {
    "no_annotation": "--unannotated reject (or --split_from annotations) and no annotation file "
    "names this image",
    "mask_missing": "--masks: the image's mask file does not exist or cannot be read",
    "mask_unreadable": "--masks: the mask file is no label-map image Pillow reads (8-bit or "
    "16-bit grayscale, or a palette PNG)",
    "mask_size_mismatch": "--masks: the mask's size is not the image's; detail names both",
}

# The whole taxonomy: every reason a rejected.jsonl line may hold.
REASONS = {**IMAGE_REASONS, **LISTING_REASONS, **ANNOTATION_REASONS}


class Rejected(Exception):
    """The file must not be written; `reason` is a key of REASONS, `detail` says why."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def make_reject(path: str, reason: str, detail: str) -> dict:
    """One rejected.jsonl row (the Reject element): {"path", "reason", "detail"}.

    Raises:
        ValueError: `reason` is not in REASONS (add it there, and to docs/rejects.md).
    """
    if reason not in REASONS:
        raise ValueError(f"unknown reject reason {reason!r}: add it to core/rejects.py")
    # JSON lines are UTF-8: a name that is not travels escaped (core/names.py), and a
    # detail quoting one (an OS error, a link target) shows its bytes as \udcXX escapes.
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"path": names.from_local(path), "reason": reason, "detail": detail}


# A decoder_error detail keeps this many characters of the exception's text: enough for the
# message, not a whole repr of a huge argument.
MAX_ERROR_DETAIL = 300


def decoder_error(path: str, error: BaseException) -> dict:
    """The Reject for a file whose per-file step raised something unanticipated (the per-file
    dead-letter boundary: a decoder bug on one file must not fail a bundle of thousands)."""
    text = str(error).strip().replace("\n", " ")
    detail = f"{type(error).__name__}: {text}" if text else type(error).__name__
    if len(detail) > MAX_ERROR_DETAIL:
        detail = detail[: MAX_ERROR_DETAIL - 3] + "..."
    return make_reject(path, "decoder_error", detail)
