"""Annotation files exactly as real tools export them (test helper): CVAT's COCO 1.0, Pascal VOC 1.1
and YOLO 1.1, Label Studio's COCO, YOLO and Pascal VOC, an Ultralytics YOLO dataset, a COCO dataset
of pycocotools' compressed RLE masks, and the PASCAL VOC devkit's own XML.

Every writer takes a folder and the images to describe, writes the tool's layout into the folder
and returns an `Export`: what to pass to --annotations, every file written, and where the tool
keeps each image (the caller writes image files there when a test needs them):

    images = [("street.jpg", 640, 512, [("car", 300, 100, 420, 180)])]
    export = write_cvat_coco(tmp_path, images)  # tmp_path/annotations/instances_default.json

An image is (name, width, height, objects); an object is (class_name, xmin, ymin, xmax, ymax) in
continuous pixel coordinates, (0, 0) the image's top-left corner (COCO's system), then optionally
its shape: BOX (the default), POLYGON (the diamond through the box's edge midpoints: its bounding
box is the box) or CROWD (a mask filling the box: give it integer corners); then difficult,
truncated, occluded. A writer drops the shapes its tool does not export, as the tool does (each
docstring says which). Sources of each layout: Datumaro's plugins/{coco,voc,yolo}_format/
converter.py (CVAT's exporter), label-studio-converter's converter.py, Ultralytics'
data/converter.py, Detectron2's convert_to_coco_dict (pycocotools users), the VOC2012 devkit files.
"""

from __future__ import annotations

import dataclasses
import io
import json
import posixpath
import xml.dom.minidom
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pycocotools import mask as mask_utils

__all__ = [
    "BOX",
    "CROWD",
    "POLYGON",
    "Export",
    "ExportImage",
    "ExportObject",
    "write_cvat_coco",
    "write_cvat_voc",
    "write_cvat_yolo",
    "write_label_studio_coco",
    "write_label_studio_voc",
    "write_label_studio_yolo",
    "write_pycocotools_dataset",
    "write_ultralytics",
    "write_voc_devkit",
]

BOX = "box"
POLYGON = "polygon"
CROWD = "crowd"

# Label Studio stamps its exports with the time of export; a fixed one keeps the files repeatable.
_EXPORTED_AT = "2026-01-05 10:00:00.000000"
_EXPORTED_YEAR = 2026
# Datumaro rounds every COCO bbox value to 2 decimals (COORDINATE_ROUNDING_DIGITS).
_CVAT_BBOX_DIGITS = 2


class ExportObject(NamedTuple):
    """One object to export, in continuous source pixels."""

    name: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    shape: str = BOX
    difficult: bool = False
    truncated: bool = False
    occluded: bool = False


class ExportImage(NamedTuple):
    """One image to export: its name as the tool records it (may hold folders), size, objects."""

    name: str
    width: int
    height: int
    objects: Sequence[ExportObject] = ()


@dataclasses.dataclass(frozen=True)
class Export:
    """What a writer wrote."""

    annotations: Path  # what a user passes to --annotations: a file or the export's folder
    files: tuple[Path, ...]  # every file written
    image_paths: dict[str, Path]  # image name -> where the tool keeps the image


