"""Reading a COCO instances JSON into ImageAnnotations per image, with its categories.

COCO's bbox is [x, y, width, height] in continuous pixel coordinates (0 is the image's left
edge), so the corners are (x, y, x + width, y + height). Segmentations are kept as given, held
compactly (objects.Polygons, objects.Rle; objects.coco_segmentation gives COCO's lists and dicts
back); boxes are not clipped here (clip_box does that against the image's real size). Every
image is returned, those without annotations with no objects.

The file is read in one streaming pass (ijson's C parser, yajl), one list entry at a time: a
json.loads of COCO train2017's 448 MB would cost ~7.7x that in Python objects, this read
~1.7x (bench/coco_memory.py). So the lists may come in any order (COCO writes
categories last): annotations' category and image ids are checked once the file is read.
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections.abc import Callable
from typing import Any, BinaryIO

import ijson

from transforms.annotations.objects import (
    AnnotationError,
    Box,
    Category,
    ImageAnnotations,
    ImageObject,
    Polygons,
    Rle,
    Segmentation,
)

__all__ = ["CocoAnnotations", "read_coco"]

_FIX_FORMAT = "fix: write the file as COCO instances JSON (images, annotations, categories)"

try:
    _PARSER = ijson.get_backend("yajl2_c")
except ImportError:  # no C extension for this platform: the same events, several times slower
    _PARSER = ijson

# ijson's own default read size.
_CHUNK = 64 * 1024
# The types of JSON's numbers (a JSON true is no coordinate), and of what isinstance(v, int) takes.
_NUMBERS = frozenset((int, float))
_INTEGERS = frozenset((int, bool))
# What the reader keeps of an annotation until the file's categories and images are known.
_PENDING = ("annotation_id", "image_id", "category_id", "box", "is_crowd", "area", "segmentation")
# The lists a COCO file must hold, in the order their absence is reported.
_LISTS = ("categories", "images", "annotations")

# Python's json writes NaN and +-Infinity, which yajl refuses: outside strings they are handed to
# it as these strings (a NUL starts no real COCO text) and read back as floats.
_SENTINELS = {
    b"NaN": b'"\\u0000NaN"',
    b"Infinity": b'"\\u0000Infinity"',
    b"-Infinity": b'"\\u0000-Infinity"',
}
_NON_FINITE = {"\0NaN": math.nan, "\0Infinity": math.inf, "\0-Infinity": -math.inf}
# What changes the string state or needs a sentinel.
_LEXEMES = re.compile(rb'["\\]|-?Infinity|NaN')
# A chunk's end in a run of these bytes may have cut a NaN or (-)Infinity in two.
_TOKEN_BYTES = frozenset(b"-NaInfinity")
_LONGEST_TOKEN = len(b"-Infinity")
# yajl's error text: the problem, then up to 30 bytes either side of the error on a line where
# the error's byte is at column 40 (its yajl_render_error_string).
_YAJL_CARET = 40
_YAJL_SIDE = 30
# What an error's token start may need of the chunk before: a number's digits.
_TAIL = 32
# The names of the JSON types of a file that is no object, as type(value).__name__ gives them.
_KINDS = {"start_array": "list", "string": "str", "boolean": "bool", "null": "NoneType"}
# yajl's errors that point at the offending byte itself (or the end), or just past it.
_AT_THE_BYTE = {"invalid character inside string", "premature EOF"}
_PAST_THE_BYTE = {"invalid char in json text"}


@dataclasses.dataclass(frozen=True, slots=True)
class CocoAnnotations:
    """One COCO file's categories (in file order) and its images' objects (in file order)."""

    categories: tuple[Category, ...]
    images: tuple[ImageAnnotations, ...]


def read_coco(data: bytes | BinaryIO, path: str) -> CocoAnnotations:
    """Reads a COCO instances JSON in one streaming pass.

    Args:
        data: the file's bytes, or the file open for reading in binary mode (then only 64 KiB
            of it are held at a time).
        path: the file's path, for messages.

    Returns:
        The categories and, per image, its objects.

    Raises:
        AnnotationError: malformed JSON (naming its line and column), a missing or mistyped
            field, or an annotation whose category_id or image_id the file does not define
            (naming its id).
    """
    stream = io.BytesIO(data) if isinstance(data, bytes | bytearray | memoryview) else data
    source = _JsonBytes(stream, path)
    reader = _Reader(path)
    try:
        _read_document(_PARSER.basic_parse(source, buf_size=_CHUNK, use_float=True), reader)
    except ijson.JSONError as error:
        raise _json_error(error, source, path) from None
    return reader.result()


class _JsonBytes:
    """The file's bytes as the parser reads them: a UTF-8 BOM dropped, NaN and Infinity outside
    strings turned into _SENTINELS. Remembers where the chunk handed out last lies in the file,
    for the line of a JSON error."""

    def __init__(self, stream: BinaryIO, path: str) -> None:
        self._stream = stream
        self._path = path
        self._held = b""  # a chunk's tail that may be a cut token
        self._in_string = False
        self._escaped = False  # the last chunk ended with a backslash inside a string
        self._eof = False
        self.raw = b""  # the last chunk, as in the file
        self.parsed = b""  # and as the parser read it
        self.tail = b""  # the end of the chunk before, as in the file
        # Per sentinel in it: (its start, its end, bytes added before it, and with it)
        self.shifts: list[tuple[int, int, int, int]] = []
        self.start = 0  # its offset in the file
        self.lines = 0  # the newlines before it
        self.line_start = 0  # the offset where its first line starts

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson asks whether the stream gives bytes
            return b""
        self._advance()
        raw = self._take(size if size > 0 else _CHUNK)
        if not self.start and raw.startswith(b"\xef\xbb\xbf"):
            raw, self.start, self.line_start = raw[3:], 3, 3
        if not self.start and (raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\0" in raw[:4]):
            problem = "not UTF-8 text (UTF-16 or UTF-32)"
            raise AnnotationError(self._path, "", problem, f"{_FIX_FORMAT}, in UTF-8")
        self.raw = raw
        self.parsed = self._rewrite(raw)
        return self.parsed

    def _advance(self) -> None:
        raw = self.raw
        self.tail = raw[-_TAIL:]
        newline = raw.rfind(b"\n")
        if newline >= 0:
            self.line_start = self.start + newline + 1
        self.lines += raw.count(b"\n")
        self.start += len(raw)

    def _take(self, size: int) -> bytes:
        # Reads on until the chunk can end outside a token, and the first holds a BOM's 4 bytes.
        raw, cut = self._held, 0
        while not self._eof and (not cut or (not self.start and len(raw) < 4)):
            more = self._stream.read(size)
            self._eof = not more
            raw += more
            cut = len(raw)
            while cut and len(raw) - cut < _LONGEST_TOKEN and raw[cut - 1] in _TOKEN_BYTES:
                cut -= 1
        if self._eof:
            self._held = b""
            return raw
        self._held = raw[cut:]
        return raw[:cut]

    def _rewrite(self, raw: bytes) -> bytes:
        self.shifts = []
        if not self._escaped and b"\\" not in raw and b"NaN" not in raw and b"Infinity" not in raw:
            # No escapes: the quotes alone say whether the chunk ends inside a string.
            self._in_string ^= raw.count(b'"') % 2 == 1
            return raw
        parts, last, added = [], 0, 0
        position = 1 if self._escaped and raw else 0  # the escaped byte the last chunk cut off
        self._escaped = self._escaped and not raw
        while (match := _LEXEMES.search(raw, position)) is not None:
            token, position = match.group(), match.end()
            if token == b'"':
                self._in_string = not self._in_string
            elif token == b"\\":
                self._escaped = position == len(raw)
                position += 1
            elif not self._in_string:
                sentinel = _SENTINELS[token]
                parts += (raw[last : match.start()], sentinel)
                last, start = position, match.start() + added
                added += len(sentinel) - len(token)
                self.shifts.append((start, position + added, start - match.start(), added))
        return b"".join(parts) + raw[last:] if parts else raw


def _read_document(events: Any, reader: _Reader) -> None:
    event, value = next(events)
    if event != "start_map":
        kind = type(value).__name__ if event == "number" else _KINDS[event]
        raise AnnotationError(reader.path, "", f"a JSON {kind}, not an object", _FIX_FORMAT)
    seen = set()
    for event, key in events:
        if event == "end_map":
            break
        event, value = next(events)
        if key not in _LISTS:
            _value(events, event, value)  # info, licenses: nothing to keep
            continue
        if event != "start_array" or key in seen:
            problem = f"'{key}' appears twice" if key in seen else f"'{key}' is not a list"
            raise AnnotationError(reader.path, "", problem, _FIX_FORMAT)
        seen.add(key)
        _read_list(events, key, getattr(reader, key), reader.path)
    for _ in events:  # the parser's end: trailing garbage is an error
        pass
    for key in _LISTS:
        if key not in seen:
            problem = f"'{key}' is missing or not a list"
            raise AnnotationError(reader.path, "", problem, _FIX_FORMAT)


def _read_list(events: Any, key: str, add: Callable[[dict[str, Any]], None], path: str) -> None:
    # One entry at a time: only the reader's compact form of it outlives the next.
    for event, _ in events:
        if event == "end_array":
            break
        if event != "start_map":
            problem = f"'{key}' holds a non-object entry"
            raise AnnotationError(path, "", problem, _FIX_FORMAT)
        add(_map(events))


def _value(events: Any, event: str, value: Any) -> Any:
    """The JSON value that starts with (event, value), built from the events after it."""
    if event == "start_map":
        return _map(events)
    if event == "start_array":
        return _array(events)
    if event == "string":
        return _NON_FINITE.get(value, value)
    return value


def _map(events: Any) -> dict[str, Any]:
    built = {}
    for event, key in events:
        if event == "end_map":
            break
        built[key] = _value(events, *next(events))
    return built


def _array(events: Any) -> list[Any]:
    built: list[Any] = []
    append = built.append
    for event, value in events:
        if event == "number":  # most events: polygon coordinates and RLE runs
            append(value)
        elif event == "end_array":
            break
        else:
            append(_value(events, event, value))
    return built


def _json_error(error: ijson.JSONError, source: _JsonBytes, path: str) -> AnnotationError:
    """The error naming the line and column of yajl's error, from the window of text it shows."""
    text = error.args[0] if error.args else b""
    text = text.encode() if isinstance(text, str) else text
    if not isinstance(text, bytes):  # the Python parser's text names no window
        text = str(text).encode()
    problem, _, rest = text.partition(b"\n")
    problem = problem.decode(errors="replace").split(": ", 1)[-1].rstrip(".")
    offset = _error_offset(source.parsed, rest.split(b"\n")[0], problem)
    if offset is None:  # no window to find: name the chunk's first line
        where = f"line {source.lines + 1} or after"
    else:
        # The token may start in the last chunk's tail (no sentinel: they are never cut).
        tail = source.tail
        offset = _token_start(tail + source.parsed, offset + len(tail), problem) - len(tail)
        where = _line_column(source, _original_offset(source, offset))
    if "UTF8" in problem:
        return AnnotationError(path, where, f"not UTF-8 text ({problem})", _FIX_FORMAT)
    return AnnotationError(path, where, f"malformed JSON: {problem}", _FIX_FORMAT)


