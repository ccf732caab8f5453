"""Reading a COCO instances JSON into ImageAnnotations per image, with its categories.

COCO's bbox is [x, y, width, height] in continuous pixel coordinates (0 is the image's left
edge), so the corners are (x, y, x + width, y + height). Segmentations (polygons or RLE, compressed
or not) are kept exactly as given; boxes are not clipped here (clip_box does that against the
image's real size). Every image is returned, those without annotations with no objects.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from transforms.annotations.objects import (
    AnnotationError,
    Box,
    Category,
    ImageAnnotations,
    ImageObject,
    Segmentation,
)

__all__ = ["CocoAnnotations", "read_coco"]

_FIX_FORMAT = "fix: write the file as COCO instances JSON (images, annotations, categories)"


@dataclasses.dataclass(frozen=True, slots=True)
class CocoAnnotations:
    """One COCO file's categories (in file order) and its images' objects (in file order)."""

    categories: tuple[Category, ...]
    images: tuple[ImageAnnotations, ...]


def read_coco(data: bytes, path: str) -> CocoAnnotations:
    """Reads a COCO instances JSON.

    Args:
        data: the file's bytes.
        path: the file's path, for messages.

    Returns:
        The categories and, per image, its objects.

    Raises:
        AnnotationError: malformed JSON (naming its line), a missing or mistyped field, or an
            annotation whose category_id or image_id the file does not define (naming its id).
    """
    document = _load_json(data, path)
    categories = _read_categories(document, path)
    by_category = {category.id: category for category in categories}
    images = _list(document, "images", path)
    objects: dict[Any, list[ImageObject]] = {}
    for position, image in enumerate(images):
        image_id = _field(image, "id", path, f"image #{position + 1}")
        if image_id in objects:
            raise AnnotationError(
                path,
                f"image id {image_id}",
                "the id appears twice",
                "fix: give each image its own id",
            )
        objects[image_id] = []
    for position, annotation in enumerate(_list(document, "annotations", path)):
        where = f"annotation #{position + 1}"
        annotation_id = _field(annotation, "id", path, where)
        image_object, image_id = _read_annotation(annotation, annotation_id, by_category, path)
        if not _key(image_id) or image_id not in objects:
            raise AnnotationError(
                path,
                f"annotation id {annotation_id}",
                f"image_id {image_id!r} is not one of the file's images",
                "fix: add the image to 'images' or correct the annotation's image_id",
            )
        objects[image_id].append(image_object)
    return CocoAnnotations(
        categories=categories,
        images=tuple(_read_image(image, objects, path) for image in images),
    )


def _load_json(data: bytes, path: str) -> dict[str, Any]:
    try:
        document = json.loads(data)
    except json.JSONDecodeError as error:
        raise AnnotationError(
            path,
            f"line {error.lineno} column {error.colno}",
            f"malformed JSON: {error.msg}",
            _FIX_FORMAT,
        ) from error
    except UnicodeDecodeError as error:
        raise AnnotationError(path, "", f"not UTF-8 text ({error.reason})", _FIX_FORMAT) from error
    if not isinstance(document, dict):
        raise AnnotationError(
            path, "", f"a JSON {type(document).__name__}, not an object", _FIX_FORMAT
        )
    return document


def _list(document: dict[str, Any], key: str, path: str) -> list[Any]:
    value = document.get(key)
    if not isinstance(value, list):
        raise AnnotationError(path, "", f"'{key}' is missing or not a list", _FIX_FORMAT)
    if not all(isinstance(item, dict) for item in value):
        raise AnnotationError(path, "", f"'{key}' holds a non-object entry", _FIX_FORMAT)
    return value


def _field(item: dict[str, Any], key: str, path: str, where: str) -> Any:
    if key not in item:
        raise AnnotationError(path, where, f"no '{key}'", f"fix: give the entry its '{key}'")
    return item[key]


def _read_categories(document: dict[str, Any], path: str) -> tuple[Category, ...]:
    categories = []
    seen: set[int] = set()
    for position, item in enumerate(_list(document, "categories", path)):
        where = f"category #{position + 1}"
        category_id = _field(item, "id", path, where)
        name = _field(item, "name", path, where)
        if not isinstance(category_id, int) or isinstance(category_id, bool) or category_id in seen:
            raise AnnotationError(
                path,
                where,
                f"id {category_id!r} is not a unique integer",
                "fix: number it uniquely",
            )
        seen.add(category_id)
        categories.append(Category(category_id, str(name), str(item.get("supercategory", ""))))
    return tuple(categories)


def _read_annotation(
    annotation: dict[str, Any], annotation_id: Any, by_category: dict[int, Category], path: str
) -> tuple[ImageObject, Any]:
    where = f"annotation id {annotation_id}"
    image_id = _field(annotation, "image_id", path, where)
    category_id = _field(annotation, "category_id", path, where)
    category = by_category.get(category_id) if _key(category_id) else None
    if category is None:
        known = ", ".join(str(key) for key in by_category)
        raise AnnotationError(
            path,
            where,
            f"category_id {category_id!r} is not in the file's categories ({known})",
            "fix: add the category to 'categories' or correct the annotation's category_id",
        )
    x, y, w, h = _bbox(annotation, path, where)
    area = annotation.get("area")
    if area is not None and not _number(area):
        raise AnnotationError(path, where, f"area {area!r} is not a number", "fix: write a number")
    image_object = ImageObject(
        class_id=category.id,
        class_text=category.name,
        box=Box(xmin=x, ymin=y, xmax=x + w, ymax=y + h),
        is_crowd=bool(annotation.get("iscrowd", 0)),
        area=None if area is None else float(area),
        segmentation=_segmentation(annotation.get("segmentation"), path, where),
        annotation_id=annotation_id,
    )
    return image_object, image_id


def _key(value: Any) -> bool:
    # A list or an object as an id would fail a dict lookup with a TypeError naming nothing.
    return isinstance(value, int | str) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bbox(annotation: dict[str, Any], path: str, where: str) -> tuple[float, ...]:
    bbox = _field(annotation, "bbox", path, where)
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(_number(v) for v in bbox):
        raise AnnotationError(
            path, where, f"bbox {bbox!r} is not [x, y, width, height]", "fix: write four numbers"
        )
    # NaN and inf pass through: clip_box drops them with their reason, the job goes on.
    return tuple(float(v) for v in bbox)


def _segmentation(value: Any, path: str, where: str) -> Segmentation | None:
    if value is None or value == []:
        return None
    if isinstance(value, list):
        for part in value:
            if not isinstance(part, list) or len(part) % 2 or not all(_number(v) for v in part):
                raise AnnotationError(
                    path,
                    where,
                    "a segmentation polygon is not a list of x, y pairs",
                    "fix: write each part as [x1, y1, x2, y2, ...]",
                )
        return value
    if isinstance(value, dict) and _rle_ok(value):
        return value
    raise AnnotationError(
        path,
        where,
        f"segmentation {str(value)[:80]} is neither polygons nor RLE",
        "fix: write polygons or {'size': [height, width], 'counts': ...}",
    )


def _rle_ok(rle: dict[str, Any]) -> bool:
    size, counts = rle.get("size"), rle.get("counts")
    size_ok = isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size)
    # Compressed RLE is a string (pycocotools' LEB128-like text); uncompressed is a list of runs.
    counts_ok = isinstance(counts, str) or (
        isinstance(counts, list) and all(isinstance(v, int) for v in counts)
    )
    return size_ok and counts_ok


def _read_image(
    image: dict[str, Any], objects: dict[Any, list[ImageObject]], path: str
) -> ImageAnnotations:
    image_id = image["id"]
    where = f"image id {image_id}"
    file_name = _field(image, "file_name", path, where)
    width, height = image.get("width"), image.get("height")
    for value in (width, height):
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise AnnotationError(
                path,
                where,
                f"size {width!r} x {height!r} is not positive integers",
                "fix: correct it",
            )
    return ImageAnnotations(
        image=str(file_name),
        width=width,
        height=height,
        objects=tuple(objects[image_id]),
        source=path,
        image_id=image_id,
    )
