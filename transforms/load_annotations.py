"""The launcher's one read of --annotations: files found, formats told by content, one label map.

Every annotation file is read once per job, here, before anything is written: a malformed file,
an unknown category or conflicting class names stop the run (exit 2) naming the file and the fix.
What was read goes to the job as `AnnotatedImage` parts in a staging folder, split by image stem,
so that each worker receives only the objects of its own images (transforms/match_annotations.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import posixpath
import zlib
from collections.abc import Iterable
from typing import NamedTuple

from apache_beam.io.filesystems import FileSystems

from core import storage
from transforms.annotations.coco import read_coco
from transforms.annotations.detect import annotation_format
from transforms.annotations.objects import AnnotationError, Category, ImageAnnotations
from transforms.annotations.options import AnnotationOptions
from transforms.annotations.voc import read_voc
from transforms.annotations.yolo import read_class_names, read_yolo_labels, read_yolo_yaml
from transforms.elements import NO_OBJECTS, PackedObjects

__all__ = [
    "AnnotatedImage",
    "LoadedAnnotations",
    "load_annotations",
    "read_part",
    "split_of",
    "stem_of",
]

# Files a folder given to --annotations may hold annotations in; images beside them stay unread.
_ANNOTATION_SUFFIXES = (".json", ".xml", ".yaml", ".yml", ".txt", ".names")
# Files from this size on are streamed where their format allows (COCO: 448 MB for train2017),
# so the launcher never holds a big file's bytes and its objects at once.
_STREAM_BYTES = 8 << 20
_HEAD_BYTES = 64 << 10
# Images per staged part: small enough that a worker holds one part's objects at a time.
_IMAGES_PER_PART = 5_000
# An annotation file's split name -> imgrec's split names (its default ones where they mean it).
_SPLIT_NAMES = {"val": "validation", "valid": "validation", "validation": "validation"}


@dataclasses.dataclass(frozen=True, slots=True)
class AnnotatedImage:
    """One image's objects as an annotation file names the image: the element joined to the
    listed files by stem (transforms/match_annotations.py)."""

    name: str  # the image as the file names it: COCO file_name, VOC filename, YOLO label stem
    stem: str  # the join key: the name's base name without its extension
    candidates: tuple[str, ...]  # full paths it may be (YOLO: without the extension)
    split: str  # its annotation file's split ("" when the file says none)
    source: str  # the annotation file
    num_objects: int
    objects: PackedObjects  # its ImageAnnotations, class ids final
    any_extension: bool = False  # YOLO: a label file names a.txt, the image is a.<any>


class _Found(NamedTuple):
    """An image as one annotation file gives it, before the label map is known."""

    image: ImageAnnotations
    candidates: tuple[str, ...]
    split: str
    any_extension: bool = False


@dataclasses.dataclass(frozen=True)
class LoadedAnnotations:
    """What the launcher read: the options completed, and what the summary and docs name."""

    options: AnnotationOptions
    num_objects: int
    # Every image the files name, without its objects (without --input, the job's manifest).
    images: tuple[AnnotatedImage, ...]


def stem_of(name: str) -> str:
    """The join key of an image or annotation name: its base name without the extension."""
    base = name.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[0] if "." in base[1:] else base


def split_of(source: str, hint: str = "") -> str:
    """The split an annotation file gives its images: a YOLO split key (`hint`), else the COCO
    file's name (instances_train2017.json -> train); val -> validation."""
    name = hint or stem_of(source)
    for prefix in ("instances_", "person_keypoints_", "panoptic_", "captions_"):
        name = name.removeprefix(prefix)
    name = name.rstrip("0123456789").rstrip("_-") or name
    return _SPLIT_NAMES.get(name, name)


def load_annotations(options: AnnotationOptions, staging: str) -> LoadedAnnotations:
    """Reads every --annotations file once, stages the objects by stem in `staging`.

    Raises:
        AnnotationError: a file that cannot be read as annotations, naming it and the fix.
    """
    files = _expand(options.paths)
    reader = _Reader()
    small = [path for path, size in files if size < _STREAM_BYTES]
    for path, data in _read_all(small):
        reader.add(path, data)
    for path, size in files:
        if size >= _STREAM_BYTES:
            reader.add_large(path)
    found = reader.take_images()
    label_map = _label_map(reader, found, options.relabel)
    parts, images = _stage(found, label_map, staging)
    digest = hashlib.sha256(repr(sorted(reader.digests.items())).encode()).hexdigest()
    completed = dataclasses.replace(
        options,
        staged=staging,
        num_parts=parts,
        label_map=_written_map(label_map),
        split_names=tuple(sorted({image.split for image in images if image.split})),
        digest=digest,
        formats=tuple(sorted(reader.formats)),
        sources=tuple(_absolute(spec) for spec in options.paths),
        num_images=len(images),
    )
    return LoadedAnnotations(
        options=completed,
        num_objects=sum(image.num_objects for image in images),
        images=tuple(images),
    )