def _error_offset(chunk: bytes, window: bytes, problem: str) -> int | None:
    """Where in the chunk (as the parser read it) yajl's error lies, or None."""
    if problem == "premature EOF":
        return len(chunk)
    plain = chunk.replace(b"\n", b" ").replace(b"\r", b" ")
    for offset in range(min(_YAJL_SIDE, len(plain) + 1)):
        if window == b" " * (_YAJL_CARET - offset) + plain[: offset + _YAJL_SIDE]:
            return offset
    start = plain.find(window[_YAJL_CARET - _YAJL_SIDE :])
    return None if start < 0 else start + _YAJL_SIDE


def _token_start(text: bytes, offset: int, problem: str) -> int:
    """Where the token that yajl refused at `offset` of `text` starts: yajl points past it (or
    into it, for a string), Python's json and a reader at its start."""
    if problem in _AT_THE_BYTE or not offset:
        return offset
    before = text[offset - 1 : offset]
    if problem in _PAST_THE_BYTE or "UTF8" in problem or before in b"{}[],:":
        return offset - 1
    if before == b'"':
        return max(text.rfind(b'"', 0, offset - 1), 0)
    start = offset
    while start and (text[start - 1 : start].isalnum() or text[start - 1 : start] in b".+-"):
        start -= 1
    if start < offset and text[start - 1 : start] == b'"':
        return start - 1
    return start if start < offset else offset - 1


