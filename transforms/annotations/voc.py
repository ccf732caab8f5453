"""Reading one Pascal VOC XML (filename, size, objects) into ImageAnnotations.

Pixel convention: VOC's bndbox corners are 1-based pixel indices, both inclusive (the devkit's
own meaning: xmin=1, xmax=width covers the whole row). They become continuous source-pixel
coordinates as (xmin - 1, ymin - 1, xmax, ymax): a pixel at 1-based index i spans [i - 1, i].
That is COCO's coordinate system, so a box gives the same pixels from either file, and it is
Detectron2's reading (it subtracts 1 from xmin and ymin only). LabelImg writes a box drawn from
the image's left edge as xmin=1, which this reads back as 0. The TF Object Detection API's
create_pascal_tf_record.py divides xmin by the width without the shift, one pixel to the right
of this. A file whose corners are 0 (0-based tools) reads as -1; clip_box clips it and says so.
CVAT (Datumaro's converter: x, y, x + w, y + h as floats) and Label Studio (the same, int()-cut)
write continuous 0-based corners: their boxes read 1 pixel left of and above where they were
drawn (tests/unit/test_annotation_exports.py). Corners may be fractional ("300.5"); a size of 0
or none means the file did not know it; a missing <difficult> or <truncated> is 0.
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
        box=Box(xmin=xmin - 1.0, ymin=ymin - 1.0, xmax=xmax, ymax=ymax),
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