def write_cvat_coco(folder: Path, images: Iterable, *, labels: Sequence[str] = ()) -> Export:
    """CVAT's "COCO 1.0" export (Datumaro's coco_instances): annotations/instances_default.json.

    Compact JSON with CVAT's empty licenses and info; categories from id 1 with supercategory "";
    image and annotation ids from 1; a box has segmentation [] and attributes {occluded,
    rotation}, a polygon its points, a CROWD mask uncompressed RLE with iscrowd 1. Images go to
    images/.

    Args:
        folder: where the export's files go.
        images: (name, width, height, objects) each, as the module docstring says.
        labels: the task's labels in order (default: the objects' names as they first appear).
    """
    images, names = _prepared(images, labels)
    annotations = []
    for image_id, image in enumerate(images, start=1):
        for obj in image.objects:
            ids = (len(annotations) + 1, image_id, names.index(obj.name) + 1)
            annotations.append(_cvat_coco_annotation(obj, image, *ids))
    document = {
        "licenses": [{"name": "", "id": 0, "url": ""}],
        "info": dict.fromkeys(("contributor", "date_created", "description", "url"), "")
        | {"version": "", "year": ""},
        "categories": [
            {"id": i, "name": name, "supercategory": ""} for i, name in enumerate(names, 1)
        ],
        "images": [_cvat_coco_image(i, image) for i, image in enumerate(images, 1)],
        "annotations": annotations,
    }
    path = _put(folder / "annotations" / "instances_default.json", _compact_json(document))
    return Export(path, (path,), _image_paths(folder / "images", images))


def write_cvat_voc(folder: Path, images: Iterable, *, labels: Sequence[str] = ()) -> Export:
    """CVAT's "Pascal VOC 1.1" export (Datumaro's voc, label_map "source").

    Annotations/<stem>.xml: 2-space indented, no XML declaration, <folder> the name up to its
    first "_" (Datumaro's rule), <size> with an empty <depth>, objects with <pose> (the task's
    labels carry VOC's pose attribute), <truncated>, <occluded>, <difficult>, <bndbox> corners as
    Python floats of CVAT's continuous coordinates (x, y, x + w, y + h: no 1-based shift), and
    <attributes> (rotation). Boxes only: polygons and masks go to CVAT's segmentation PNGs, not
    written here. Also labelmap.txt (background first, VOC's palette), ImageSets/Main/default.txt;
    images go to JPEGImages/.
    """
    images, names = _prepared(images, labels)
    files = []
    for image in images:
        root = _cvat_voc_root(image)
        xml_text = ET.tostring(root, encoding="unicode", short_empty_elements=False) + "\n"
        files.append(_put(folder / "Annotations" / f"{_stem_path(image.name)}.xml", xml_text))
    colors = [f"{name}:{','.join(map(str, _voc_color(i)))}::\n" for i, name in enumerate(names, 1)]
    labelmap = "# label:color_rgb:parts:actions\nbackground:0,0,0::\n" + "".join(colors)
    files.append(_put(folder / "labelmap.txt", labelmap))
    listed = "".join(f"{_stem_path(image.name)}\n" for image in images)
    files.append(_put(folder / "ImageSets" / "Main" / "default.txt", listed))
    return Export(folder / "Annotations", tuple(files), _image_paths(folder / "JPEGImages", images))


def write_cvat_yolo(folder: Path, images: Iterable, *, labels: Sequence[str] = ()) -> Export:
    """CVAT's "YOLO 1.1" export (Datumaro's yolo, Darknet's layout).

    obj.names (one label a line), obj.data (`classes = N`, `train = data/train.txt`, `names =
    data/obj.names`, `backup = backup/`), train.txt (data/obj_train_data/<name> a line),
    obj_train_data/<stem>.txt with `class cx cy w h` at '%.6f' (an empty file for an image
    without boxes). Boxes only: CVAT drops polygons and masks from this format. Images go beside
    their labels in obj_train_data/.
    """
    images, names = _prepared(images, labels)
    files = []
    for image in images:
        lines = [
            f"{names.index(obj.name)} {' '.join(f'{v:.6f}' for v in _yolo_box(obj, image))}\n"
            for obj in image.objects
            if obj.shape == BOX
        ]
        stem = _stem_path(image.name)
        files.append(_put(folder / "obj_train_data" / f"{stem}.txt", "".join(lines)))
    listed = "".join(f"data/obj_train_data/{image.name}\n" for image in images)
    files.append(_put(folder / "train.txt", listed))
    files.append(_put(folder / "obj.names", "".join(f"{name}\n" for name in names)))
    data = f"classes = {len(names)}\ntrain = data/train.txt\nnames = data/obj.names\n"
    files.append(_put(folder / "obj.data", data + "backup = backup/\n"))
    return Export(folder, tuple(files), _image_paths(folder / "obj_train_data", images))