def _original_offset(source: _JsonBytes, offset: int) -> int:
    """The file's offset, relative to the chunk, of an offset in the chunk the parser read."""
    added = 0
    for start, end, before, after in source.shifts:
        if offset < end:
            return offset - added if offset < start else start - before
        added = after
    return offset - added


def _line_column(source: _JsonBytes, offset: int) -> str:
    # A negative offset lies in the last chunk's tail, on the chunk's first line (a token holds
    # no newline).
    raw, offset_in = source.raw, max(offset, 0)
    newline = raw.rfind(b"\n", 0, offset_in)
    column = offset - newline if newline >= 0 else source.start + offset - source.line_start + 1
    line = source.lines + raw.count(b"\n", 0, offset_in) + 1
    return f"line {line} column {column}"


class _Reader:
    """The file's entries so far; annotations wait for the categories and images to be known."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._categories: list[Category] = []
        self._category_ids: set[int] = set()
        self._images: list[tuple[str, int | None, int | None, Any]] = []
        self._objects: dict[Any, list[ImageObject]] = {}
        # _PENDING values per annotation, in file order, in one flat list: a tuple each would
        # leave its memory unusable for the objects built from it (another size of block).
        self._pending: list[Any] = []

    def categories(self, item: dict[str, Any]) -> None:
        where = f"category #{len(self._categories) + 1}"
        category_id = _field(item, "id", self.path, where)
        name = _field(item, "name", self.path, where)
        valid = isinstance(category_id, int) and not isinstance(category_id, bool)
        if not valid or category_id in self._category_ids:
            raise AnnotationError(
                self.path,
                where,
                f"id {category_id!r} is not a unique integer",
                "fix: number it uniquely",
            )
        supercategory = str(item.get("supercategory", ""))
        self._category_ids.add(category_id)
        self._categories.append(Category(category_id, str(name), supercategory))

    def images(self, image: dict[str, Any]) -> None:
        where = f"image #{len(self._images) + 1}"
        image_id = _field(image, "id", self.path, where)
        # A list or an object is no dict key; other ids keep json.loads' equality (1 == 1.0).
        if isinstance(image_id, list | dict):
            problem = f"id {image_id!r} is no number or text"
            raise AnnotationError(self.path, where, problem, "fix: give each image its own id")
        if image_id in self._objects:
            raise AnnotationError(
                self.path,
                f"image id {image_id}",
                "the id appears twice",
                "fix: give each image its own id",
            )
        self._objects[image_id] = []
        self._images.append(_read_image(image, image_id, self.path))

    def annotations(self, annotation: dict[str, Any]) -> None:
        where = f"annotation #{len(self._pending) // len(_PENDING) + 1}"
        annotation_id = _field(annotation, "id", self.path, where)
        self._pending += _read_annotation(annotation, annotation_id, self.path)

    def result(self) -> CocoAnnotations:
        by_category = {category.id: category for category in self._categories}
        objects, values = self._objects, iter(self._pending)
        for entry in zip(*[values] * len(_PENDING), strict=True):
            objects[self._image_of(entry, by_category)].append(_image_object(entry, by_category))
        self._pending = []
        images = tuple(
            ImageAnnotations(
                image=file_name,
                width=width,
                height=height,
                objects=tuple(objects.pop(image_id)),
                source=self.path,
                image_id=image_id,
            )
            for file_name, width, height, image_id in self._images
        )
        return CocoAnnotations(categories=tuple(self._categories), images=images)

    def _image_of(self, entry: tuple[Any, ...], by_category: dict[int, Category]) -> Any:
        annotation_id, image_id, category_id = entry[:3]
        where = f"annotation id {annotation_id}"
        if not _key(category_id) or category_id not in by_category:
            known = ", ".join(str(key) for key in by_category)
            raise AnnotationError(
                self.path,
                where,
                f"category_id {category_id!r} is not in the file's categories ({known})",
                "fix: add the category to 'categories' or correct the annotation's category_id",
            )
        if not _key(image_id) or image_id not in self._objects:
            raise AnnotationError(
                self.path,
                where,
                f"image_id {image_id!r} is not one of the file's images",
                "fix: add the image to 'images' or correct the annotation's image_id",
            )
        return image_id


def _image_object(entry: tuple[Any, ...], by_category: dict[int, Category]) -> ImageObject:
    annotation_id, _, category_id, box, is_crowd, area, segmentation = entry
    category = by_category[category_id]
    return ImageObject(
        class_id=category.id,
        class_text=category.name,
        box=box,
        is_crowd=is_crowd,
        area=area,
        segmentation=segmentation,
        annotation_id=annotation_id,
    )


def _field(item: dict[str, Any], key: str, path: str, where: str) -> Any:
    if key not in item:
        raise AnnotationError(path, where, f"no '{key}'", f"fix: give the entry its '{key}'")
    return item[key]


def _read_annotation(annotation: dict[str, Any], annotation_id: Any, path: str) -> tuple[Any, ...]:
    where = f"annotation id {annotation_id}"
    image_id = _field(annotation, "image_id", path, where)
    category_id = _field(annotation, "category_id", path, where)
    x, y, w, h = _bbox(annotation, path, where)
    area = annotation.get("area")
    if area is not None and not _number(area):
        raise AnnotationError(path, where, f"area {area!r} is not a number", "fix: write a number")
    return (
        annotation_id,
        image_id,
        category_id,
        Box(xmin=x, ymin=y, xmax=x + w, ymax=y + h),
        bool(annotation.get("iscrowd", 0)),
        None if area is None else float(area),
        _segmentation(annotation.get("segmentation"), path, where),
    )


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
            # One type check per distinct type, not per coordinate: polygons are most of a file.
            if not isinstance(part, list) or len(part) % 2 or not set(map(type, part)) <= _NUMBERS:
                raise AnnotationError(
                    path,
                    where,
                    "a segmentation polygon is not a list of x, y pairs",
                    "fix: write each part as [x1, y1, x2, y2, ...]",
                )
        return Polygons.from_parts(value)
    if isinstance(value, dict) and _rle_ok(value):
        try:
            return Rle.from_dict(value)
        except OverflowError:
            problem = "RLE counts hold a run below 0 or past 2**32 - 1"
            raise AnnotationError(path, where, problem, "fix: write the mask's runs") from None
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
        isinstance(counts, list) and set(map(type, counts)) <= _INTEGERS
    )
    return size_ok and counts_ok


def _read_image(
    image: dict[str, Any], image_id: Any, path: str
) -> tuple[str, int | None, int | None, Any]:
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
    return str(file_name), width, height, image_id
