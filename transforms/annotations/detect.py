"""Finding an annotation file's format from its content, never its name.

The rules, in order: a JSON object is COCO (or, with only 'categories' and 'info', Label Studio's
notes.json); XML rooted at <annotation> is Pascal VOC; lines `class v v v v ...` are YOLO labels;
a YAML mapping with 'names' is Ultralytics' data.yaml. Plain text of one name a line is a names
file (obj.names, classes.txt), unless its lines are Darknet's `key = value` (obj.data), image paths
(Darknet's train.txt) or CVAT's `name:color:parts:actions` (VOC labelmap.txt): those are companions
of an export, holding nothing to read. Content cannot tell a names file from another list of words
(VOC's ImageSets/Main/*.txt lists image ids): such a list reads as names, so pass names files by
name where an export has such lists.
"""

from __future__ import annotations

import io
import json
import re
from typing import Literal

import ijson
import yaml

from transforms.annotations.objects import AnnotationError
from transforms.annotations.voc import parse_xml

__all__ = ["AnnotationFormat", "annotation_format"]

AnnotationFormat = Literal["coco", "voc", "yolo_labels", "yolo_yaml", "yolo_names", "companion"]

_FIX = (
    "fix: pass a COCO instances JSON, a Pascal VOC XML, a YOLO data.yaml, names file "
    "(obj.names, classes.txt) or label file"
)
# Label Studio's notes.json: its YOLO export's categories again, beside classes.txt.
_NOTES_KEYS = {"categories", "info"}
# Darknet's obj.data: `classes = 3`, `names = data/obj.names`, ...
_DARKNET_DATA = re.compile(r"[\w.-]+\s*=.*")
# CVAT's (Datumaro's) VOC labelmap.txt: `# label:color_rgb:parts:actions`, then `car:250,50,83::`.
_VOC_LABELMAP = re.compile(r"[^:]*:[\d,]*:[^:]*:[^:]*")
# What Darknet's train.txt lists; a class is never named like a picture file.
_IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def annotation_format(data: bytes, name: str) -> AnnotationFormat:
    """Says which annotation format a file holds, from its bytes (the module docstring's rules).

    Args:
        data: the file's bytes.
        name: the file's path, for messages only.

    Returns:
        "coco" (a JSON object with "images" or "annotations"), "voc" (XML whose root is
        <annotation>), "yolo_labels" (lines `class v v v v ...`, or no lines), "yolo_yaml" (YAML
        with "names"), "yolo_names" (one class name a line: obj.names, classes.txt), or
        "companion" (a file of an export with nothing to read: Label Studio's notes.json,
        Darknet's obj.data and train.txt, CVAT's VOC labelmap.txt).

    Raises:
        AnnotationError: naming what the file holds instead.
    """
    if data.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] == b"{":
        return _json_format(data, name)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise AnnotationError(name, "", f"binary data, not text ({error.reason})", _FIX) from None
    head = text.lstrip()
    if head.startswith("["):
        _refuse_json_list(text, name)
    if head.startswith("<"):
        return _xml_format(data, name)
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if _label_lines(lines):
        return "yolo_labels"
    return _text_format(text, lines, name)


def _json_format(data: bytes, name: str) -> AnnotationFormat:
    keys = _top_level_keys(data)
    if keys is None:  # malformed: json names the line (the file is refused anyway)
        try:
            keys = list(json.loads(data.decode("utf-8-sig", errors="replace")))
        except json.JSONDecodeError as error:
            where = f"line {error.lineno} column {error.colno}"
            raise AnnotationError(name, where, f"malformed JSON ({error.msg})", _FIX) from None
    if "images" in keys or "annotations" in keys:
        return "coco"
    if "categories" in keys and set(keys) <= _NOTES_KEYS:
        return "companion"
    keys = ", ".join(sorted(keys)[:8]) or "none"
    raise AnnotationError(
        name, "", f"a JSON object without 'images' or 'annotations' (keys: {keys})", _FIX
    )


def _top_level_keys(data: bytes) -> list[str] | None:
    """The JSON object's keys, read by streaming up to "images" or "annotations" (a 448 MB COCO
    file is not loaded to be recognised); None if the JSON is malformed before that."""
    keys = []
    try:
        for prefix, event, value in ijson.parse(io.BytesIO(data)):
            if prefix == "" and event == "map_key":
                keys.append(value)
                if value in ("images", "annotations"):
                    return keys
    except (ijson.JSONError, ijson.IncompleteJSONError, UnicodeDecodeError):
        return None
    return keys


def _refuse_json_list(text: str, name: str) -> None:
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return  # not JSON: a names file may start with '['
    if document and all(isinstance(item, dict) and "image_id" in item for item in document):
        problem = "a JSON list of detections (COCO results, as COCO.loadRes reads them)"
        fix = "fix: pass the dataset's instances JSON, which names the images and categories"
        raise AnnotationError(name, "", problem, fix)
    raise AnnotationError(name, "", "a JSON list, not an object", _FIX)


def _xml_format(data: bytes, name: str) -> AnnotationFormat:
    root = parse_xml(data, name, _FIX)
    if root.tag == "annotation":
        return "voc"
    raise AnnotationError(name, "", f"XML whose root is <{root.tag}>, not <annotation>", _FIX)


def _label_lines(lines: list[list[str]]) -> bool:
    # No lines: an image without objects. One number a line is no label (a label has five or
    # more) but a names file of digits; `car 0.5 0.5 0.1 0.1` is a label naming its class, which
    # the reader then reports with its line.
    if not lines:
        return True
    if all(_numbers(tokens) for tokens in lines) and any(len(t) > 1 for t in lines):
        return True
    return any(len(tokens) >= 5 and _numbers(tokens[1:]) for tokens in lines)


def _numbers(tokens: list[str]) -> bool:
    for token in tokens:
        try:
            float(token)
        except ValueError:
            return False
    return True


def _text_format(text: str, lines: list[list[str]], name: str) -> AnnotationFormat:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        document = None
    if isinstance(document, dict) and "names" in document:
        return "yolo_yaml"
    stripped = [" ".join(tokens) for tokens in lines]
    if _companion_lines(stripped):
        return "companion"
    if not isinstance(document, dict | list):
        return "yolo_names"
    raise AnnotationError(
        name, "", f"text that is no annotation format (starts {stripped[0][:60]!r})", _FIX
    )


def _companion_lines(lines: list[str]) -> bool:
    if all(_DARKNET_DATA.fullmatch(line) for line in lines):
        return True
    if all(line.lower().endswith(_IMAGE_SUFFIXES) for line in lines):
        return True
    entries = [line for line in lines if not line.startswith("#")]
    return bool(entries) and all(_VOC_LABELMAP.fullmatch(line) for line in entries)