def write_label_studio_coco(
    folder: Path, images: Iterable, *, labels: Sequence[str] = (), file_prefix: str = "images/"
) -> Export:
    """Label Studio's COCO export (label-studio-converter's convert_to_coco): result.json.

    Indented JSON: images, categories (the labelling config's labels, sorted, ids from 0),
    annotations, Label Studio's info. Image and annotation ids start at 0 too. Boxes are Label
    Studio's percentages scaled back (x * width / 100, float noise kept) with segmentation [],
    "ignore": 0, iscrowd 0; polygons carry their points and shoelace area; CROWD is dropped (no
    such region here). file_name is `file_prefix` + the name: "images/" where the export copied
    the image (it does, to images/), an upload path like "../../label-studio/data/upload/1/"
    where it read the image in place.
    """
    images, names = _prepared(images, labels)
    names = sorted(names)
    annotations = []
    for image_id, image in enumerate(images):
        for obj in image.objects:
            if obj.shape != CROWD:
                ids = (len(annotations), image_id, names.index(obj.name))
                annotations.append(_label_studio_coco_annotation(obj, image, *ids))
    document = {
        "images": [
            {"width": im.width, "height": im.height, "id": i, "file_name": file_prefix + im.name}
            for i, im in enumerate(images)
        ],
        "categories": [{"id": i, "name": name} for i, name in enumerate(names)],
        "annotations": annotations,
        "info": {"year": _EXPORTED_YEAR, "version": "1.0", "description": ""}
        | {"contributor": "Label Studio", "url": "", "date_created": _EXPORTED_AT},
    }
    path = _put(folder / "result.json", json.dumps(document, indent=2))
    return Export(path, (path,), _image_paths(folder / "images", images, base_names=True))


def write_label_studio_yolo(
    folder: Path, images: Iterable, *, labels: Sequence[str] = ()
) -> Export:
    """Label Studio's YOLO export (convert_to_yolo).

    classes.txt (the config's labels, sorted, one a line), notes.json (the same as categories
    with ids, and info), labels/<stem>.txt with each value as Python prints it (an empty file for
    an image without objects): `class cx cy w h` for a box, `class x1 y1 ...` for a polygon;
    CROWD is dropped. Images go to images/ under their base names.
    """
    images, names = _prepared(images, labels)
    names = sorted(names)
    files = []
    for image in images:
        lines = [
            " ".join(str(v) for v in _label_studio_yolo_line(obj, image, names.index(obj.name)))
            + "\n"
            for obj in image.objects
            if obj.shape != CROWD
        ]
        stem = posixpath.splitext(posixpath.basename(image.name))[0]
        files.append(_put(folder / "labels" / f"{stem}.txt", "".join(lines)))
    files.append(_put(folder / "classes.txt", "".join(f"{name}\n" for name in names)))
    notes = {
        "categories": [{"id": i, "name": name} for i, name in enumerate(names)],
        "info": {"year": _EXPORTED_YEAR, "version": "1.0", "contributor": "Label Studio"},
    }
    files.append(_put(folder / "notes.json", json.dumps(notes, indent=2)))
    return Export(folder, tuple(files), _image_paths(folder / "images", images, base_names=True))


