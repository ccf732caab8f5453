"""Versioned output: write the per-file index, then check the version, write changes.json, and
point LATEST at it (the last step of a `--versioned` conversion, on whatever runner runs it).

Publishing inside the pipeline rather than in the launcher makes a Dataflow Flex Template
launch (whose launcher exits once the job is submitted) publish too.
"""

from __future__ import annotations

import json
import logging

import apache_beam as beam
from apache_beam import pvalue

from core import changes, rerun_record, retention, schema, storage, versions
from core.errors import ERROR_PREFIX
from transforms.elements import ListedFile, WriterEntry

__all__ = [
    "DigestListing",
    "WriteFileIndex",
    "PublishVersion",
    "VersionCheckError",
    "check_version",
]

_log = logging.getLogger(__name__)


class VersionCheckError(RuntimeError):
    """A finished version does not match its own dataset_info.json; LATEST is left alone."""


def _index_rows(group: tuple[tuple[str, int], list[WriterEntry]]) -> list[dict]:
    """((split, index), [WriterEntry]) -> one index row per file of the shard."""
    (split, index), entries = group
    return [
        {"path": e.path, "sha256": e.sha256, "split": split, "label": e.label, "shard": index}
        | ({"phash": e.phash} if e.phash is not None else {})
        for e in entries
    ]


class _ConcatFn(beam.CombineFn):
    """Lists of index rows -> one list (what dedupe's combine holds per file, and less)."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, rows):
        acc.extend(rows)
        return acc

    def merge_accumulators(self, accumulators):
        merged = []
        for acc in accumulators:
            merged.extend(acc)
        return merged

    def extract_output(self, acc):
        return acc


class WriteFileIndex(beam.PTransform):
    """((split, index), [WriterEntry]) shard groups -> files.jsonl.gz in `output`; yields its path.

    One file per version, sorted by path: changes.json is computed from two of them without
    opening a shard (the alternative, reading image/filename and sha256 back from every record
    of two versions, reads both datasets whole).
    """

    def __init__(self, output: str):
        super().__init__()
        self._output = output

    def expand(self, groups):
        path = storage.join(self._output, versions.FILE_INDEX)

        def write(rows):
            storage.write_bytes_atomic(path, changes.index_bytes(rows), "application/gzip")
            return path

        # One key, not CombineGlobally: that would hand the whole list to its default-value
        # step as a side input, which Beam's state cache weighs object by object (seconds of
        # CPU for a large dataset). No shard, no row, no output: _PublishFn writes the empty index.
        return (
            groups
            # (None, [row]) per shard
            | "IndexRows" >> beam.Map(lambda group: (None, _index_rows(group)))
            | "AllRows" >> beam.CombinePerKey(_ConcatFn())
            | "WriteIndex" >> beam.MapTuple(lambda _, rows: write(rows))
        )


def _file_values(batch: list[ListedFile]) -> tuple[int, int, bool]:
    """[ListedFile] -> the batch's part of the listing digest (core/rerun_record.py)."""
    return rerun_record.combine_values(
        rerun_record.line_value(rerun_record.listing_line(r.path, r.size, r.stamp)) for r in batch
    )


def _reject_values(reject: dict) -> tuple[int, int, bool]:
    return rerun_record.combine_values([rerun_record.line_value(rerun_record.reject_line(reject))])


class _SumFn(beam.CombineFn):
    """Parts of the listing digest -> their sum (constant size, whatever the input's size)."""

    def create_accumulator(self):
        return 0, 0, True

    def add_input(self, acc, part):
        return rerun_record.merge_totals([acc, part])

    def merge_accumulators(self, accumulators):
        return rerun_record.merge_totals(accumulators)

    def extract_output(self, acc):
        return rerun_record.digest_of(acc)


class DigestListing(beam.PTransform):
    """(listed batches, listing rejects) -> one dict {"sha256", "count"} of the listing as this
    run saw it (None when it holds files without a stamp or rejects the digest does not cover).

    A no-change rerun lists the input itself and compares (core/rerun_record.py); taking the
    digest here, from the pipeline's own listing, makes it describe exactly what was converted.
    """

    def expand(self, pcolls):
        listed, rejected = pcolls
        files = listed | "FileParts" >> beam.Map(_file_values)
        rejects = rejected | "RejectParts" >> beam.Map(_reject_values)
        return (
            (files, rejects)
            | "AllParts" >> beam.Flatten()
            # (sum of line hashes mod 2**256, lines, usable) per batch
            | "Digest" >> beam.CombineGlobally(_SumFn())
        )


