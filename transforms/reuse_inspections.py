"""Resume: record each inspected file's results, and reuse them for files whose listing is unchanged.

A conversion writes, per inspected batch, what inspection found about each file (sha256, format,
sides, transcode reasons, pixel statistics) next to the file's listing stamp (size and
modification/change time and inode for local files; size and update time for bucket objects)
under `.imgrec/inspected/<options digest>/`. `--resume` (with the default `--resume_verify
stamp`) hands a listed file to inspection only if no record has its path, size and stamp for
the same check options; the others take their recorded results unread. (The size recorded is
the one inspection read; a file that changed between listing and reading got a newer stamp
since, so its record is never used.) Dedupe, splits, shard
plans and statistics then see every file exactly as a fresh run would.

A `--versioned` run (without `--full`) does the same with the records of the version LATEST
names (`config.previous_version`), and writes the records it reused into its own version, so
that the next version finds every unchanged file's record in its predecessor alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import operator

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from core import storage
from transforms.elements import INSPECTION_FIELDS, InspectedImage, ListedFile
from transforms.keys import stats_fraction, wants_stats

__all__ = [
    "RecordInspections",
    "ReuseInspections",
    "RECORD_DIR",
    "RESUME_VERIFY_MODES",
    "records_folder",
    "reuse_sources",
]

# Where the records live, under the output's bookkeeping folder (which --overwrite clears).
RECORD_DIR = ".imgrec/inspected"
# Bumped whenever what inspection computes changes: records of another version are ignored.
RECORD_VERSION = 2
# stamp: reuse a record while the file's listing stamp is unchanged; full: inspect every file.
RESUME_VERIFY_MODES = ("stamp", "full")
_STATS = INSPECTION_FIELDS.index("stats")


def records_folder(config, output: str | None = None) -> str:
    """The folder of `config`'s records in `output` (default: config.output): one per set of
    check options, since they decide what inspection finds."""
    decides = f"{RECORD_VERSION}\0{config.check!r}"
    if getattr(config, "tiles", None) is not None:  # --tile: a scene inspected by its header
        decides += "\0tile"
    digest = hashlib.sha256(decides.encode()).hexdigest()
    return storage.join(output or config.output, RECORD_DIR, digest[:16])


def reuse_sources(config) -> list[str]:
    """The record folders whose records a run may reuse, oldest first: the previous version's
    (an incremental --versioned run) and the output's own (--resume). Empty: inspect all.

    `--resume_verify full` opts out of both; `--full` leaves previous_version unset.
    """
    if config.resume_verify != "stamp":
        return []
    folders = []
    if config.previous_version:
        folders.append(records_folder(config, config.previous_version))
    if config.resume:
        folders.append(records_folder(config))
    return folders


class _RecordFn(beam.DoFn):
    """[InspectedImage] -> nothing; writes the batch's records as one JSONL file, atomically."""

    def __init__(self, folder: str):
        self._folder = folder
        self._files = Metrics.counter("imgrec", "inspection_record_files")

    def process(self, batch: list[InspectedImage]):
        rows = [r.to_record() for r in batch if r.stamp is not None]
        if not rows:
            return
        rows.sort(key=lambda row: row["path"])
        data = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("utf-8")
        name = hashlib.sha256(data).hexdigest()[:32] + ".jsonl"
        storage.write_bytes_atomic(storage.join(self._folder, name), data)
        self._files.inc()


class RecordInspections(beam.PTransform):
    """[InspectedImage] -> writes the records --resume reuses (a leaf: nothing comes out)."""

    def __init__(self, config):
        super().__init__()
        self._folder = records_folder(config)

    def expand(self, inspected):
        return inspected | "WriteRecords" >> beam.ParDo(_RecordFn(self._folder))