def write_label_studio_voc(folder: Path, images: Iterable) -> Export:
    """Label Studio's Pascal VOC export (convert_to_voc): Annotations/<stem>.xml.

    minidom's XML with its declaration, one element a line, no indent; <folder>images</folder>,
    Label Studio's <source> and <owner>, <size> with depth 3, objects with pose Unspecified,
    truncated and difficult 0, and <bndbox> corners int()-truncated from Label Studio's
    percentages (0-based, xmax = int(x) + int(w): not the VOC devkit's 1-based pixels; float noise
    can make a corner one pixel lower). Boxes only; an image without boxes gets no file. Images go to
    images/ under their base names.
    """
    images = [_image(image) for image in images]
    files = []
    for image in images:
        boxes = [obj for obj in image.objects if obj.shape == BOX]
        if not boxes:
            continue
        document = _label_studio_voc_document(image, boxes)
        out = io.StringIO()
        document.writexml(out, addindent="", newl="\n", encoding="utf-8")
        stem = posixpath.splitext(posixpath.basename(image.name))[0]
        files.append(_put(folder / "Annotations" / f"{stem}.xml", out.getvalue()))
    return Export(
        folder / "Annotations",
        tuple(files),
        _image_paths(folder / "images", images, base_names=True),
    )


def write_ultralytics(
    folder: Path,
    images: Iterable,
    *,
    val: Iterable = (),
    labels: Sequence[str] = (),
    names_as: str = "dict",
    root: str | None = None,
) -> Export:
    """An Ultralytics YOLO dataset, laid out as its docs and converters do.

    data.yaml: `path` (`root`, default the folder's absolute path), `train: images/train`,
    `val: images/val` (images/train when `val` is empty), an empty `test:`, and names as an
    {id: name} mapping (names_as="dict", Ultralytics' own yamls) or a list after `nc`
    (names_as="list", as Roboflow and YOLOv5 write it). labels/<split>/<stem>.txt at '%g' (six
    significant digits, data/converter.py): a box as `class cx cy w h`, a polygon as a segment
    `class x1 y1 ...`; CROWD is dropped (convert_coco skips iscrowd). Images go to images/<split>/.

    Args:
        folder: the dataset root.
        images: the train split's images.
        val: the val split's images.
        labels: the class names in id order (default: the objects' names as they first appear).
        names_as: "dict" or "list".
        root: data.yaml's `path` as written.
    """
    splits = {"train": [_image(i) for i in images], "val": [_image(i) for i in val]}
    _, names = _prepared(splits["train"] + splits["val"], labels)
    files, image_paths = [], {}
    for split, split_images in splits.items():
        for image in split_images:
            lines = [_ultralytics_line(obj, image, names.index(obj.name)) for obj in image.objects]
            text = "".join(line + "\n" for line in lines if line)
            stem = _stem_path(image.name)
            files.append(_put(folder / "labels" / split / f"{stem}.txt", text))
        image_paths |= _image_paths(folder / "images" / split, split_images)
    yaml_path = _put(
        folder / "data.yaml", _ultralytics_yaml(folder, names, bool(val), names_as, root)
    )
    return Export(yaml_path, (yaml_path, *files), image_paths)


def write_pycocotools_dataset(
    folder: Path, images: Iterable, *, labels: Sequence[str] = ()
) -> Export:
    """A COCO dataset of masks, written as pycocotools users write one (Detectron2's
    convert_to_coco_dict): annotations/instances.json.

    Every object is a mask (its box filled, a POLYGON rasterised by pycocotools) stored as
    mask.encode's compressed RLE with counts decoded to str; area is mask.area, bbox mask.toBbox
    (the mask's pixels: a polygon's can differ from its box by a pixel); iscrowd 1 for CROWD,
    else 0. Ids from 1, "licenses": null as Detectron2 writes it. Images go to images/.
    """
    images, names = _prepared(images, labels)
    annotations = []
    for image_id, image in enumerate(images, start=1):
        for obj in image.objects:
            rle = _compressed_rle(obj, image)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "bbox": [float(v) for v in mask_utils.toBbox(rle)],
                    "area": float(mask_utils.area(rle)),
                    "iscrowd": int(obj.shape == CROWD),
                    "category_id": names.index(obj.name) + 1,
                    "segmentation": {"size": rle["size"], "counts": rle["counts"].decode("ascii")},
                }
            )
    document = {
        "info": {"date_created": _EXPORTED_AT, "description": "Automatically generated COCO json"},
        "images": [
            {"id": i, "width": im.width, "height": im.height, "file_name": im.name}
            for i, im in enumerate(images, start=1)
        ],
        "categories": [{"id": i, "name": name} for i, name in enumerate(names, start=1)],
        "licenses": None,
        "annotations": annotations,
    }
    path = _put(folder / "annotations" / "instances.json", json.dumps(document))
    return Export(path, (path,), _image_paths(folder / "images", images))


