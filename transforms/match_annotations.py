"""MatchAnnotations: each listed image joined to the objects its annotation files give it.

The objects the launcher staged (transforms/load_annotations.py) and the listed files meet in a
CoGroupByKey on the image's stem: names and objects cross the shuffle, never image bytes, and a
worker holds one stem's objects at a time. Within a stem, an annotation's image is the file at
one of its candidate paths, else the one whose key ends with its name, else the one file of its
base name; two such files are an error naming both.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from core.rejects import make_reject
from transforms.elements import NO_OBJECTS, ListedFile
from transforms.list_images import LIST_BATCH
from transforms.load_annotations import AnnotatedImage, part_path, read_part, stem_of

__all__ = ["AmbiguousImageError", "MatchAnnotations", "NO_ANNOTATION"]

NO_ANNOTATION = "no_annotation"


class AmbiguousImageError(ValueError):
    """An annotation that names two listed files, or two annotations naming one file."""


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _find(image: AnnotatedImage, files: list[ListedFile]) -> ListedFile | None:
    """The listed file `image` names, None if none.

    Raises:
        AmbiguousImageError: naming two files it could be, and the fix.
    """

    def own_path(f: ListedFile) -> str:
        return f.path.rsplit(".", 1)[0] if image.any_extension else f.path

    exact = [f for f in files if own_path(f) in image.candidates]
    if len(exact) == 1:
        return exact[0]
    pool = exact or files
    if image.any_extension:  # YOLO names a stem: any one file of that stem
        same = pool
    else:
        same = [f for f in pool if f.key == image.name or f.key.endswith("/" + image.name)]
        same = same or [f for f in pool if _base(f.path) == _base(image.name)]
    if len(same) > 1:
        raise AmbiguousImageError(
            f"{image.source}: image {image.name!r} could be {same[0].path} or "
            f"{same[1].path}; fix: name the image by its path relative to the annotation file "
            "or the input root, or give --input only the folder it is in"
        )
    return same[0] if same else None


class _MatchFn(beam.DoFn):
    """(stem, {"files": [ListedFile], "objects": [AnnotatedImage]}) -> ListedFile with its
    objects; annotations naming no file -> UNMATCHED; files no annotation names -> kept as
    negatives (no objects), or REJECTED with --unannotated reject or --split_from annotations."""

    UNMATCHED = "unmatched"
    REJECTED = "rejected"

    def __init__(self, config):
        self._reject_unannotated = config.annotations.unannotated == "reject"
        self._split_from_annotations = config.split_from == "annotations"
        self._matched = Metrics.counter("imgrec", "annotated_images")
        self._unmatched = Metrics.counter("imgrec", "unmatched_annotations")

    def process(self, element):
        _, grouped = element
        files = sorted(grouped["files"], key=lambda f: f.path)
        claims: dict[str, AnnotatedImage] = {}
        for image in sorted(grouped["objects"], key=lambda i: (i.source, i.name)):
            found = _find(image, files)
            if found is None:
                self._unmatched.inc()
                yield pvalue.TaggedOutput(self.UNMATCHED, _unmatched(image))
                continue
            if found.path in claims:
                raise AmbiguousImageError(
                    f"{found.path} is annotated twice, by {claims[found.path].source} "
                    f"and {image.source}; fix: give each image one annotation"
                )
            claims[found.path] = image
        for listed in files:
            yield self._joined(listed, claims.get(listed.path))

    def _joined(self, listed: ListedFile, image: AnnotatedImage | None):
        if image is None:
            if self._reject_unannotated or self._split_from_annotations:
                why = "--split_from annotations" if self._split_from_annotations else ""
                return pvalue.TaggedOutput(self.REJECTED, _no_annotation(listed, why))
            return dataclasses.replace(listed, objects=NO_OBJECTS)
        self._matched.inc()
        split = image.split if self._split_from_annotations and image.split else listed.split
        return dataclasses.replace(listed, split=split, objects=image.objects)


def _unmatched(image: AnnotatedImage) -> dict:
    """One line of unmatched_annotations.jsonl."""
    return {
        "image": image.name,
        "num_objects": image.num_objects,
        "source": image.source,
    }


def _no_annotation(listed: ListedFile, why: str) -> dict:
    option = why or "--unannotated reject"
    return make_reject(
        listed.path,
        NO_ANNOTATION,
        f"no annotation file names this image ({option}); annotate it, or leave it out of "
        "--input" + ("" if why else ", or drop --unannotated reject to keep it as a negative"),
    )


class MatchAnnotations(beam.PTransform):
    """[ListedFile] -> {"listed": [ListedFile] with objects, "unmatched": dict (unmatched
    annotations), "rejected": Reject}."""

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, listed):
        staged = self._config.annotations
        parts = [part_path(staged.staged, i) for i in range(staged.num_parts)]
        objects = (
            listed.pipeline
            | "AnnotationParts" >> beam.Create(parts)
            | "SpreadParts" >> beam.Reshuffle()
            # (stem, AnnotatedImage)
            | "ReadObjects" >> beam.FlatMap(lambda path: ((i.stem, i) for i in read_part(path)))
        )
        files = listed | "FilesByStem" >> beam.FlatMap(
            lambda batch: ((stem_of(f.key), f) for f in batch)
        )
        matched = (
            {"files": files, "objects": objects}
            | "JoinByStem" >> beam.CoGroupByKey()
            | "Match"
            >> beam.ParDo(_MatchFn(self._config)).with_outputs(
                _MatchFn.UNMATCHED, _MatchFn.REJECTED, main="listed"
            )
        )
        batches = (
            matched.listed
            | "Rebatch" >> beam.BatchElements(min_batch_size=LIST_BATCH, max_batch_size=LIST_BATCH)
            # The join's output comes in few bundles: spread the batches over the workers again.
            | "SpreadBatches" >> beam.Reshuffle()
        )
        return {
            "listed": batches,
            "unmatched": matched[_MatchFn.UNMATCHED],
            "rejected": matched[_MatchFn.REJECTED],
        }
