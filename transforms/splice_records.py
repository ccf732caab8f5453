"""Splice: an unchanged file's record taken from the previous version's shard (ranged read, CRC checked), not its source."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import logging
import threading

from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

from core import schema, storage
from core.shard_markers import (
    RECORDS_KEY,
    SETTINGS_KEY,
    SHARD_KEY,
    RecordLocation,
    plan_marker_path,
    read_shard_info,
)
from core.tfrecord import read_record
from transforms.elements import WriterEntry

__all__ = [
    "splice_name",
    "FALLBACK_REASONS",
    "PreviousRecords",
    "STATS_FALLBACK",
    "Spliced",
    "index_entry",
    "record_settings",
    "splice_lines",
    "statistics_lines",
]

_log = logging.getLogger(__name__)


# Two wanted records of one previous shard closer than this are fetched by one read (the bytes
# between them read and dropped): on a bucket a GET's latency costs more than 1 MB of
# transfer, and locally one sequential read beats many seeks.
_COALESCE_GAP_BYTES = 1 << 20
# ... but one read holds at most this much (bounded memory per writer thread).
_MAX_READ_BYTES = 64 << 20
# TFRecord framing: 8-byte length + 4-byte masked crc32c before the data, 4-byte crc after.
_FRAME_OVERHEAD = 16

# Each process reads the previous version's record index once (one GET per shard marker), not
# once per shard it writes: (previous, settings, compression) -> PreviousRecords._read_index().
_LOADED: dict[tuple, tuple[dict, str | None]] = {}
_LOCK = threading.Lock()

# Why records of unchanged files were read from source after all (counter suffix -> text of
# the summary line), counted per record.
FALLBACK_REASONS = {
    "gzip": "--compression gzip shards cannot be read by byte range",
    "no_index": "the previous version records no record offsets (written by an older imgrec)",
    "settings": "the previous version was written with other options or software",
    "missing": "a previous shard is missing or unreadable",
    "crc": "a previous shard failed its record CRC check (damaged)",
}


# Why an unchanged image was decoded again for the statistics.
STATS_FALLBACK = (
    "the previous version holds no pixel sums for them (the sample grew: fewer files listed, "
    "other --stats_* options, or that version was converted with --no_analyze)"
)


def record_settings(check_options, store: str, compression: str, software: dict) -> str:
    """sha256 of what decides a record's bytes (and offsets) besides its file, path and label:
    the check options, --store, --compression and the writer's software (writer_software)."""
    settings = (check_options, store, compression, sorted(software.items()))
    return hashlib.sha256(repr(settings).encode()).hexdigest()


def splice_name(entry: WriterEntry) -> str:
    """What a record is found by in the next run's index: its file's path; a chip's (--tile)
    also names its window, so each chip of an unchanged scene is spliced on its own."""
    if entry.chip is None:
        return entry.path
    c = entry.chip
    return f"{entry.path}\0tile={c.y},{c.x},{c.height}x{c.width}"