def write_voc_devkit(folder: Path, images: Iterable) -> Export:
    """PASCAL VOC's own files, as the VOC2012 download holds them: Annotations/<stem>.xml.

    Tab-indented XML, <folder>VOC2012</folder>, the devkit's <source>, <size> with depth 3,
    objects with pose, truncated, difficult and <bndbox> corners as 1-based pixel indices, both
    inclusive (xmin = left + 1, xmax = right; transforms/annotations/voc.py reads them as written).
    Boxes only (give integer corners). Also ImageSets/Main/trainval.txt; images go to JPEGImages/.
    """
    images = [_image(image) for image in images]
    files = []
    for image in images:
        root = _voc_devkit_root(image)
        ET.indent(root, space="\t")
        xml_text = ET.tostring(root, encoding="unicode") + "\n"
        files.append(_put(folder / "Annotations" / f"{_stem_path(image.name)}.xml", xml_text))
    listed = "".join(f"{_stem_path(image.name)}\n" for image in images)
    files.append(_put(folder / "ImageSets" / "Main" / "trainval.txt", listed))
    return Export(folder / "Annotations", tuple(files), _image_paths(folder / "JPEGImages", images))


# Shared parts.


def _image(image: ExportImage | tuple) -> ExportImage:
    name, width, height, *rest = image
    objects = tuple(ExportObject(*obj) for obj in (rest[0] if rest else ()))
    return ExportImage(name, width, height, objects)


def _prepared(images: Iterable, labels: Sequence[str]) -> tuple[list[ExportImage], list[str]]:
    """The images as ExportImage, and the class names in id order: `labels`, then any other
    object name as it first appears."""
    images = [_image(image) for image in images]
    names = list(dict.fromkeys([*labels, *(o.name for i in images for o in i.objects)]))
    return images, names


