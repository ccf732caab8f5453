"""Reading one Pascal VOC XML (filename, size, objects) into ImageAnnotations.

Pixel convention: bndbox corners are read as written, as continuous source-pixel coordinates
(xmin, ymin, xmax, ymax) with (0, 0) the image's top-left corner: COCO's system. That is how the
TF Object Detection API's create_pascal_tf_record.py reads them (xmin / width, no shift; imgrec
writes the keys that API reads), and what today's exporters mean: CVAT (Datumaro: x, y, x + w,
y + h as floats), Label Studio (the same, int()-cut) and LabelImg (int()-cut, xmin and ymin at
least 1) write 0-based corners, so a tool's COCO and VOC exports of the same objects give the same
boxes (tests/unit/test_annotation_exports.py). The original VOC devkit's own XML holds 1-based
inclusive pixel indices (xmin=1, xmax=width is the whole row): its boxes land with their left and
top edges one pixel inside, width and height one pixel short, as with TensorFlow's converter
(Detectron2 subtracts 1 from xmin and ymin instead). Corners may be fractional ("300.5"); a size
of 0 or none means the file did not know it; a missing <difficult> or <truncated> is 0.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from xml.parsers.expat import ErrorString

from transforms.annotations.objects import AnnotationError, Box, ImageAnnotations, ImageObject

__all__ = ["parse_xml", "read_voc"]

_FIX_FORMAT = "fix: write the file as Pascal VOC XML (<annotation> with <object> entries)"


def parse_xml(data: bytes, path: str, fix: str) -> ET.Element:
    """The root element of an XML file.

    Raises:
        AnnotationError: malformed XML, naming its line and column and `fix`.
    """
    try:
        return ET.fromstring(data)
    except ET.ParseError as error:
        line, column = error.position  # expat counts columns from 0, JSON and YAML from 1
        raise AnnotationError(
            path,
            f"line {line} column {column + 1}",
            f"malformed XML ({ErrorString(error.code)})",
            fix,
        ) from None


def read_voc(data: bytes, path: str) -> ImageAnnotations:
    """Reads one Pascal VOC annotation XML.

    Args:
        data: the file's bytes.
        path: the file's path, for messages.

    Returns:
        The image's objects, class_id None (VOC names classes only), boxes as the module
        docstring says.

    Raises:
        AnnotationError: malformed XML (naming its line), a root other than <annotation>, or a
            missing or non-numeric field (naming the object).
    """
    root = parse_xml(data, path, _FIX_FORMAT)
    if root.tag != "annotation":
        raise AnnotationError(path, "", f"the root element is <{root.tag}>", _FIX_FORMAT)
    filename = (root.findtext("filename") or "").strip()
    if not filename:
        raise AnnotationError(path, "", "no <filename>", "fix: name the image in <filename>")
    width = _size(root, "width", path)
    height = _size(root, "height", path)
    objects = tuple(
        _read_object(element, index, path)
        for index, element in enumerate(root.findall("object"), start=1)
    )
    return ImageAnnotations(filename, width, height, objects, source=path)


def _size(root: ET.Element, key: str, path: str) -> int | None:
    text = (root.findtext(f"size/{key}") or "").strip()
    if not text:
        return None
    try:
        value = int(float(text))
    except (ValueError, OverflowError):
        value = -1
    if value < 0:
        raise AnnotationError(path, f"<size><{key}>", f"{text!r} is not a size", "fix: correct it")
    # Some exporters write 0 for a size they did not know: the image's own size decides then.
    return value or None


def _read_object(element: ET.Element, index: int, path: str) -> ImageObject:
    where = f"object #{index}"
    name = (element.findtext("name") or "").strip()
    if not name:
        raise AnnotationError(path, where, "no <name>", "fix: name the object's class")
    bndbox = element.find("bndbox")
    if bndbox is None:
        raise AnnotationError(path, where, "no <bndbox>", "fix: give the object its <bndbox>")
    xmin, ymin, xmax, ymax = (
        _number(bndbox, key, path, where) for key in ("xmin", "ymin", "xmax", "ymax")
    )
    return ImageObject(
        class_id=None,
        class_text=name,
        box=Box(xmin=xmin, ymin=ymin, xmax=xmax, ymax=ymax),
        difficult=_flag(element, "difficult"),
        truncated=_flag(element, "truncated"),
        annotation_id=index,
    )


def _number(bndbox: ET.Element, key: str, path: str, where: str) -> float:
    text = (bndbox.findtext(key) or "").strip()
    try:
        return float(text)
    except ValueError:
        raise AnnotationError(
            path, where, f"<{key}> {text!r} is not a number", f"fix: write the {key} pixel"
        ) from None


def _flag(element: ET.Element, key: str) -> bool:
    # VOC writes 0/1; some tools write true/false.
    return (element.findtext(key) or "0").strip().lower() in ("1", "true")
