"""Reading YOLO annotations: class names (data.yaml, obj.names, classes.txt), data.yaml's folders,
and one image's label file.

A label file has one object per line, normalised to the image's size: `class cx cy w h` for a
box, `class x1 y1 x2 y2 ...` (three points or more) for a segment, as Ultralytics writes them.
Boxes come out in source pixels; a segment becomes its polygon in pixels and its bounding box.
Values outside [0, 1] are kept: clip_box clips or drops them against the image and says why.

Class names come from Ultralytics' data.yaml ('names'), or from a names file, one name a line, the
line's 0-based index its id: Darknet's and CVAT's obj.names, Label Studio's classes.txt.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any

import yaml

from transforms.annotations.objects import (
    AnnotationError,
    Box,
    Category,
    ImageAnnotations,
    ImageObject,
)

__all__ = ["YoloData", "read_class_names", "read_yolo_labels", "read_yolo_yaml"]

_FIX_YAML = "fix: give data.yaml 'names' as a list or an {id: name} mapping"
_FIX_LINE = "fix: write 'class cx cy w h' or 'class x1 y1 x2 y2 x3 y3 ...', normalised to [0, 1]"
_FIX_NAMES = "fix: write one class name a line, class 0 on the first (obj.names, classes.txt)"
_SPLITS = ("train", "val", "test")


@dataclasses.dataclass(frozen=True, slots=True)
class YoloData:
    """What a data.yaml says: the classes, the dataset root, and each split's image folders."""

    categories: tuple[Category, ...]
    root: str  # 'path' as written ("" when absent)
    splits: dict[str, tuple[str, ...]]  # 'train' / 'val' / 'test' as written, each as a tuple


def read_yolo_yaml(data: bytes, path: str) -> YoloData:
    """Reads an Ultralytics data.yaml.

    Args:
        data: the file's bytes.
        path: the file's path, for messages.

    Returns:
        Its classes (ids as the file numbers them), root and splits.

    Raises:
        AnnotationError: malformed YAML (naming its line), or 'names' missing or malformed.
    """
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise AnnotationError(path, where, f"malformed YAML ({problem})", _FIX_YAML) from error
    if not isinstance(document, dict) or "names" not in document:
        raise AnnotationError(path, "", "no 'names' key", _FIX_YAML)
    splits = {}
    for split in _SPLITS:
        value = document.get(split)
        if value:
            splits[split] = (
                tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)
            )
    return YoloData(_names(document["names"], path), str(document.get("path") or ""), splits)


def _names(names: Any, path: str) -> tuple[Category, ...]:
    if isinstance(names, list):
        pairs = list(enumerate(names))
    elif isinstance(names, dict):
        pairs = list(names.items())
    else:
        raise AnnotationError(path, "'names'", f"a {type(names).__name__}", _FIX_YAML)
    categories = []
    for key, name in pairs:
        if not isinstance(key, int) or isinstance(key, bool) or key < 0 or name is None:
            raise AnnotationError(path, f"'names' entry {key!r}", "not an id and a name", _FIX_YAML)
        categories.append(Category(key, str(name)))
    return tuple(sorted(categories, key=lambda category: category.id))


def read_class_names(data: bytes, path: str) -> tuple[Category, ...]:
    """Reads a names file: Darknet's and CVAT's obj.names, Label Studio's classes.txt.

    Args:
        data: the file's bytes: one class name a line (spaces inside a name are kept).
        path: the file's path, for messages.

    Returns:
        One category a line, its id the line's 0-based index. Blank lines at the end are not
        classes (every tool ends the file with a newline, some with more).

    Raises:
        AnnotationError: not UTF-8, no names, a blank line before a name (every id after it would
            be off by one, depending on the reader), or a name given twice, naming the line.
    """
    text = _text(data, path, _FIX_NAMES)
    names = [line.strip() for line in text.splitlines()]
    while names and not names[-1]:
        names.pop()
    if not names:
        raise AnnotationError(path, "", "no class names", _FIX_NAMES)
    first_line: dict[str, int] = {}
    for number, name in enumerate(names, start=1):
        where = f"line {number}"
        if not name:
            problem = "a blank line before the last name shifts every id after it"
            raise AnnotationError(path, where, problem, "fix: remove it or name its class")
        if name in first_line:
            problem = f"{name!r} names line {first_line[name]}'s class too"
            raise AnnotationError(path, where, problem, "fix: name each class once")
        first_line[name] = number
    return tuple(Category(index, name) for index, name in enumerate(names))


def read_yolo_labels(
    data: bytes,
    path: str,
    *,
    width: int,
    height: int,
    names: tuple[Category, ...],
    image: str = "",
) -> ImageAnnotations:
    """Reads one image's YOLO label file.

    Args:
        data: the file's bytes (empty: an image with no objects).
        path: the file's path, for messages.
        width: the image's width in pixels (the file's values are fractions of it).
        height: the image's height in pixels.
        names: the classes, from read_yolo_yaml or read_class_names.
        image: the image reference; "" gives the label file's stem (labels/a.txt names a.*).

    Returns:
        The image's objects, annotation_id the 1-based line number.

    Raises:
        AnnotationError: a line that is not a box or a polygon, a value that is not a number, or
            a class id not in `names`, each naming the file and line number.
    """
    text = _text(data, path, _FIX_LINE)
    by_id = {category.id: category for category in names}
    objects = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            objects.append(_read_line(line, number, path, width, height, by_id))
    return ImageAnnotations(
        image=image or pathlib.PurePosixPath(path).stem,
        width=width,
        height=height,
        objects=tuple(objects),
        source=path,
    )


def _read_line(
    line: str, number: int, path: str, width: int, height: int, by_id: dict[int, Category]
) -> ImageObject:
    where = f"line {number}"
    tokens = line.split()
    try:
        class_id = int(tokens[0])
        values = [float(token) for token in tokens[1:]]
    except ValueError:
        raise AnnotationError(
            path, where, f"{line.strip()[:80]!r} is not numbers", _FIX_LINE
        ) from None
    # A box has 4 values; a polygon 6 or more (three points), in x, y pairs.
    if len(values) != 4 and (len(values) < 6 or len(values) % 2):
        raise AnnotationError(path, where, f"{len(values)} values after the class", _FIX_LINE)
    category = by_id.get(class_id)
    if category is None:
        known = ", ".join(str(i) for i in by_id)
        raise AnnotationError(
            path,
            where,
            f"class {class_id} is not in the class names (ids {known})",
            "fix: add it to data.yaml's names, obj.names or classes.txt, or correct the line",
        )
    if len(values) == 4:
        cx, cy, w, h = values
        box = Box(
            (cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height
        )
        return ImageObject(category.id, category.name, box, annotation_id=number)
    polygon = [v * (width if i % 2 == 0 else height) for i, v in enumerate(values)]
    xs, ys = polygon[0::2], polygon[1::2]
    # min/max skip a NaN depending on its place; a NaN corner lets clip_box drop the object.
    box = Box(*(_nan_or(f, axis) for f, axis in ((min, xs), (min, ys), (max, xs), (max, ys))))
    return ImageObject(
        category.id, category.name, box, segmentation=[polygon], annotation_id=number
    )


def _nan_or(pick: Any, values: list[float]) -> float:
    return math.nan if any(math.isnan(v) for v in values) else pick(values)


def _text(data: bytes, path: str, fix: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise AnnotationError(path, "", f"not UTF-8 text ({error.reason})", fix) from error