def _put(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return path


def _compact_json(document: object) -> str:
    # Datumaro writes with orjson: no spaces, UTF-8 as it is.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def _stem_path(name: str) -> str:
    """The name without its extension, folders kept (Datumaro's item id)."""
    return posixpath.splitext(name)[0]


def _image_paths(
    folder: Path, images: Sequence[ExportImage], base_names: bool = False
) -> dict[str, Path]:
    return {i.name: folder / (posixpath.basename(i.name) if base_names else i.name) for i in images}


def _polygon(obj: ExportObject) -> list[float]:
    """The diamond through the box's edge midpoints, clockwise from the top."""
    cx, cy = (obj.xmin + obj.xmax) / 2, (obj.ymin + obj.ymax) / 2
    return [cx, obj.ymin, obj.xmax, cy, cx, obj.ymax, obj.xmin, cy]


def _box_mask(obj: ExportObject, image: ExportImage) -> np.ndarray:
    mask = np.zeros((image.height, image.width), dtype=np.uint8, order="F")
    mask[round(obj.ymin) : round(obj.ymax), round(obj.xmin) : round(obj.xmax)] = 1
    return mask


def _yolo_box(obj: ExportObject, image: ExportImage) -> tuple[float, ...]:
    """Darknet's voc_label.py arithmetic, which Datumaro and Ultralytics share."""
    return (
        (obj.xmin + obj.xmax) / 2 / image.width,
        (obj.ymin + obj.ymax) / 2 / image.height,
        (obj.xmax - obj.xmin) / image.width,
        (obj.ymax - obj.ymin) / image.height,
    )


def _voc_color(index: int) -> tuple[int, int, int]:
    """PASCAL VOC's palette: the index's bits spread over r, g, b from the high bit down."""
    r = g = b = 0
    for bit in range(8):
        r |= (index >> (3 * bit) & 1) << (7 - bit)
        g |= (index >> (3 * bit + 1) & 1) << (7 - bit)
        b |= (index >> (3 * bit + 2) & 1) << (7 - bit)
    return r, g, b


def _sub(parent: ET.Element, tag: str, text: str | None = None) -> ET.Element:
    element = ET.SubElement(parent, tag)
    element.text = text
    return element


# CVAT.


def _cvat_coco_image(image_id: int, image: ExportImage) -> dict:
    return {
        "id": image_id,
        "width": image.width,
        "height": image.height,
        "file_name": image.name,
        "license": 0,
        "flickr_url": "",
        "coco_url": "",
        "date_captured": 0,
    }


def _cvat_coco_annotation(
    obj: ExportObject, image: ExportImage, annotation_id: int, image_id: int, category_id: int
) -> dict:
    """Datumaro's _InstancesConverter.convert_instance for one CVAT shape."""
    width, height = image.width, image.height
    attributes: dict = {"occluded": obj.occluded}
    if obj.shape == CROWD:
        mask = _box_mask(obj, image)
        segmentation: list | dict = _uncompressed_rle(mask)
        area = mask_utils.area([mask_utils.frPyObjects(segmentation, height, width)]).item()
        ys, xs = np.nonzero(mask)
        bbox = [xs.min(), ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1]
    elif obj.shape == POLYGON:
        segmentation = [[float(v) for v in _polygon(obj)]]
        area = mask_utils.area(
            mask_utils.merge(mask_utils.frPyObjects(segmentation, height, width))
        )
        bbox = [obj.xmin, obj.ymin, obj.xmax - obj.xmin, obj.ymax - obj.ymin]
    else:
        segmentation, attributes["rotation"] = [], 0.0
        bbox = [obj.xmin, obj.ymin, obj.xmax - obj.xmin, obj.ymax - obj.ymin]
        area = bbox[2] * bbox[3]
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": category_id,
        "segmentation": segmentation,
        "area": float(area),
        "bbox": [round(float(v), _CVAT_BBOX_DIGITS) for v in bbox],
        "iscrowd": int(obj.shape == CROWD),
        "attributes": attributes,
    }


def _uncompressed_rle(mask: np.ndarray) -> dict:
    """Datumaro's mask_to_rle: run lengths down the columns, starting with a run of zeros."""
    flat = mask.ravel(order="F")
    changes = np.diff(flat, prepend=[1 - flat[0]], append=[1 - flat[-1]])
    (starts,) = np.nonzero(changes)
    counts = np.diff(starts, prepend=[0]) if flat[0] else np.diff(starts)
    return {"counts": [int(c) for c in counts], "size": [int(s) for s in mask.shape]}


def _cvat_voc_root(image: ExportImage) -> ET.Element:
    stem = _stem_path(image.name)
    root = ET.Element("annotation")
    _sub(root, "folder", stem[: stem.find("_")] if "_" in stem else "")
    _sub(root, "filename", image.name)
    source = _sub(root, "source")
    for tag in ("database", "annotation", "image"):
        _sub(source, tag, "Unknown")
    size = _sub(root, "size")
    _sub(size, "width", str(image.width))
    _sub(size, "height", str(image.height))
    _sub(size, "depth", "")
    _sub(root, "segmented", str(int(any(o.shape == CROWD for o in image.objects))))
    for obj in image.objects:
        if obj.shape == BOX:
            _cvat_voc_object(root, obj)
    ET.indent(root, space="  ")
    return root


