"""The launcher's step for --annotations and --masks: read once, stage for the job, clean up.

Runs before the preflight: a malformed annotation file stops the run (exit 2) before anything is
written, and without --input the images the annotations name become the job's manifest.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import shutil
import sys
import tempfile

from core import schema, storage
from pipeline.options import ConvertConfig
from transforms.annotations.objects import AnnotationError
from transforms.annotations.options import parse_mask_classes
from transforms.list_images import resolve_local
from transforms.load_annotations import AnnotatedImage, LoadedAnnotations, load_annotations

__all__ = ["read_annotations", "remove_staging"]

_STAGING_PREFIX = "imgrec-annotations-"
_MANIFEST = "images.jsonl"


def read_annotations(config: ConvertConfig) -> ConvertConfig:
    """`config` with its annotations read and staged (and, without --input, a manifest of the
    images they name; with --split_from annotations, their splits).

    Raises:
        AnnotationError: a file that cannot be read as annotations, naming it and the fix.
    """
    options = config.annotations
    if options is None:
        return config
    if options.masks:
        options = dataclasses.replace(options, masks=resolve_local(options.masks))
    if options.mask_classes:
        path = resolve_local(options.mask_classes)
        try:
            text = storage.read_bytes(path).decode("utf-8-sig")
        except (storage.ReadError, UnicodeDecodeError) as e:
            raise AnnotationError(path, "", f"unreadable ({e})", "fix: check --mask_classes") from e
        classes = parse_mask_classes(text, path)
        options = dataclasses.replace(options, segmentation_classes=classes)
    if not options.paths:
        return dataclasses.replace(config, annotations=options)
    staging = _staging_folder(config.output)
    loaded = load_annotations(options, staging)
    if any(cid == 0 for cid, _ in loaded.options.label_map):
        print(
            "imgrec: note: a category has id 0, which the Object Detection API keeps for the "
            "background (Label Studio's COCO export starts at 0); --relabel contiguous writes "
            "ids 1..N",
            file=sys.stderr,
        )
    changes: dict = {"annotations": loaded.options}
    if not config.inputs and not config.manifest:
        changes["manifest"] = _write_manifest(staging, loaded)
    if config.split_from == "annotations":
        changes["splits"] = _splits(loaded.options.split_names, config)
    return dataclasses.replace(config, **changes)


def remove_staging(config: ConvertConfig) -> None:
    """Delete what read_annotations staged (the job has read it)."""
    options = config.annotations
    if options is None or not options.staged:
        return
    if storage.is_local(options.staged):
        shutil.rmtree(options.staged, ignore_errors=True)
    else:
        storage.delete_quietly(
            [m.path for m in storage.match_under(options.staged.rstrip("/"), "**")]
        )


def _staging_folder(output: str) -> str:
    """A folder the job's workers read: a temporary one on this machine for a local output,
    else beside the output in its bucket."""
    if storage.is_local(output):
        return tempfile.mkdtemp(prefix=_STAGING_PREFIX)
    return storage.join(output, schema.ANNOTATION_STAGING)


def _splits(names: tuple[str, ...], config: ConvertConfig) -> tuple[tuple[str, float], ...]:
    """--split_from annotations: the files' split names (fractions unused: every image's split
    comes from its file; images no file names are rejected)."""
    if not names:
        return config.splits
    return tuple((name, 1.0 if i == 0 else 0.0) for i, name in enumerate(names))


def _write_manifest(staging: str, loaded: LoadedAnnotations) -> str:
    """Without --input: a manifest of the images the annotations name, one per line."""
    paths = _image_paths(loaded.images)
    body = "".join(json.dumps({"path": p}) + "\n" for p in paths)
    path = storage.join(staging, _MANIFEST)
    storage.write_bytes_atomic(path, body.encode("utf-8"))
    return path


def _image_paths(images: list[AnnotatedImage]) -> list[str]:
    """Each image's path: for a COCO or VOC file, the candidate place where its first image is
    (the same for all its images); for YOLO labels, the file of that stem in the images folder."""
    chosen: dict[str, int] = {}  # annotation file -> index of its candidates that exists
    folders: dict[str, dict[str, str]] = {}  # images folder -> {stem: path}
    paths = []
    for image in images:
        if image.any_extension:
            paths += _yolo_image(image, folders)
            continue
        source = image.source
        if source not in chosen:
            found = [i for i, c in enumerate(image.candidates) if storage.exists(c)]
            chosen[source] = found[0] if found else 0
        paths.append(image.candidates[min(chosen[source], len(image.candidates) - 1)])
    return _existing(sorted(dict.fromkeys(paths)))


def _existing(paths: list[str]) -> list[str]:
    """The paths that exist, one listing per folder: an image the annotations name but nobody
    put there stays out of the manifest, so the job reports its annotation as unmatched."""
    by_folder: dict[str, list[str]] = {}
    for path in paths:
        by_folder.setdefault(posixpath.dirname(path), []).append(path)
    found = []
    for folder, wanted in by_folder.items():
        present = (
            {m.path for m in storage.match_under(folder, "*")}
            if storage.is_folder(folder)
            else set()
        )
        found += [p for p in wanted if p in present]
    return found


def _yolo_image(image: AnnotatedImage, folders: dict[str, dict[str, str]]) -> list[str]:
    for candidate in image.candidates:
        folder = posixpath.dirname(candidate)
        if folder not in folders:
            listed = storage.match_under(folder, "*") if storage.is_folder(folder) else []
            stems: dict[str, str] = {}
            for m in sorted(listed, key=lambda m: m.path):
                stems.setdefault(posixpath.basename(m.path).rsplit(".", 1)[0], m.path)
            folders[folder] = stems
        if image.stem in folders[folder]:
            return [folders[folder][image.stem]]
    return []