def read_part(path: str) -> list[AnnotatedImage]:
    """One staged part's images (the job's read)."""
    return pickle.loads(zlib.decompress(storage.read_bytes(path)))


def _expand(paths: Iterable[str]) -> list[tuple[str, int]]:
    """--annotations values -> the files they name with their sizes, in order, each once.

    Raises:
        AnnotationError: a value that matches nothing.
    """
    files: dict[str, int] = {}
    for spec in paths:
        spec = _absolute(spec)
        found = _matches(spec)
        if not found:
            raise AnnotationError(
                spec,
                "",
                "no such file, folder or match",
                "fix: check the --annotations path (a file, a glob or a folder)",
            )
        for path, size in found:
            files.setdefault(path, size)
    return list(files.items())


def _absolute(spec: str) -> str:
    return spec if "://" in spec else os.path.abspath(os.path.expanduser(spec))


def _matches(spec: str) -> list[tuple[str, int]]:
    if any(c in spec for c in "*?["):
        found = storage.match_pattern(spec)
    elif storage.is_folder(spec):
        found = storage.match_under(spec.rstrip("/"), "**")
        found = [m for m in found if m.path.lower().endswith(_ANNOTATION_SUFFIXES)]
    else:
        found = storage.match_pattern(storage.glob_escape(spec)) if storage.exists(spec) else []
    return sorted((m.path, m.size_in_bytes) for m in found)


def _read_all(files: list[str]):
    for path, result in storage.read_many(files):
        if isinstance(result, storage.ReadError):
            raise AnnotationError(path, "", f"unreadable ({result.detail})", "fix: check access")
        yield path, result


class _HashingReader:
    """A binary stream's read(), hashing what passes (a streamed file's digest in one pass)."""

    def __init__(self, stream):
        self._stream = stream
        self._sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._sha256.update(data)
        return data

    def hexdigest(self) -> str:
        while self.read(1 << 20):  # what the parser left unread (trailing spaces) counts too
            pass
        return self._sha256.hexdigest()