def _cvat_voc_object(root: ET.Element, obj: ExportObject) -> None:
    element = _sub(root, "object")
    _sub(element, "name", obj.name)
    _sub(element, "pose", "Unspecified")
    _sub(element, "truncated", str(int(obj.truncated)))
    _sub(element, "occluded", str(int(obj.occluded)))
    _sub(element, "difficult", str(int(obj.difficult)))
    bndbox = _sub(element, "bndbox")
    x, y, w, h = obj.xmin, obj.ymin, obj.xmax - obj.xmin, obj.ymax - obj.ymin
    for tag, value in (("xmin", x), ("ymin", y), ("xmax", x + w), ("ymax", y + h)):
        _sub(bndbox, tag, str(float(value)))
    attribute = _sub(_sub(element, "attributes"), "attribute")
    _sub(attribute, "name", "rotation")
    _sub(attribute, "value", "0.0")


# Label Studio: regions are stored as percentages of the image's size, exports scale them back.


def _percent(obj: ExportObject, image: ExportImage) -> tuple[float, float, float, float]:
    """A rectangle region's x, y, width, height as Label Studio stores them."""
    return (
        obj.xmin / image.width * 100,
        obj.ymin / image.height * 100,
        (obj.xmax - obj.xmin) / image.width * 100,
        (obj.ymax - obj.ymin) / image.height * 100,
    )


def _percent_points(obj: ExportObject, image: ExportImage) -> list[tuple[float, float]]:
    """A polygon region's points as Label Studio stores them."""
    polygon = _polygon(obj)
    return [
        (x / image.width * 100, y / image.height * 100)
        for x, y in zip(polygon[0::2], polygon[1::2], strict=True)
    ]


