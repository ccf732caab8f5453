"""Write: one DoFn call writes one whole shard, streaming its files' bytes, then renames it into place.

An incremental `--versioned` run copies a shard from the previous version instead when that
shard's plan digest and the software that wrote it are the same (see `_copy_previous`).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import hashlib
import io
import json
import logging
import os
import shutil
from importlib import metadata

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from core import dali_index, names, schema, storage
from core.rejects import Rejected, decoder_error, make_reject
from core.shard_markers import (
    RECORDS_KEY,
    SETTINGS_KEY,
    SHARD_KEY,
    plan_marker_path,
    read_shard_info,
)
from core.tfrecord import write_record
from transforms.elements import ShardInfo, WriterEntry
from transforms.images.arrays import ARRAY_FORMATS
from transforms.images.check import ImageInfo
from transforms.images.store_modes import PIXELS_REASON, StoredImage, store_records
from transforms.keys import int_hash
from transforms.shard_objects import ShardObjects
from transforms.shard_sinks import GzipSink, HashingWriter, discard
from transforms.splice_records import PreviousRecords, index_entry, record_settings
from transforms.tiles.chip_records import chip_record, reads_by_window

__all__ = ["GzipSink", "WriteShards", "writer_software"]

_log = logging.getLogger(__name__)

# Bump whenever the bytes this writer produces for one plan change (record layout, what an
# Example holds, how a file is stored): a shard written under another value is never copied
# into a new version, because a from-scratch run would now write other bytes for it.
WRITER_FORMAT = 2  # 2: float64 TIFF samples kept, geo/nodata written
# The libraries whose versions can change a shard's bytes for the same plan: protobuf
# serialises the Examples, TensorFlow's protos define them, Pillow re-encodes transcoded files.
_BYTE_DECIDING_DISTS = ("protobuf", "tensorflow", "pillow")
# os.link's errors that mean "no hard link here" (another filesystem, links not supported or
# not allowed, too many links): the bytes are copied instead. Anything else is a real error.
_NO_HARD_LINK = (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EMLINK, errno.EACCES)
# Read size while hashing a copied shard: big sequential reads, bounded memory.
_HASH_CHUNK_BYTES = 8 << 20


def writer_software() -> dict:
    """What decides a shard's bytes besides its plan: the writer format, the Example schema
    version and the versions of the libraries that encode it (recorded in each shard marker)."""
    found = {"writer_format": WRITER_FORMAT, "schema_version": schema.SCHEMA_VERSION}
    for dist in _BYTE_DECIDING_DISTS:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _file_digest(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of the file at `path`, read whole."""
    digest, size = hashlib.sha256(), 0
    with FileSystems.open(path, compression_type="uncompressed") as f:
        while chunk := f.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _copy_file(src: str, dst: str) -> None:
    """Copy `src` to the new name `dst`: a hard link locally, a server-side copy on buckets.

    A hard link is safe because nothing imgrec does writes into an existing shard file: shards
    are written under a fresh temporary name and renamed over (which replaces the directory
    entry, not the file), and pruning a version unlinks its names, leaving the other version's
    link and the bytes in place. (A symlink would not survive that prune.)
    """
    if storage.is_local(src) and storage.is_local(dst):
        os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
        try:
            os.link(src, dst)
        except OSError as e:
            if e.errno not in _NO_HARD_LINK:
                raise
            shutil.copyfile(src, dst)
        return
    storage.with_retries(lambda: FileSystems.copy([src], [dst]), dst)


@dataclasses.dataclass(frozen=True)
class _Shard:
    """One planned shard: where it goes and the digest of what it will hold."""

    split: str
    index: int
    num_shards: int
    relname: str  # its file, relative to the output
    final: str  # its file
    marker: str  # its plan marker
    plan_digest: str

    @property
    def shard_id(self) -> tuple[str, int, int]:
        return self.split, self.index, self.num_shards


