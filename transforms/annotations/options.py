"""The annotation choices of a conversion (--annotations, --masks, ...), validated once.

The launcher reads the annotation files once (transforms/load_annotations.py) and fills in what it
found (`staged`, `label_map`, `split_names`); the pipeline's stages read only this object.
"""

from __future__ import annotations

import dataclasses

from transforms.annotations.objects import AnnotationError

__all__ = [
    "MASK_PLACEHOLDERS",
    "parse_mask_classes",
    "RELABEL_MODES",
    "UNANNOTATED_MODES",
    "AnnotationOptions",
    "mask_path",
]

UNANNOTATED_MODES = ("keep", "reject")
RELABEL_MODES = ("keep", "contiguous")
# What a --masks template may name of its image: its base name without and with the extension,
# and its key (path under the input root) without the extension.
MASK_PLACEHOLDERS = ("{stem}", "{name}", "{key_stem}")
# Pascal VOC's and most segmentation tools' "ignore" value on object borders and unlabelled pixels.
DEFAULT_MASK_IGNORE = 255


@dataclasses.dataclass(frozen=True)
class AnnotationOptions:
    """What the user asked for, and (after the launcher's read) what the annotations hold.

    `paths`: --annotations (files, globs or folders); `masks`: the --masks template ("" none);
    `mask_classes`: the file naming the mask values; `unannotated`: keep or reject listed images
    no annotation names; `instance_masks`: write image/object/mask where segmentations exist;
    `relabel`: keep the files' category ids, or map them to 1..N.
    """

    paths: tuple[str, ...] = ()
    masks: str = ""
    mask_classes: str = ""
    mask_ignore: int = DEFAULT_MASK_IGNORE
    unannotated: str = "keep"
    instance_masks: bool = True
    relabel: str = "keep"
    # Filled by the launcher's read (transforms/load_annotations.py), not by options:
    staged: str = ""  # the folder of the parsed objects, in parts by image stem
    num_parts: int = 0
    label_map: tuple[tuple[int, str], ...] = ()  # (id, name), ids as written
    split_names: tuple[str, ...] = ()  # --split_from annotations: the files' splits
    digest: str = ""  # sha256 of everything read: a changed annotation changes every record
    formats: tuple[str, ...] = ()  # "coco", "voc", "yolo"
    sources: tuple[str, ...] = ()  # the annotation files read
    num_images: int = 0  # images the annotation files name
    segmentation_classes: tuple[tuple[int, str], ...] = ()  # --mask_classes: (value, name)

    def __post_init__(self):
        if self.unannotated not in UNANNOTATED_MODES:
            raise ValueError(
                f"--unannotated must be one of {', '.join(UNANNOTATED_MODES)}, "
                f"got {self.unannotated!r}"
            )
        if self.relabel not in RELABEL_MODES:
            raise ValueError(
                f"--relabel must be one of {', '.join(RELABEL_MODES)}, got {self.relabel!r}"
            )
        if self.masks and not any(p in self.masks for p in MASK_PLACEHOLDERS):
            raise ValueError(
                f"--masks {self.masks!r} names no image: put {{stem}} (or {{name}}, "
                "{key_stem}) where the image's name goes, e.g. --masks 'masks/{stem}.png'"
            )
        if not 0 <= self.mask_ignore <= 255:
            raise ValueError(f"--mask_ignore must be in 0..255, got {self.mask_ignore}")
        if self.mask_classes and not self.masks:
            raise ValueError("--mask_classes names the values of --masks images: give --masks")

    @property
    def fingerprint(self) -> tuple:
        """What decides the records' object bytes (not where this run staged them): the
        writer's plan digests hold it, so a changed annotation rewrites the shards."""
        return (
            self.digest,
            self.masks,
            self.mask_ignore,
            self.instance_masks,
            self.relabel,
            self.label_map,
        )

    @property
    def active(self) -> bool:
        """Whether the run has annotations or masks at all."""
        return bool(self.paths or self.masks)


def mask_path(template: str, key: str) -> str:
    """The --masks file of the image whose key (path under the input root) is `key`."""
    name = key.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    key_stem = key[: len(key) - len(name)] + stem
    return template.replace("{stem}", stem).replace("{name}", name).replace("{key_stem}", key_stem)


def parse_mask_classes(text: str, path: str) -> tuple[tuple[int, str], ...]:
    """--mask_classes: one name per line (line N names value N), or "VALUE NAME" / "VALUE: NAME"
    lines; blank lines and "#" comments skipped in the second form.

    Raises:
        AnnotationError: naming the line and the fix.
    """
    lines = [line.strip() for line in text.splitlines()]
    pairs = []
    numbered = any(line.split(":")[0].split()[0].isdigit() for line in lines if line.split())
    for number, line in enumerate(lines, start=1):
        if not numbered:
            if line:
                pairs.append((number - 1, line))
            continue
        if not line or line.startswith("#"):
            continue
        value, _, name = line.replace(":", " ", 1).partition(" ")
        if not value.isdigit() or not name.strip() or int(value) > 255:
            raise AnnotationError(
                path, f"line {number}", f"{line!r} is not 'VALUE NAME'",
                "fix: write one class a line, 'VALUE NAME' with VALUE in 0..255",
            )  # fmt: skip
        pairs.append((int(value), name.strip()))
    values = [v for v, _ in pairs]
    if len(set(values)) != len(values):
        raise AnnotationError(path, "", "a value is named twice", "fix: name each value once")
    return tuple(sorted(pairs))