def _label_studio_coco_annotation(
    obj: ExportObject, image: ExportImage, annotation_id: int, image_id: int, category_id: int
) -> dict:
    """convert_to_coco's annotation of one rectangle or polygon region."""
    if obj.shape == POLYGON:
        points = [
            (x / 100 * image.width, y / 100 * image.height) for x, y in _percent_points(obj, image)
        ]
        xs, ys = zip(*points, strict=True)
        x1, y1 = min(xs), min(ys)
        area = float(0.5 * np.abs(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
        segmentation = [[v for point in points for v in point]]
        bbox = [x1, y1, max(xs) - x1, max(ys) - y1]
    else:
        x, y, w, h = _percent(obj, image)
        x, w = x * image.width / 100, w * image.width / 100
        y, h = y * image.height / 100, h * image.height / 100
        segmentation, bbox, area = [], [x, y, w, h], w * h
    return {
        "id": annotation_id,
        "image_id": image_id,
        "category_id": category_id,
        "segmentation": segmentation,
        "bbox": bbox,
        "ignore": 0,
        "iscrowd": 0,
        "area": area,
    }


def _label_studio_yolo_line(obj: ExportObject, image: ExportImage, category_id: int) -> list:
    if obj.shape == POLYGON:
        return [category_id, *(v / 100 for point in _percent_points(obj, image) for v in point)]
    x, y, w, h = _percent(obj, image)
    return [category_id, (x + w / 2) / 100, (y + h / 2) / 100, w / 100, h / 100]


def _label_studio_voc_document(image: ExportImage, boxes: list[ExportObject]):
    """convert_to_voc's minidom document: Label Studio's placeholders for source and owner."""
    document = xml.dom.minidom.getDOMImplementation().createDocument(None, "annotation", None)
    source = [("database", "MyDatabase"), ("annotation", "COCO2017"), ("image", "flickr")]
    source += [("flickrid", "NULL"), ("annotator", "annotator@example.com")]
    size = [("width", str(image.width)), ("height", str(image.height)), ("depth", "3")]
    content = [("folder", "images"), ("filename", posixpath.basename(image.name))]
    content += [("source", source), ("owner", [("flickrid", "NULL"), ("name", "Label Studio")])]
    content += [("size", size), ("segmented", "0")]
    content += [("object", _label_studio_voc_object(obj, image)) for obj in boxes]
    for tag, value in content:
        document.documentElement.appendChild(_dom_element(document, tag, value))
    return document


def _label_studio_voc_object(obj: ExportObject, image: ExportImage) -> list[tuple[str, object]]:
    px, py, pw, ph = _percent(obj, image)
    x, y = int(px / 100 * image.width), int(py / 100 * image.height)
    w, h = int(pw / 100 * image.width), int(ph / 100 * image.height)
    corners = [("xmin", x), ("ymin", y), ("xmax", x + w), ("ymax", y + h)]
    flags = [("pose", "Unspecified"), ("truncated", "0"), ("difficult", "0")]
    return [("name", obj.name), *flags, ("bndbox", [(tag, str(v)) for tag, v in corners])]


def _dom_element(document, tag: str, content: str | list):
    """An element holding `content`: text, or (tag, content) pairs as its children, in order."""
    node = document.createElement(tag)
    if isinstance(content, str):
        node.appendChild(document.createTextNode(content))
    else:
        for child_tag, child_content in content:
            node.appendChild(_dom_element(document, child_tag, child_content))
    return node


# Ultralytics.


def _ultralytics_line(obj: ExportObject, image: ExportImage, class_id: int) -> str:
    if obj.shape == CROWD:
        return ""
    if obj.shape == POLYGON:
        polygon = _polygon(obj)
        values = [v / (image.width if i % 2 == 0 else image.height) for i, v in enumerate(polygon)]
    else:
        values = list(_yolo_box(obj, image))
    line = (class_id, *values)
    return ("%g " * len(line)).rstrip() % line


def _ultralytics_yaml(
    folder: Path, names: list[str], has_val: bool, names_as: str, root: str | None
) -> str:
    val = "images/val" if has_val else "images/train"
    head = (
        "# Ultralytics YOLO dataset\n"
        f"path: {folder.resolve() if root is None else root} # dataset root dir\n"
        "train: images/train # train images (relative to 'path')\n"
        f"val: {val} # val images (relative to 'path')\n"
        "test: # test images (optional)\n\n"
    )
    if names_as == "list":
        return head + f"nc: {len(names)}\nnames: {names!r}\n"
    return head + "# Classes\nnames:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(names))


# pycocotools and the VOC devkit.


def _compressed_rle(obj: ExportObject, image: ExportImage) -> dict:
    if obj.shape == POLYGON:
        parts = mask_utils.frPyObjects([_polygon(obj)], image.height, image.width)
        return mask_utils.merge(parts)
    return mask_utils.encode(_box_mask(obj, image))


def _voc_devkit_root(image: ExportImage) -> ET.Element:
    root = ET.Element("annotation")
    _sub(root, "folder", "VOC2012")
    _sub(root, "filename", image.name)
    source = _sub(root, "source")
    _sub(source, "database", "The VOC2007 Database")
    _sub(source, "annotation", "PASCAL VOC2007")
    _sub(source, "image", "flickr")
    size = _sub(root, "size")
    for tag, value in (("width", image.width), ("height", image.height), ("depth", 3)):
        _sub(size, tag, str(value))
    _sub(root, "segmented", "0")
    for obj in image.objects:
        if obj.shape != BOX:
            continue
        element = _sub(root, "object")
        _sub(element, "name", obj.name)
        _sub(element, "pose", "Unspecified")
        _sub(element, "truncated", str(int(obj.truncated)))
        _sub(element, "difficult", str(int(obj.difficult)))
        bndbox = _sub(element, "bndbox")
        corners = (obj.xmin + 1, obj.ymin + 1, obj.xmax, obj.ymax)
        for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), corners, strict=True):
            _sub(bndbox, tag, str(round(value)))
    return root