class _Reader:
    """The files read so far, by format; YOLO label files wait for their class names."""

    def __init__(self):
        self.digests: dict[str, str] = {}
        self.formats: set[str] = set()
        self.coco_categories: dict[int, tuple[str, str]] = {}  # id -> (name, source)
        self.yolo_names: dict[str, tuple[Category, ...]] = {}  # folder -> names
        self.yolo_labels: list[tuple[str, bytes, str]] = []  # (path, data, split)
        self.listed_labels: set[str] = set()
        # The names files label files were read with: only their classes enter the label map
        # (a names-like list elsewhere, e.g. VOC's ImageSets/Main/*.txt, names no class).
        self.used_names: dict[str, tuple[Category, ...]] = {}
        self._images: list[_Found] = []

    def add(self, path: str, data: bytes) -> None:
        self.digests[path] = hashlib.sha256(data).hexdigest()
        kind = annotation_format(data, path)
        if kind != "companion":
            self.formats.add("yolo" if kind.startswith("yolo") else kind)
        if kind == "coco":
            self._add_coco(path, data)
        elif kind == "voc":
            self._add_voc(path, data)
        elif kind == "yolo_yaml":
            self._add_yolo_yaml(path, data)
        elif kind == "yolo_names":
            self.yolo_names[posixpath.dirname(path)] = read_class_names(data, path)
        elif kind == "companion":  # notes.json, obj.data, train.txt: nothing to read
            pass
        elif path not in self.listed_labels:
            self.yolo_labels.append((path, data, ""))
            self.listed_labels.add(path)

    def add_large(self, path: str) -> None:
        """A file too big to hold twice: a COCO file is streamed (its objects held compactly),
        anything else read whole."""
        with FileSystems.open(path, compression_type="uncompressed") as f:
            head = f.read(_HEAD_BYTES)
        if head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] != b"{":
            self.add(path, storage.read_bytes(path))
            return
        self.formats.add("coco")
        with FileSystems.open(path, compression_type="uncompressed") as f:
            stream = _HashingReader(f)
            self._add_coco(path, stream)
            self.digests[path] = stream.hexdigest()

    def _add_coco(self, path: str, data) -> None:
        coco = read_coco(data, path)
        for category in coco.categories:
            known = self.coco_categories.get(category.id)
            if known and known[0] != category.name:
                raise AnnotationError(
                    path,
                    f"category {category.id}",
                    f"named {category.name!r} here and {known[0]!r} in {known[1]}",
                    "fix: give each category id one name in every file",
                )
            self.coco_categories[category.id] = (category.name, path)
        folder = posixpath.dirname(path)
        split = split_of(path)
        for image in coco.images:
            self._images.append(_Found(image, _coco_candidates(folder, image.image), split))

    def _add_voc(self, path: str, data: bytes) -> None:
        image = read_voc(data, path)
        folder = posixpath.dirname(path)
        candidates = (
            posixpath.join(posixpath.dirname(folder), "JPEGImages", image.image),
            posixpath.join(folder, image.image),
        )
        self._images.append(_Found(image, candidates, ""))

    def _add_yolo_yaml(self, path: str, data: bytes) -> None:
        yolo = read_yolo_yaml(data, path)
        folder = posixpath.dirname(path)
        root = posixpath.normpath(posixpath.join(folder, yolo.root)) if yolo.root else folder
        self.used_names[path] = yolo.categories
        for split, image_dirs in yolo.splits.items():
            for image_dir in image_dirs:
                labels = _labels_folder(posixpath.join(root, image_dir))
                self.yolo_names[labels] = yolo.categories
                for label_path in _label_files(labels):
                    if label_path not in self.listed_labels:
                        data = storage.read_bytes(label_path)
                        self.digests[label_path] = hashlib.sha256(data).hexdigest()
                        self.yolo_labels.append((label_path, data, split_of("", split)))
                        self.listed_labels.add(label_path)
        self.yolo_names.setdefault(folder, yolo.categories)

    def take_images(self) -> list[_Found]:
        """Every image read, YOLO label files read with their class names now."""
        for path, data, split in self.yolo_labels:
            names = self._yolo_names_for(path)
            image = read_yolo_labels(data, path, width=1, height=1, names=names)
            folder = posixpath.dirname(path)
            images_folder = _images_folder(folder)
            candidates = tuple(
                posixpath.join(f, image.image) for f in dict.fromkeys((images_folder, folder))
            )
            self._images.append(_Found(image, candidates, split, any_extension=True))
        images, self._images = self._images, []
        return images

    def _yolo_names_for(self, label_path: str) -> tuple[Category, ...]:
        folder = posixpath.dirname(label_path)
        while True:
            for known, names in self.yolo_names.items():
                if folder == known or _images_folder(folder) == known:
                    self.used_names[known] = names
                    return names
            parent = posixpath.dirname(folder)
            if parent == folder or "://" in folder and parent.endswith(":/"):
                break
            folder = parent
        raise AnnotationError(
            label_path,
            "",
            "YOLO labels without class names",
            "fix: give the data.yaml (or classes.txt / obj.names) too, e.g. --annotations DIR",
        )


def _annotated(found: _Found, label_map: dict) -> AnnotatedImage:
    """The staged form of one image: its objects with their final class ids, packed."""
    candidates = found.candidates
    if not any("://" in c for c in candidates):  # normpath would fold gs:// into gs:/
        candidates = tuple(posixpath.normpath(c) for c in candidates)
    annotations = _resolved(found, label_map)
    return AnnotatedImage(
        name=found.image.image,
        stem=stem_of(found.image.image),
        candidates=tuple(dict.fromkeys(candidates)),
        split=found.split,
        source=found.image.source,
        num_objects=len(annotations.objects),
        objects=PackedObjects.pack(annotations),
        any_extension=found.any_extension,
    )


def _coco_candidates(folder: str, file_name: str) -> tuple[str, ...]:
    """Where a COCO file_name may be: beside the JSON, or in the layouts COCO and its exporters
    use (annotations/ beside images/ or the split's folder)."""
    parent = posixpath.dirname(folder)
    return (
        posixpath.join(folder, file_name),
        posixpath.join(parent, file_name),
        posixpath.join(parent, "images", file_name),
    )


