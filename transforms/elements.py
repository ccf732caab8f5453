"""The elements that cross the conversion's Beam steps: one typed class each, defined once.

Module-level classes, so Beam's default coder pickles them by reference in any worker process.
Where an element meets JSON (inspection records, shard markers, dataset_info.json), the class
converts at that boundary (`to_record`, `to_dict`, `from_dict`), keeping the bytes as they were.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, NamedTuple

from transforms.annotations.objects import ImageAnnotations

__all__ = [
    "INSPECTION_FIELDS",
    "NO_OBJECTS",
    "PackedObjects",
    "AnalysisRow",
    "Chip",
    "InspectedChip",
    "InspectedImage",
    "ListedFile",
    "MatchedFile",
    "NearCluster",
    "NearMember",
    "ShardInfo",
    "WriterEntry",
    "split_unit",
]


@dataclasses.dataclass(frozen=True)
class PackedObjects:
    """One image's ImageAnnotations, pickled once where they were read (the launcher): every
    shuffle after that copies bytes, and only the writer unpacks them."""

    data: bytes  # b"": an image without objects (a negative)

    @classmethod
    def pack(cls, annotations: ImageAnnotations) -> PackedObjects:
        return cls(pickle.dumps(annotations, protocol=pickle.HIGHEST_PROTOCOL))

    def unpack(self) -> ImageAnnotations:
        if not self.data:
            return ImageAnnotations("", None, None, ())
        return pickle.loads(self.data)


# A listed image no annotation names, kept as a negative.
NO_OBJECTS = PackedObjects(b"")


@dataclasses.dataclass(frozen=True, slots=True)
class MatchedFile:
    """A file the patterns matched (or a manifest row named), before its label and split."""

    path: str
    key: str  # the path relative to the input root: split and shard hashes use it
    size: int  # -1: unknown until read (a manifest row)
    stamp: str | None  # the file's version as listed (--resume); None: unknown
    manifest_label: str = ""
    manifest_split: str = ""
    manifest_group: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ListedFile:
    """A file to convert, with its label and split."""

    path: str
    key: str
    label: str
    split: str
    size: int
    stamp: str | None
    # --group_by: a salted hash of the file's group ("" without --group_by); the split follows it.
    group: str = dataclasses.field(default="", kw_only=True)
    # --annotations: the image's objects (transforms/match_annotations.py); None: a run without.
    objects: PackedObjects | None = dataclasses.field(default=None, kw_only=True)


@dataclasses.dataclass(frozen=True, slots=True)
class InspectedImage(ListedFile):
    """A listed file inspection kept: what its bytes hold and how they will be stored."""

    sha256: str  # hex of the source bytes
    format: str  # the stored format
    source_format: str  # the detected format
    height: int
    width: int
    channels: int
    transcode: str  # "" or comma-joined reasons
    # [sum_r, sum_g, sum_b, sumsq_r, sumsq_g, sumsq_b, num_pixels] of sampled training images
    stats: list | None
    phash: int | None = None  # image/phash (transforms/images/phash.py); None: not computed
    # Its crop windows' pHashes, images/phash.py's `pack`ed (clustering reads them): None as phash.
    phash_crops: str | None = None

    @classmethod
    def of(cls, listed: ListedFile, **inspection: Any) -> InspectedImage:
        """`listed` with the INSPECTION_FIELDS values `inspection` (its size included)."""
        return cls(**{f: getattr(listed, f) for f in _LISTED_FIELDS} | inspection)

    def to_record(self) -> dict:
        """The JSON row --resume reuses (transforms/reuse_inspections.py)."""
        return {"path": self.path, "stamp": self.stamp, **self.inspection()}

    def inspection(self) -> dict:
        """INSPECTION_FIELDS by name."""
        return {f: getattr(self, f) for f in INSPECTION_FIELDS}


@dataclasses.dataclass(frozen=True, slots=True)
class Chip:
    """One chip of a scene (--tile): its window in source pixels and the source's sides."""

    y: int
    x: int
    height: int
    width: int
    source_height: int
    source_width: int
    # Whether this chip counts its source as a written file: the first chip planned of each
    # source, so a source is counted once whichever shards its chips land in.
    carrier: bool = False
    source_key: str = ""  # the source's key (its --masks file is named from it)


@dataclasses.dataclass(frozen=True, slots=True)
class InspectedChip(InspectedImage):
    """One chip of an inspected scene: the scene's fields, with its own key (the source's key
    and the window: shards are hashed by it), its sides and its share of the source's bytes."""

    chip: Chip = dataclasses.field(default=None, kw_only=True)