def index_entry(
    entry: WriterEntry, label_id: int, offset: int, length: int, fmt: str, transcode: str
) -> RecordLocation:
    """The marker line of the record written from `entry` at `offset`."""
    return RecordLocation(
        splice_name(entry), entry.sha256, entry.transcode, entry.label, label_id, offset, length, fmt,
        transcode,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Spliced:
    """A record taken from the previous version: `framed` (the whole TFRecord frame, copied as
    it is) or `example` (a serialized Example rebuilt from the previous record's image bytes)."""

    framed: bytes | None
    example: bytes | None
    format: str
    transcode: str  # image/transcode_reason (the source's reasons and the --store one)

    def layout(self) -> str:
        """Its pixel layout (a photo's: 8-bit samples; array images are never spliced)."""
        from tensorflow.core.example import example_pb2  # as _relabel reads one

        example = self.example if self.example is not None else _payload(self.framed)
        feature = example_pb2.Example.FromString(example).features.feature
        return schema.pixel_layout("", feature[schema.CHANNELS].int64_list.value[0])


class PreviousRecords:
    """The previous version's record locations, loaded once per worker on first use."""

    def __init__(self, previous: str, settings: str, compression: str):
        self._previous = previous
        self._settings = settings
        self._compression = compression
        self._spliced = Metrics.counter("imgrec", "records_spliced")
        self._rebuilt = Metrics.counter("imgrec", "records_rebuilt")

    def _load(self) -> tuple[dict, str | None]:
        """(path -> (shard file or None, entry, refusal reason or None), the reason no record
        of the previous version can serve, if one holds for all), cached per process."""
        key = (self._previous, self._settings, self._compression)
        with _LOCK:
            if key not in _LOADED:
                _LOADED[key] = self._read_index()
            return _LOADED[key]

    def _read_index(self) -> tuple[dict, str | None]:
        if self._compression == "gzip":
            return {}, "gzip"
        index, blanket = {}, None
        info = json.loads(storage.read_bytes(storage.join(self._previous, schema.DATASET_INFO)))
        for split, entry in info["splits"].items():
            shards = entry["shards"]
            for i, shard in enumerate(shards):  # listed in index order (describe)
                if not shard["num_examples"]:
                    continue
                marker = read_shard_info(plan_marker_path(self._previous, split, i, len(shards)))
                if not marker or RECORDS_KEY not in marker:
                    blanket = "no_index"  # its files are unknown: any file may be one of them
                    continue
                usable = (
                    marker.get(SETTINGS_KEY) == self._settings
                    and marker[SHARD_KEY].get("file") == shard["file"]
                    and marker[SHARD_KEY].get("sha256") == shard["sha256"]
                )
                for rec in map(RecordLocation._make, marker[RECORDS_KEY]):
                    if usable:
                        index[rec.path] = (shard["file"], rec, None)
                    else:
                        index[rec.path] = (None, rec, "settings")
        return index, blanket

    def _refuse(self, reason: str, count: int) -> None:
        Metrics.counter("imgrec", f"splice_refused_{reason}").inc(count)

    def fetch(self, records: list[WriterEntry], label_ids: dict) -> list[Spliced | None]:
        """For each writer entry (in shard order): its record from the previous version, or
        None to read its source (a new or changed file, or the previous shard cannot serve)."""
        index, blanket = self._load()
        found: list[Spliced | None] = [None] * len(records)
        wanted = collections.defaultdict(list)  # previous shard file -> [(location, position)]
        for i, record in enumerate(records):
            hit = index.get(splice_name(record))
            if hit is None:
                if blanket:  # (a new file counts here too: the previous index cannot tell)
                    self._refuse(blanket, 1)
                continue
            shard_file, entry, refused = hit
            if entry.sha256 != record.sha256 or entry.transcode != record.transcode:
                continue  # the file changed: its source is read
            if refused:
                self._refuse(refused, 1)
                continue
            wanted[shard_file].append((entry, i))
        for shard_file, items in wanted.items():
            frames = self._read_frames(shard_file, sorted(e.offset for e, _ in items), items)
            if frames is None:
                continue
            for entry, i in items:
                framed = frames[entry.offset]
                record = records[i]
                label_id = label_ids.get(record.label, -1)
                if entry.label == record.label and entry.label_id == label_id:
                    found[i] = Spliced(framed, None, entry.format, entry.stored_transcode)
                    self._spliced.inc()
                else:  # the label (or its id) is the run's: rebuild from the image bytes
                    example = _relabel(_payload(framed), record.label, label_id)
                    found[i] = Spliced(None, example, entry.format, entry.stored_transcode)
                    self._rebuilt.inc()
        return found

    def _read_frames(self, shard_file: str, offsets: list[int], items) -> dict | None:
        """{offset: framed bytes} of the records at `offsets` of the previous shard, each
        frame's length and data CRCs checked; None (counted, logged) if the shard cannot serve."""
        lengths = {e.offset: e.length for e, _ in items}
        path = storage.join(self._previous, shard_file)
        spans = []  # [start, end) byte ranges, each one read
        for off in offsets:
            end = off + lengths[off]
            if (
                spans
                and off - spans[-1][1] <= _COALESCE_GAP_BYTES
                and end - spans[-1][0] <= _MAX_READ_BYTES
            ):
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([off, end])
        frames = {}
        try:
            with FileSystems.open(path, compression_type="uncompressed") as f:
                for start, end in spans:
                    f.seek(start)
                    buf = f.read(end - start)
                    for off in offsets:
                        if start <= off < end:
                            frame = buf[off - start : off - start + lengths[off]]
                            _check_frame(frame, off)
                            frames[off] = frame
        except ValueError as e:
            self._give_up("crc", shard_file, len(items), e)
            return None
        except Exception as e:  # noqa: BLE001 - any read failure: the sources are read instead
            if isinstance(e, storage.StoreOutageError):
                raise
            self._give_up("missing", shard_file, len(items), e)
            return None
        return frames

    def _give_up(self, reason: str, shard_file: str, count: int, e: BaseException) -> None:
        self._refuse(reason, count)
        _log.warning(
            "imgrec: %s of %s cannot serve its %d records (%s: %s); reading their sources",
            shard_file, self._previous, count, type(e).__name__, str(e)[:200],
        )  # fmt: skip


def _check_frame(frame: bytes, offset: int) -> None:
    """Raise ValueError unless `frame` is exactly one TFRecord frame whose CRCs match."""
    try:
        data = read_record(io.BytesIO(frame))
    except ValueError as e:  # Beam's text ends with a hex dump of the frame: left out
        raise ValueError(f"the record at byte {offset}: {str(e).partition(':')[0]}") from None
    if data is None or len(data) + _FRAME_OVERHEAD != len(frame):
        raise ValueError(f"the {len(frame)} bytes at byte {offset} are not one whole record")


def _payload(frame: bytes) -> bytes:
    """The serialized Example of a TFRecord frame: after its length and the length's CRC, before
    its own CRC."""
    return frame[12:-4]


def _relabel(data: bytes, label_text: str, label_id: int) -> bytes:
    """The Example `data` with another label, serialized as the writer serializes it."""
    from tensorflow.core.example import example_pb2

    feature = example_pb2.Example.FromString(data).features.feature

    def b(key: str) -> bytes:
        return feature[key].bytes_list.value[0]

    def i(key: str) -> int:
        return feature[key].int64_list.value[0]

    return schema.make_example(
        encoded=b(schema.ENCODED),
        image_format=b(schema.FORMAT).decode(),
        height=i(schema.HEIGHT),
        width=i(schema.WIDTH),
        channels=i(schema.CHANNELS),
        label=label_id,
        label_text=label_text,
        filename=b(schema.FILENAME).decode(),
        sha256=b(schema.SHA256).decode(),
        transcoded_from=b(schema.TRANSCODED_FROM).decode(),
        transcode_reason=b(schema.TRANSCODE_REASON).decode(),
        # The optional features a photo's record may hold, as they were.
        extra={
            **({schema.GROUP: b(schema.GROUP).decode()} if schema.GROUP in feature else {}),
            **({schema.PHASH: i(schema.PHASH)} if schema.PHASH in feature else {}),
        },
    )


def splice_lines(config, result) -> list[str]:
    """After a versioned rerun: the summary's lines about records taken from the previous
    version's shards, and why any unchanged file's source was read after all (from the job's
    imgrec counters); none for a first or --full run."""
    if config.full or not config.previous_version:
        return []
    counts: dict[str, int] = collections.Counter()
    try:
        found = result.metrics().query(MetricsFilter().with_namespace("imgrec"))["counters"]
    except (AttributeError, NotImplementedError, KeyError):  # a runner without metrics
        return []
    for c in found:
        value = c.committed if c.committed is not None else c.attempted
        counts[c.key.metric.name] += value or 0
    spliced, rebuilt = counts["records_spliced"], counts["records_rebuilt"]
    lines = []
    if spliced or rebuilt:
        lines.append(
            f"  spliced     {spliced + rebuilt:>7}   records from the previous version's shards "
            f"(sources not read), {rebuilt} rebuilt with this run's label ids"
        )
    for reason, text in FALLBACK_REASONS.items():
        if counts[f"splice_refused_{reason}"]:
            n = counts[f"splice_refused_{reason}"]
            lines.append(f"  not spliced {n:>7}   records read from source: {text}")
    return lines + statistics_lines(counts)


def statistics_lines(counts) -> list[str]:
    """The summary's lines about pixel statistics a rerun took from the previous version's
    per-image sums (transforms/reuse_inspections.py), and about unchanged images it had to read
    and decode again for them, and why."""
    lines = []
    if counts.get("stats_reused"):
        lines.append(
            f"  statistics  {counts['stats_reused']:>7}   unchanged images' pixel sums from the "
            "previous version (not decoded again)"
        )
    if counts.get("stats_reinspected"):
        lines.append(
            f"  decoded     {counts['stats_reinspected']:>7}   unchanged images read and decoded "
            f"again for statistics: {STATS_FALLBACK}"
        )
    return lines