def _load_records(folders: list[str]) -> dict:
    """Every record under `folders` -> {(path, size, stamp): INSPECTION_FIELDS values}; a file
    that cannot be read or parsed is skipped (its files are inspected again)."""
    paths = []
    for folder in folders:
        try:
            found = storage.match_under(folder, "*.jsonl")
        except (OSError, ValueError):  # Beam raises when the folder does not exist yet.
            continue
        paths += [m.path for m in found if not m.path.rsplit("/", 1)[-1].startswith(".")]
    records = {}
    values = operator.itemgetter(*INSPECTION_FIELDS)
    for _path, data in storage.read_many(paths, storage.DEFAULT_READ_CONCURRENCY):
        if isinstance(data, storage.ReadError):
            continue
        try:
            # One JSON array per file (a JSON line never holds a raw newline): faster than a
            # json.loads per line.
            text = data.decode("utf-8").strip("\n")
            rows = json.loads("[" + text.replace("\n", ",") + "]")
            # A tuple of INSPECTION_FIELDS: about half a dict's memory per file.
            parsed = [((row["path"], row["size"], row["stamp"]), values(row)) for row in rows]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
            continue
        for key, value in parsed:
            # Two records of one file version differ only in whether pixel statistics were
            # computed (a later run sampled the file for them): keep the one that has them.
            if key not in records or records[key][_STATS] is None:
                records[key] = value
    return records


class _ReuseFn(beam.DoFn):
    """[ListedFile] -> [ListedFile] still to inspect; [InspectedImage] rebuilt from records on
    the REUSED output."""

    REUSED = "reused"
    # Records reused from another output (the previous version), to be written into this one.
    CARRIED = "carried"

    def __init__(self, config):
        self._folders = reuse_sources(config)
        self._carry = bool(config.previous_version)
        self._stats_split = config.train_split if config.analyze else None
        self._stats_fraction = config.stats_sample_fraction
        self._stats_max_images = config.stats_max_images
        self._seed = config.seed
        self._reused = Metrics.counter("imgrec", "inspections_reused")
        # Sampled training images whose pixel sums come from their record (not decoded), and
        # unchanged ones whose record has none (sampled now, not then): read and decoded again.
        self._stats_reused = Metrics.counter("imgrec", "stats_reused")
        self._stats_redone = Metrics.counter("imgrec", "stats_reinspected")

    def setup(self):
        # {(path, size, stamp): inspected values}, read on first use by each DoFn instance.
        # Not a side input: Beam would pickle it to every bundle and weigh it object by object
        # for its state cache, which costs more than reading the records.
        self._records = None

    def _wants_stats(self, item: ListedFile, fraction: float) -> bool:
        return wants_stats(item, self._stats_split, fraction, self._seed)

    def process(self, batch: list[ListedFile], num_listed: int = 0):
        if self._records is None:
            self._records = _load_records(self._folders)
        records = self._records
        fraction = stats_fraction(self._stats_fraction, self._stats_max_images, num_listed)
        todo, reused, carried = [], [], []
        stats_reused = stats_redone = 0
        for item in batch:
            row = None
            if item.stamp is not None and item.size >= 0:
                row = records.get((item.path, item.size, item.stamp))
            wants = self._wants_stats(item, fraction)
            if row is None or (wants and row[_STATS] is None):
                stats_redone += row is not None
                todo.append(item)
                continue
            stats_reused += wants
            record = InspectedImage.of(item, **dict(zip(INSPECTION_FIELDS, row, strict=True)))
            if self._carry:  # As recorded, statistics included even when this run needs none.
                carried.append(record)
            if not wants:
                record = dataclasses.replace(record, stats=None)
            reused.append(record)
        if stats_reused:
            self._stats_reused.inc(stats_reused)
        if stats_redone:
            self._stats_redone.inc(stats_redone)
        if reused:
            self._reused.inc(len(reused))
            yield pvalue.TaggedOutput(self.REUSED, reused)
        if carried:
            yield pvalue.TaggedOutput(self.CARRIED, carried)
        if todo:
            yield todo


class ReuseInspections(beam.PTransform):
    """[ListedFile] -> {"todo": [ListedFile] to inspect, "reused": [InspectedImage],
    "carried": [InspectedImage] with their recorded statistics (only when reusing the previous
    version: RecordInspections writes them into this one)}.

    With `num_listed` (a singleton PCollection) the statistics sample matches InspectImages'.
    """

    def __init__(self, config, num_listed=None):
        super().__init__()
        self._config = config
        self._num_listed = num_listed

    def expand(self, listed):
        side = {}
        if self._num_listed is not None and self._config.stats_max_images:
            side["num_listed"] = pvalue.AsSingleton(self._num_listed)
        out = listed | "SplitOffUnchanged" >> beam.ParDo(
            _ReuseFn(self._config), **side
        ).with_outputs(_ReuseFn.REUSED, _ReuseFn.CARRIED, main="todo")
        return {
            "todo": out.todo,
            "reused": out[_ReuseFn.REUSED],
            "carried": out[_ReuseFn.CARRIED],
        }