_LISTED_FIELDS = tuple(f.name for f in dataclasses.fields(ListedFile))
# What inspection finds about a file: the size it read and the fields InspectedImage adds.
INSPECTION_FIELDS = ("size",) + tuple(
    f.name for f in dataclasses.fields(InspectedImage) if f.name not in _LISTED_FIELDS
)


class WriterEntry(NamedTuple):
    """What the shard writer needs of one file. A tuple in the write shuffle: no field names per
    file, and the split stays the group's key; pixel statistics stay out."""

    path: str
    key: str
    label: str
    size: int
    sha256: str
    format: str
    source_format: str
    height: int
    width: int
    channels: int
    transcode: str
    group: str = ""
    objects: PackedObjects | None = None
    chip: Chip | None = None  # --tile: the window this record holds
    phash: int | None = None

    @classmethod
    def of(cls, image: InspectedImage) -> WriterEntry:
        defaults = cls._field_defaults
        return cls._make(getattr(image, f, defaults.get(f)) for f in cls._fields)


class NearMember(NamedTuple):
    """What near-duplicate clustering keeps of one image: names and its hash, never bytes."""

    key: str
    path: str
    split: str
    sha256: str
    phash: int
    # What moves to another split as a whole (--near_duplicates group): its --group_by group.
    unit: str

    @classmethod
    def of(cls, image: InspectedImage) -> NearMember:
        return cls(image.key, image.path, image.split, image.sha256, image.phash, split_unit(image))


def split_unit(image: ListedFile) -> str:
    """What keeps one split: the image's --group_by group, or the image alone."""
    return f"group\0{image.group}" if image.group else f"key\0{image.key}"


@dataclasses.dataclass(frozen=True)
class NearCluster:
    """Near-duplicate images (transforms/near_duplicates.py): members sorted by key, the
    largest Hamming distance between two of their hashes."""

    members: tuple[NearMember, ...]
    distance: int

    @property
    def splits(self) -> list[str]:
        return sorted({m.split for m in self.members})

    def to_dict(self) -> dict:
        """Its near_duplicates.jsonl line."""
        return {
            "paths": [m.path for m in self.members],
            "distance": self.distance,
            "splits": self.splits,
        }


class AnalysisRow(NamedTuple):
    """What TFT's analyzers read of one training image; the analysis process receives these."""

    path: str
    stats: list | None  # InspectedImage.stats
    height: int
    width: int
    label: str

    @classmethod
    def of(cls, image: InspectedImage) -> AnalysisRow:
        return cls(image.path, image.stats, image.height, image.width, image.label)


@dataclasses.dataclass(frozen=True, slots=True)
class ShardInfo:
    """One written (or resumed, or copied) shard, as its marker records it.

    The optional fields are None where an older marker lacks them; to_dict leaves them out.
    """

    split: str
    index: int
    file: str  # relative to the output
    num_examples: int
    num_bytes: int
    sha256: str
    transcoded: dict | None = None  # records per transcode reason
    formats: dict | None = None  # records per image/format
    label_counts: dict | None = None  # records per label text
    dali_index: dict | None = None  # {"file", "num_bytes", "sha256"} with --dali_index
    num_files: int | None = None  # files written (--frames all: fewer than num_examples)
    groups: list | None = None  # --group_by: the sorted image/group hashes of its records
    layouts: dict | None = None  # records per pixel layout, "uint16x13" (dtype x channels)
    objects: dict | None = None  # annotated runs: the shard's object tally (ObjectTally.to_dict)
    # --tile: {"written": chips, "skipped": {source path: chips under --tile_min_valid}}
    chips: dict | None = None

    @classmethod
    def from_dict(cls, d: dict) -> ShardInfo:
        return cls(**{f: d[f] for f in _SHARD_INFO_FIELDS if f in d})

    def to_dict(self) -> dict:
        """The marker's "shard" object (same keys, same order)."""
        return {f: v for f in _SHARD_INFO_FIELDS if (v := getattr(self, f)) is not None}

    def listing(self) -> dict:
        """The shard's entry in dataset_info.json."""
        entry = {
            "file": self.file,
            "num_examples": self.num_examples,
            "num_bytes": self.num_bytes,
            "sha256": self.sha256,
        }
        if self.dali_index is not None:
            entry["dali_index"] = self.dali_index
        return entry


_SHARD_INFO_FIELDS = tuple(f.name for f in dataclasses.fields(ShardInfo))