def check_version(folder: str, info: dict) -> None:
    """Check a finished version against its own counts before it is published.

    Raises:
        VersionCheckError: accounting does not add up, or a shard is missing or of another size.
    """
    problems = []
    listed, written = info["num_listed"], info["num_written"]
    if listed != written + info["num_rejected"] + info["num_duplicates"]:
        problems.append(
            f"num_listed {listed} != written {written} + rejected {info['num_rejected']} "
            f"+ duplicates {info['num_duplicates']}"
        )
    for split, entry in info["splits"].items():
        found = storage.match_under(storage.join(folder, split), "*")
        sizes = {m.path: m.size_in_bytes for m in found}
        # Each shard, and its DALI index with --dali_index.
        files = [shard for shard in entry["shards"]]
        files += [shard["dali_index"] for shard in entry["shards"] if "dali_index" in shard]
        for shard in files:
            path = storage.join(folder, shard["file"])
            if path not in sizes:
                problems.append(f"{shard['file']} is missing")
            elif sizes[path] != shard["num_bytes"]:
                problems.append(
                    f"{shard['file']} has {sizes[path]} bytes, dataset_info.json says "
                    f"{shard['num_bytes']}"
                )
    if not storage.exists(storage.join(folder, versions.FILE_INDEX)):
        problems.append(f"{versions.FILE_INDEX} is missing")
    if problems:
        raise VersionCheckError(
            f"{ERROR_PREFIX}version {folder} does not match its {schema.DATASET_INFO} "
            f"({'; '.join(problems[:5])}); LATEST still names the previous version. Rerun "
            "with --resume --versioned to complete it."
        )


class _PublishFn(beam.DoFn):
    """dataset_info dict -> checks, changes.json, LATEST, pruning; yields what it did."""

    def __init__(self, config, rerun_key: str | None = None):
        self._folder = config.output
        self._keep = config.keep_versions
        self._keep_for_s = config.keep_for_s
        self._rerun_key = rerun_key

    def process(self, info, index_path, listing=None):
        # A side input so that the index is written before this runs; None: no file was planned.
        if index_path is None:
            storage.write_bytes_atomic(
                storage.join(self._folder, versions.FILE_INDEX),
                changes.index_bytes([]),
                "application/gzip",
            )
        root, name = versions.split_version_dir(self._folder)
        check_version(self._folder, info)
        previous = versions.read_latest(root)
        if previous is not None and previous < name:
            base = previous  # the usual case: what readers saw until now
        else:  # first version, or a newer run published first: the newest complete one before
            if previous is not None:
                _log.warning(
                    "imgrec: LATEST of %s names %s, not older than %s", root, previous, name
                )
            older = [n for n in versions.list_versions(root) if n < name]
            finished = [n for n in older if versions.is_finished(root, n)]
            base = finished[-1] if finished else None
        before = changes.load_file_facts(storage.join(root, base)) if base else None
        current = changes.load_file_facts(self._folder)
        change = changes.compute_changes(before, current, version=name, previous_version=base)
        storage.write_bytes_atomic(
            storage.join(self._folder, versions.CHANGES),
            json.dumps(change, indent=1, sort_keys=False).encode("utf-8"),
            mime_type="application/json",
        )
        record = rerun_record.record_bytes(self._rerun_key, listing)
        if record is not None:  # what a no-change rerun of this command compares
            path = storage.join(self._folder, rerun_record.RERUN_RECORD)
            storage.write_bytes_atomic(path, record, mime_type="application/json")
        published, _ = versions.publish(root, name)
        pruned = []
        if published and self._keep:  # never a version a reader holds or --keep_for keeps
            pruned = retention.prune(root, self._keep, name, self._keep_for_s)
        yield {
            "version": name,
            "published": published,
            "previous": previous,
            "headline": change["headline"],
            "pruned": pruned,
        }


class PublishVersion(beam.PTransform):
    """The dataset_info PCollection of a versioned run -> the version checked and published."""

    def __init__(self, config, index_written, listing=None, rerun_key: str | None = None):
        super().__init__()
        self._config = config
        self._index_written = index_written
        self._listing = listing
        self._rerun_key = rerun_key

    def expand(self, described):
        side = {"index_path": pvalue.AsSingleton(self._index_written, default_value=None)}
        if self._listing is not None:
            side["listing"] = pvalue.AsSingleton(self._listing)
        return described | "Publish" >> beam.ParDo(
            _PublishFn(self._config, self._rerun_key), **side
        )