def _plan_digest(settings: tuple, entries: list[WriterEntry], label_ids: dict) -> str:
    """sha256 of the settings and of each file's part of its Example: a shard is reused (resume)
    or copied (versions) only for the same digest."""
    digest = hashlib.sha256(repr(settings).encode())
    for e in entries:
        # Also what an Example holds that neither the bytes nor the options decide: its
        # path, label and label id (a relabel or a new class must not keep a stale shard).
        digest.update(
            f"{e.key}\0{e.sha256}\0{e.transcode}\0{e.path}\0{e.label}\0"
            f"{label_ids.get(e.label, -1)}\n".encode()
        )
    return digest.hexdigest()


def _example(
    entry: WriterEntry, data: bytes, stored: StoredImage, label_id: int, objects: dict | None
):
    """(serialized Example, its transcode reasons) of one file stored as `stored`; `objects`:
    its object and mask features (annotated runs)."""
    transcode = entry.transcode
    if stored.raw:
        transcode = ",".join(filter(None, [transcode, PIXELS_REASON]))
    example = schema.make_example(
        encoded=stored.data,
        image_format=stored.format,
        height=stored.height,
        width=stored.width,
        channels=stored.channels,
        label=label_id,
        label_text=entry.label,
        filename=names.filename_bytes(entry.path),
        sha256=entry.sha256 if stored.data is data else hashlib.sha256(stored.data).hexdigest(),
        transcoded_from=entry.source_format if transcode else "",
        transcode_reason=transcode,
        # Its image's own optional features (arrays.py), its --group_by group and its pHash.
        extra={
            **(stored.features or {}),
            **({schema.GROUP: entry.group} if entry.group else {}),
            **({schema.PHASH: entry.phash} if entry.phash is not None else {}),
            **(objects or {}),
        },
    )
    return example, transcode


def _framed(example: bytes) -> bytes:
    """`example` as one TFRecord frame."""
    frame = io.BytesIO()
    write_record(frame, example)
    return frame.getvalue()


class _ShardContents:
    """What one shard's write has put in it so far: counts, record locations, DALI index lines."""

    def __init__(self, with_dali_index: bool):
        self._with_dali_index = with_dali_index
        self.num_examples = 0
        self.num_files = 0  # files written (a file may become several records: --frames all)
        self.groups = set()  # --group_by: image/group of its records
        self.transcoded = collections.Counter()
        self.formats = collections.Counter()  # records per image/format (the summary's warning)
        self.labels = collections.Counter()  # examples per label text: exact class counts
        self.layouts = collections.Counter()  # records per pixel layout (dtype x channels)
        self.idx_lines = []  # --dali_index: one line per record, at its offset in the shard
        self.located = []  # each record's RecordLocation: where the next run finds it
        self.objects = None  # annotated runs: the shard's ObjectTally as a dict
        self.chips = None  # --tile: chips written, and skipped per scene (ShardInfo.chips)

    def count_chip(self, entry: WriterEntry, written: bool) -> None:
        self.chips = self.chips or {"written": 0, "skipped": {}}
        if written:
            self.chips["written"] += 1
        else:
            skipped = self.chips["skipped"]
            skipped[entry.path] = skipped.get(entry.path, 0) + 1

    def add(self, entry: WriterEntry, label_id: int, offset: int, frame_length: int, fmt, why):
        """Count the record of `entry` whose frame (`frame_length` bytes) starts at `offset`."""
        # (frames: the index holds one record per file; chips: one per window)
        if entry.chip is not None or entry.source_format not in ARRAY_FORMATS:
            self.located.append(index_entry(entry, label_id, offset, frame_length, fmt, why))
        if self._with_dali_index:
            size = frame_length - dali_index.RECORD_OVERHEAD
            self.idx_lines.append(dali_index.index_line(offset, size))
        self.transcoded.update(filter(None, why.split(",")))
        self.num_examples += 1
        if entry.group:
            self.groups.add(entry.group)
        self.formats[fmt] += 1
        self.labels[entry.label] += 1


