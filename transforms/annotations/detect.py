"""Finding an annotation file's format from its content, never its name."""

from __future__ import annotations

import json
from typing import Literal

import yaml

from transforms.annotations.objects import AnnotationError
from transforms.annotations.voc import parse_xml

__all__ = ["AnnotationFormat", "annotation_format"]

AnnotationFormat = Literal["coco", "voc", "yolo_labels", "yolo_yaml"]

_FIX = "fix: pass a COCO instances JSON, a Pascal VOC XML, a YOLO data.yaml or YOLO label file"


def annotation_format(data: bytes, name: str) -> AnnotationFormat:
    """Says which annotation format a file holds, from its bytes.

    Args:
        data: the file's bytes.
        name: the file's path, for messages only.

    Returns:
        "coco" (a JSON object with "images" or "annotations"), "voc" (XML whose root is
        <annotation>), "yolo_labels" (lines of numbers, or no lines), "yolo_yaml" (YAML with
        "names").

    Raises:
        AnnotationError: naming what the file holds instead.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise AnnotationError(name, "", f"binary data, not text ({error.reason})", _FIX) from None
    head = text.lstrip()
    if head.startswith("{"):
        return _json_format(text, name)
    if head.startswith("<"):
        return _xml_format(data, name)
    if _numbers_only(text):
        return "yolo_labels"
    return _yaml_format(text, name)


def _json_format(text: str, name: str) -> AnnotationFormat:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise AnnotationError(name, where, f"malformed JSON ({error.msg})", _FIX) from None
    if "images" in document or "annotations" in document:
        return "coco"
    keys = ", ".join(sorted(document)[:8]) or "none"
    raise AnnotationError(
        name, "", f"a JSON object without 'images' or 'annotations' (keys: {keys})", _FIX
    )


def _xml_format(data: bytes, name: str) -> AnnotationFormat:
    root = parse_xml(data, name, _FIX)
    if root.tag == "annotation":
        return "voc"
    raise AnnotationError(name, "", f"XML whose root is <{root.tag}>, not <annotation>", _FIX)


def _numbers_only(text: str) -> bool:
    for line in text.splitlines():
        for token in line.split():
            try:
                float(token)
            except ValueError:
                return False
    return True


def _yaml_format(text: str, name: str) -> AnnotationFormat:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        document = None
    if isinstance(document, dict) and "names" in document:
        return "yolo_yaml"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    raise AnnotationError(
        name, "", f"text that is no annotation format (starts {first[:60]!r})", _FIX
    )