def _labels_folder(images_folder: str) -> str:
    """Ultralytics' rule: the labels of .../images/x are in .../labels/x."""
    head, sep, tail = images_folder.rpartition("/images")
    return f"{head}/labels{tail}" if sep else images_folder


def _images_folder(labels_folder: str) -> str:
    head, sep, tail = labels_folder.rpartition("/labels")
    return f"{head}/images{tail}" if sep else labels_folder


def _label_files(folder: str) -> list[str]:
    if not storage.is_folder(folder):
        return []
    return sorted(m.path for m in storage.match_under(folder, "**") if m.path.endswith(".txt"))


def _label_map(
    reader: _Reader, images: list[_Found], relabel: str
) -> dict[object, tuple[int, str]]:
    """(format's class key) -> (id written, name): COCO ids as they are, YOLO's k as k + 1 (the
    Object Detection API keeps 0 for the background), VOC's names after them in name order."""
    by_key: dict[object, tuple[int, str]] = {
        ("coco", cid): (cid, name) for cid, (name, _) in reader.coco_categories.items()
    }
    for path, names in reader.used_names.items():
        for category in names:
            known = by_key.setdefault(("yolo", category.id), (category.id + 1, category.name))
            if known[1] != category.name:
                raise AnnotationError(
                    path,
                    f"class {category.id}",
                    f"named {category.name!r} here and {known[1]!r} in another names file",
                    "fix: give every YOLO folder the same class names",
                )
    by_name = {name: cid for cid, name in by_key.values()}
    voc_names = sorted(
        {o.class_text for i in images for o in i.image.objects if o.class_id is None}
    )
    next_id = max(by_name.values(), default=0) + 1
    for name in voc_names:
        if name not in by_name:
            by_name[name] = next_id
            next_id += 1
        by_key[("voc", name)] = (by_name[name], name)
    if relabel == "contiguous":
        order = {cid: n for n, cid in enumerate(sorted({c for c, _ in by_key.values()}), 1)}
        by_key = {key: (order[cid], name) for key, (cid, name) in by_key.items()}
    return by_key


def _written_map(label_map: dict) -> tuple[tuple[int, str], ...]:
    """The (id, name) pairs written; one id naming two classes across formats is an error."""
    pairs = sorted(set(label_map.values()))
    for (cid, name), (next_id, next_name) in zip(pairs, pairs[1:], strict=False):
        if cid == next_id:
            raise AnnotationError(
                "--annotations",
                f"class id {cid}",
                f"names both {name!r} and {next_name!r} (a COCO category and a YOLO class k "
                "written as k + 1)",
                "fix: give the files one numbering, or convert them in separate runs",
            )
    return tuple(pairs)


def _resolved(found: _Found, label_map: dict) -> ImageAnnotations:
    """The image's objects with their final class ids and names."""
    objects = []
    for obj in found.image.objects:
        if obj.class_id is None:
            key = ("voc", obj.class_text)
        elif found.any_extension:
            key = ("yolo", obj.class_id)
        else:
            key = ("coco", obj.class_id)
        cid, name = label_map[key]
        objects.append(dataclasses.replace(obj, class_id=cid, class_text=name))
    return dataclasses.replace(found.image, objects=tuple(objects))


def _stage(found: list[_Found], label_map: dict, staging: str) -> tuple[int, list[AnnotatedImage]]:
    """Writes the images as parts by stem hash, packed one part at a time, each part's unpacked
    objects let go as it is written: the launcher never holds both forms of them all
    (bench/coco_memory.py). Returns (the number of parts, every image without its objects)."""
    num_parts = max(1, -(-len(found) // _IMAGES_PER_PART))
    parts: list[list[_Found] | None] = [[] for _ in range(num_parts)]
    for one in found:
        parts[zlib.crc32(stem_of(one.image.image).encode()) % num_parts].append(one)
    found.clear()
    images = []
    for index in range(num_parts):
        packed = [_annotated(one, label_map) for one in parts[index]]
        parts[index] = None
        body = zlib.compress(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL), 1)
        storage.write_bytes_atomic(part_path(staging, index), body)
        images += [dataclasses.replace(image, objects=NO_OBJECTS) for image in packed]
    return num_parts, images


def part_path(staging: str, index: int) -> str:
    """The staged part `index` of `staging`."""
    return storage.join(staging, f"part-{index:05d}.pickle.z")