class _WriteShardFn(beam.DoFn):
    """((split, index), [WriterEntry]) -> ShardInfo; files that fail at write time -> REJECTED."""

    REJECTED = "rejected"
    OBJECTS_CHANGED = "objects_changed"

    def __init__(self, config):
        self._output = config.output
        self._annotations = config.annotations
        self._seed = config.seed
        self._resume = config.resume
        self._opts = config.check
        self._concurrency = config.read_concurrency
        self._store = config.store
        self._compression = config.compression
        self._dali_index = config.dali_index
        self._group_by = config.group_by
        self._tiles = config.tiles
        self._written = Metrics.counter("imgrec", "written")
        self._written_bytes = Metrics.counter("imgrec", "written_bytes")
        self._shards = Metrics.counter("imgrec", "shards_written")
        self._resumed = Metrics.counter("imgrec", "shards_resumed")
        self._previous = config.previous_version
        self._copied = Metrics.counter("imgrec", "shards_copied")
        self._copy_refused = Metrics.counter("imgrec", "shard_copies_refused")

    def setup(self):
        self._software = writer_software()
        self._previous_shards = None  # {relname: dataset_info shard entry}, read on first use
        # --tile decides which chips a record holds and which are skipped: part of the settings.
        check = self._opts if self._tiles is None else (self._opts, self._tiles)
        self._record_settings = record_settings(
            check, self._store, self._compression, self._software
        )
        self._splicer = None
        # Annotated records are written whole: a splice would not count their objects.
        if (
            self._previous and self._annotations is None
        ):  # unchanged files' records come from its shards (splice_records)
            self._splicer = PreviousRecords(
                self._previous, self._record_settings, self._compression
            )

    def process(self, element, plan, label_names):
        (split, index), entries = element
        label_ids = {name: i for i, name in enumerate(label_names)}
        entries = sorted(entries, key=lambda e: (int_hash("order", self._seed, e.key), e.key))
        shard = self._shard(split, index, plan[split], entries, label_ids)
        resumed = self._resumed_shard(shard) if self._resume else None
        if resumed is not None:
            self._resumed.inc()
            yield resumed
            return
        copied = self._copy_previous(shard, len(entries)) if self._previous else None
        if copied is not None:
            info, located = copied
            self._write_marker(shard, info, located)
            self._copied.inc()
            yield info
            return
        info, located = yield from self._write(shard, entries, label_ids)
        self._write_marker(shard, info, located)
        self._written.inc(info.num_examples)
        self._written_bytes.inc(info.num_bytes)
        self._shards.inc()
        yield info

    def _shard(self, split, index, num_shards, entries, label_ids) -> _Shard:
        relname = schema.shard_name(
            split, index, num_shards, schema.shard_suffix(self._compression)
        )
        settings = (self._opts, self._store, self._compression)
        if self._dali_index:  # (only then: the default run's digests stay what they were)
            settings += ("dali_index",)
        if self._annotations is not None:  # any annotation changed: every shard rewritten
            settings += ("annotations", self._annotations.fingerprint)
        if self._tiles is not None:
            settings += ("tiles", self._tiles)
        return _Shard(
            split=split,
            index=index,
            num_shards=num_shards,
            relname=relname,
            final=storage.join(self._output, relname),
            marker=plan_marker_path(self._output, split, index, num_shards),
            plan_digest=_plan_digest(settings, entries, label_ids),
        )

    def _resumed_shard(self, shard: _Shard) -> ShardInfo | None:
        """The ShardInfo of `shard` written by an earlier attempt of this plan, if it is in place."""
        previous = read_shard_info(shard.marker)
        if (
            previous
            and previous.get("plan_digest") == shard.plan_digest
            and storage.exists(shard.final)
            and (not self._dali_index or storage.exists(dali_index.index_name(shard.final)))
        ):
            return ShardInfo.from_dict(previous[SHARD_KEY])
        return None

    def _recorded_shards(self) -> dict:
        """The previous version's shard entries from its dataset_info.json, by file name."""
        if self._previous_shards is None:
            info = json.loads(storage.read_bytes(storage.join(self._previous, schema.DATASET_INFO)))
            self._previous_shards = {
                shard["file"]: shard
                for entry in info["splits"].values()
                for shard in entry["shards"]
            }
        return self._previous_shards

    def _copy_previous(self, shard: _Shard, num_entries: int) -> tuple | None:
        """Copy the previous version's shard into this output when it was written from the same
        plan by the same software: (its ShardInfo, its marker's record locations or None), or
        None to write it.

        The copy goes to a temporary name, is checked against the size and sha256 the previous
        dataset_info.json records for it, and only then renamed into place.
        """
        previous = read_shard_info(plan_marker_path(self._previous, *shard.shard_id))
        if (
            not previous
            or previous.get("plan_digest") != shard.plan_digest
            or previous.get("software") != self._software
        ):
            return None
        info = ShardInfo.from_dict(previous[SHARD_KEY])
        recorded = self._recorded_shards().get(shard.relname)
        fields = ("file", "num_examples", "num_bytes", "sha256")
        if self._dali_index:
            fields += ("dali_index",)
        # A shard some of whose files failed at write time is written again: their rejects
        # must be reported by this run too.
        listing = info.listing()
        if (
            recorded is None
            or any(recorded.get(k) != listing.get(k) for k in fields)
            or info.num_examples != num_entries
        ):
            return None
        # The DALI index first (the shard's own name last, as in a write): each file is copied
        # to a temporary name, checked, then renamed into place.
        files = [(shard.relname, info.num_bytes, info.sha256)]
        if self._dali_index:
            idx = info.dali_index
            files.insert(0, (idx["file"], idx["num_bytes"], idx["sha256"]))
        if not all(self._copy_checked(*file) for file in files):
            return None
        # The same bytes: the previous marker's record offsets hold for the copy too.
        return info, previous.get(RECORDS_KEY)

    def _copy_checked(self, rel: str, num_bytes: int, sha256: str) -> bool:
        """Copy the previous version's file `rel` into this output, checked against the size
        and sha256 its dataset_info.json records; False (nothing left behind) on a mismatch."""
        final = storage.join(self._output, rel)
        if not num_bytes:
            storage.write_bytes_atomic(final, b"")
            return True
        tmp = storage.temp_sibling(final)
        source = storage.join(self._previous, rel)
        if not storage.exists(source):  # deleted by hand: written anew, not a failed job
            self._copy_refused.inc()
            _log.warning("imgrec: %s is missing; writing the shard anew", source)
            return False
        _copy_file(source, tmp)
        found = _file_digest(tmp)
        if found != (num_bytes, sha256):
            storage.delete_quietly([tmp])
            self._copy_refused.inc()
            _log.warning(
                "imgrec: %s of %s has %d bytes with sha256 %s, its dataset_info.json records "
                "%d and %s; writing the shard anew instead of copying it",
                rel, self._previous, found[0], found[1], num_bytes, sha256,
            )  # fmt: skip
            return False
        storage.rename(tmp, final)
        return True

    def _write(self, shard: _Shard, entries: list[WriterEntry], label_ids: dict):
        """Write `shard` from its files (a generator: yields the REJECTED outputs of files that
        fail now); returns (its ShardInfo, its RecordLocations)."""
        tmp = storage.temp_sibling(shard.final)
        out = HashingWriter(tmp)
        sink = GzipSink(out) if self._compression == "gzip" else out
        contents = _ShardContents(self._dali_index)
        objects = ShardObjects(self._annotations) if self._annotations is not None else None
        try:
            for entry, data, error, splice in self._prefetched(entries, label_ids):
                label_id = label_ids.get(entry.label, -1)
                if splice is not None:  # the previous version's record: no source read
                    frame = splice.framed
                    if frame is None:  # rebuilt with this run's label id
                        frame = _framed(splice.example)
                    contents.add(
                        entry, label_id, out.num_bytes, len(frame), splice.format, splice.transcode
                    )
                    contents.layouts[splice.layout()] += 1
                    contents.num_files += entry.chip is None or entry.chip.carrier
                    if entry.chip is not None:
                        contents.count_chip(entry, written=True)
                    sink.write(frame)
                    continue
                records, reject = self._stored_or_reject(entry, data, error)
                extras, reject = _with_objects(objects, entry, data, records, reject)
                # A scene is one file, counted by its first chip (a failed chip is a line of
                # rejected.jsonl naming it, not a rejected file: the scene's header was good).
                counts_file = entry.chip is None or entry.chip.carrier
                if reject is not None:
                    Metrics.counter("imgrec", f"rejected_{reject['reason']}").inc()
                    if entry.chip is not None:
                        reject["chip"] = [entry.chip.x, entry.chip.y]
                        contents.num_files += counts_file
                    yield pvalue.TaggedOutput(self.REJECTED, reject)
                    continue
                contents.num_files += counts_file
                if entry.chip is not None:
                    contents.count_chip(entry, written=bool(records))
                for stored, (extra, changes) in zip(records, extras, strict=True):
                    for change in changes:
                        yield pvalue.TaggedOutput(self.OBJECTS_CHANGED, change.to_dict())
                    example, why = _example(entry, data, stored, label_id, extra)
                    frame_length = len(example) + dali_index.RECORD_OVERHEAD
                    contents.add(entry, label_id, out.num_bytes, frame_length, stored.format, why)
                    contents.layouts[stored.layout()] += 1
                    write_record(sink, example)
        except BaseException:
            discard(sink, out, tmp)
            raise
        sink.close()
        if objects is not None:
            contents.objects = objects.tally.to_dict()
        return self._finish(shard, tmp, out, contents), contents.located

    def _finish(self, shard: _Shard, tmp: str, out, contents: _ShardContents) -> ShardInfo:
        """Write the DALI index (--dali_index), rename the shard into place; its ShardInfo."""
        written_index = None
        if self._dali_index:
            # Before the shard's rename: a shard in place under a finished marker always has its
            # index (the marker, written last, is what --resume trusts).
            body = b"".join(contents.idx_lines)
            idx_rel = dali_index.index_name(shard.relname)
            storage.write_bytes_atomic(storage.join(self._output, idx_rel), body)
            written_index = {
                "file": idx_rel,
                "num_bytes": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
            }
        if out.opened:
            storage.rename(tmp, shard.final)
        else:  # Every file failed at write time: an empty shard keeps the planned name.
            storage.write_bytes_atomic(shard.final, b"")
        return ShardInfo(
            split=shard.split,
            index=shard.index,
            file=shard.relname,
            num_examples=contents.num_examples,
            num_files=contents.num_files,
            groups=sorted(contents.groups) if self._group_by else None,
            num_bytes=out.num_bytes,
            sha256=out.sha256.hexdigest(),
            transcoded=dict(contents.transcoded),
            formats=dict(sorted(contents.formats.items())),
            label_counts=dict(sorted(contents.labels.items())),
            layouts=dict(sorted(contents.layouts.items())),
            dali_index=written_index,
            objects=contents.objects,
            chips=contents.chips,
        )

    def _prefetched(self, entries: list[WriterEntry], label_ids: dict):
        """Yield (entry, bytes, error detail, Spliced or None) in order, `read_concurrency`
        reads in flight; a record spliced from the previous version reads no source."""
        spliced = [None] * len(entries)
        if self._splicer is not None:
            spliced = self._splicer.fetch(entries, label_ids)
        unread = [
            s is not None or reads_by_window(e) for e, s in zip(entries, spliced, strict=True)
        ]
        reads = storage.read_many(
            (e.path for e, skip in zip(entries, unread, strict=True) if not skip),
            self._concurrency,
        )
        for entry, splice, skip in zip(entries, spliced, unread, strict=True):
            if skip:  # spliced, or a chip read by window (chip_records.py)
                yield entry, None, None, splice
                continue
            _, result = next(reads)
            if isinstance(result, storage.ReadError):
                yield entry, None, result.detail, None
            else:
                yield entry, result, None, None

    def _stored_or_reject(self, entry: WriterEntry, data, error):
        """([StoredImage], None), or (None, Reject) for a file that failed its read (`error`) or
        fails now: the per-file dead-letter boundary of the writer."""
        reason = "unreadable"
        if error is None:
            try:
                return self._stored_bytes(entry, data), None
            except Rejected as e:
                reason, error = e.reason, e.detail
            except storage.StoreOutageError:
                raise
            except Exception as e:  # noqa: BLE001  (the per-file dead-letter boundary)
                failure = decoder_error(entry.path, e)
                reason, error = failure["reason"], failure["detail"]
        return None, make_reject(entry.path, reason, error)

    def _stored_bytes(self, entry: WriterEntry, data: bytes) -> list[StoredImage]:
        """The records to write for one file under --store, re-checked against inspection.

        Raises:
            Rejected: the bytes changed since inspection, or no longer decode/transcode.
        """
        if entry.chip is not None:  # None: skipped (--tile_min_valid)
            stored = chip_record(entry, data, self._opts, self._tiles.min_valid)
            return [stored] if stored is not None else []
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise Rejected(
                "changed_during_run",
                "the file's bytes no longer match the sha256 seen at inspection",
            )
        info = ImageInfo(
            format=entry.format,
            source_format=entry.source_format,
            height=entry.height,
            width=entry.width,
            channels=entry.channels,
            transcode=entry.transcode,
        )
        return store_records(data, info, self._opts, self._store)

    def _write_marker(self, shard: _Shard, info: ShardInfo, records: list | None) -> None:
        body = {
            "plan_digest": shard.plan_digest,
            SHARD_KEY: info.to_dict(),
            "software": self._software,
        }
        if records is not None:
            body[SETTINGS_KEY] = self._record_settings
            body[RECORDS_KEY] = records
        storage.write_bytes_atomic(shard.marker, json.dumps(body).encode())


