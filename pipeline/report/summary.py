"""The summary a conversion prints (Beam-free: the no-change rerun prints it too)."""

from __future__ import annotations

import os
import posixpath

from core import schema

__all__ = ["format_summary", "non_jpeg_warning", "object_lines", "stored_forms"]


def _join(base: str, name: str) -> str:
    return posixpath.join(base.rstrip("/"), name) if "://" in base else os.path.join(base, name)


def non_jpeg_warning(info: dict) -> str:
    """The warning a dataset with non-JPEG encoded records deserves, or "" (also for datasets
    whose dataset_info.json does not count records per format: older runs).

    Much training code decodes JPEG only (tf.io.decode_jpeg, tf.image.decode_and_crop_jpeg, TF
    Model Garden's image classification with decode_jpeg_only: True) and stops at the first
    PNG with "Invalid JPEG data"; --transcode jpeg stores every image as a JPEG. Raw-pixel
    records (--store pixels|smart) are left out: they are a choice made for imgrec's reader.
    """
    formats = info.get("formats_written") or {}
    other = {f: n for f, n in formats.items() if f not in ("jpeg", schema.RAW_FORMAT) and n}
    if not other:
        return ""
    listed = ", ".join(f"{f} {n}" for f, n in sorted(other.items(), key=lambda kv: -kv[1]))
    total = sum(other.values())
    records, are, them = ("record", "is", "it") if total == 1 else ("records", "are", "them")
    return (
        f"{total} {records} {are} not JPEG ({listed}): training code that decodes JPEG only "
        "(tf.io.decode_jpeg, decode_and_crop_jpeg, TF Model Garden's decode_jpeg_only) fails "
        f"on {them} with 'Invalid JPEG data'; imgrec's reader reads {them}. Convert with "
        "--transcode jpeg to store every image as a JPEG (docs/reader.md)."
    )


def stored_forms(info: dict) -> tuple[str, str]:
    """How the records store their images, from dataset_info.json: records per image/format
    ("jpeg 1, png 2, raw 1") and each split's records per pixel layout, dtype x channels
    ("train uint16x13 2, uint8x3 10; validation uint8x3 3"); "" for what an older dataset does
    not record."""
    formats = info.get("formats_written") or {}
    formats_text = ", ".join(f"{f} {n}" for f, n in sorted(formats.items()) if n)
    per_split = []
    for split, s in info.get("splits", {}).items():
        layouts = s.get("pixel_layouts")
        if layouts:
            per_split.append(
                f"{split} " + ", ".join(f"{k} {n}" for k, n in sorted(layouts.items()))
            )
    return formats_text, "; ".join(per_split)


def object_lines(info: dict, output: str) -> list[str]:
    """The summary's lines about objects (annotated datasets; none otherwise)."""
    annotations = info.get("annotations")
    if not annotations:
        return []
    splits = annotations.get("splits", {}).values()
    objects = sum(s.get("objects", 0) for s in splits)
    negatives = sum(s.get("negatives", 0) for s in splits)
    clipped = sum(s.get("boxes_clipped", 0) for s in splits)
    dropped = sum(sum(s.get("dropped", {}).values()) for s in splits)
    masks = sum(s.get("masks", 0) for s in splits)
    classes = len(annotations.get("label_map", []))
    lines = [
        f"  objects     {objects:>7}   {classes} classes; {negatives} images without objects"
        + (f"; {masks} instance masks" if masks else ""),
        f"  boxes       {clipped:>7}   clipped, {dropped} dropped"
        + (f" (each in {_join(output, schema.OBJECTS_CHANGED)})" if clipped or dropped else ""),
    ]
    unmatched = annotations.get("num_unmatched_annotations", 0)
    if unmatched:
        lines.append(
            f"  unmatched   {unmatched:>7}   annotated images not found: "
            f"{_join(output, schema.UNMATCHED_ANNOTATIONS)}"
        )
    return lines


def format_summary(info: dict, output: str, seconds: float) -> str:
    """The human summary printed after a conversion."""
    lines = [
        f"imgrec: converted {info['num_listed']} listed files in {seconds:.1f} s "
        f"({info['num_listed'] / max(seconds, 1e-9):.0f} files/s) -> {output}"
    ]
    parts = []
    for split, s in info["splits"].items():
        parts.append(
            f"{split} {s['num_examples']} ({s['num_shards']} shard"
            f"{'s' if s['num_shards'] != 1 else ''}, {s['num_bytes'] / 1e6:.1f} MB"
            + (f", {s['num_groups']} groups)" if "num_groups" in s else ")")
        )
    lines.append(f"  written     {info['num_written']:>7}   " + ", ".join(parts))
    reasons = ", ".join(f"{k} {v}" for k, v in info.get("rejected_by_reason", {}).items())
    lines.append(f"  rejected    {info['num_rejected']:>7}   {reasons}".rstrip())
    lines.append(f"  duplicates  {info['num_duplicates']:>7}")
    near = info.get("near_duplicates")
    if near is not None:
        lines.append(
            f"  near-duplicates: {near['num_clusters']} clusters, {near['num_images']} images, "
            f"{near['num_across_splits']} clusters across splits"
            + (f" ({_join(output, schema.NEAR_DUPLICATES)})" if near["num_clusters"] else "")
        )
    transcoded = ", ".join(f"{k} {v}" for k, v in info.get("transcoded_by_reason", {}).items())
    if transcoded:
        lines.append(
            f"  transcoded  {sum(info['transcoded_by_reason'].values()):>7}   {transcoded}"
        )
    total = sum(s["num_bytes"] for s in info["splits"].values())
    nshards = sum(s["num_shards"] for s in info["splits"].values())
    lines.append(
        f"  shards      {nshards:>7}   {total / 1e6:.1f} MB in all; labels: "
        f"{len(info['label_names'])}"
    )
    lines += object_lines(info, output)
    tiles = info.get("tiles")
    if tiles:  # --tile: records are chips of the files written
        options = tiles["options"]
        lines.append(
            f"  chips       {tiles['num_chips_written']:>7}   of {options['height']}x"
            f"{options['width']} (overlap {options['overlap']}); "
            f"{tiles['num_chips_skipped']} skipped by --tile_min_valid "
            f"in {len(tiles['skipped_by_scene'])} scenes"
        )
    if info.get("num_rejected"):
        lines.append(f"  reasons per file: {_join(output, schema.REJECTED)}")
    warning = non_jpeg_warning(info)
    if warning:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)