class WriteShards(beam.PTransform):
    """((split, index), [WriterEntry]) -> {"shards": ShardInfo, "rejected": Reject}, and with
    annotations "objects_changed": ObjectChange dicts (objects_changed.jsonl)."""

    def __init__(self, config, plan, label_names):
        super().__init__()
        self._config = config
        self._plan = plan
        self._label_names = label_names

    def expand(self, groups):
        annotated = self._config.annotations is not None
        tags = (_WriteShardFn.REJECTED,) + ((_WriteShardFn.OBJECTS_CHANGED,) if annotated else ())
        out = groups | "WriteShard" >> beam.ParDo(
            _WriteShardFn(self._config),
            plan=pvalue.AsSingleton(self._plan),
            label_names=pvalue.AsSingleton(self._label_names),
        ).with_outputs(*tags, main="shards")
        written = {"shards": out.shards, "rejected": out[_WriteShardFn.REJECTED]}
        if annotated:
            written["objects_changed"] = out[_WriteShardFn.OBJECTS_CHANGED]
        return written


def _with_objects(objects: ShardObjects | None, entry: WriterEntry, data, records, reject):
    """([(object features, changes)] per record, reject): the file's objects and mask, or a
    reject when its --masks file fails."""
    if reject is not None or records is None:
        return None, reject
    if objects is None:
        return [(None, ())] * len(records), None
    try:
        return [objects.features(entry, data, stored) for stored in records], None
    except Rejected as e:
        return None, make_reject(entry.path, e.reason, e.detail)
