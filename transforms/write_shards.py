"""Write: one DoFn call writes one whole shard, streaming its files' bytes, then renames it into place."""

from __future__ import annotations

import collections
import hashlib
import json

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.metrics import Metrics

from pipeline import schema, storage
from transforms.image_check import ImageInfo, Rejected
from transforms.inspect_images import decoder_error
from transforms.keys import int_hash
from transforms.plan_shards import WRITER_FIELDS, writer_record
from transforms.store_modes import (
    PIXELS_REASON,
    GzipSink,
    StoredImage,
    shard_suffix,
    store_image,
)

__all__ = ["WriteShards", "plan_marker_path", "read_shard_info"]

# Shards of a resumable run record their plan here: a finished shard is reused only if the same
# files, in the same order, with the same transcode settings, would be written again.
MARKER_DIR = ".imgrec"

_PATH, _KEY, _SHA256, _TRANSCODE = (
    WRITER_FIELDS.index(f) for f in ("path", "key", "sha256", "transcode")
)
_LABEL = WRITER_FIELDS.index("label")


def plan_marker_path(output: str, split: str, index: int, num_shards: int) -> str:
    return storage.join(
        output, MARKER_DIR, "shards", f"{split}-{index:05d}-of-{num_shards:05d}.json"
    )


def read_shard_info(path: str) -> dict | None:
    """The JSON marker at `path`, or None if there is none or it is unreadable."""
    if not FileSystems.exists(path):
        return None
    try:
        return json.loads(storage.read_bytes(path))
    except (storage.ReadError, json.JSONDecodeError, UnicodeDecodeError):
        return None


class _HashingWriter:
    """A write-only file that opens its target on the first write, and counts and sha256-hashes
    what passes through. A shard with no record therefore never starts an upload (Beam's S3
    writer cannot create an empty object through a multipart upload)."""

    def __init__(self, path: str):
        self._path = path
        self._f = None
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data: bytes) -> None:
        if self._f is None:
            self._f = FileSystems.create(self._path, compression_type="uncompressed")
        self._f.write(data)
        self.sha256.update(data)
        self.num_bytes += len(data)

    @property
    def opened(self) -> bool:
        return self._f is not None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


class _WriteShardFn(beam.DoFn):
    """((split, index), [entry]) -> ShardInfo; records that fail at write time -> REJECTED.

    Entries are PlanShards' tuples; each becomes a record dict only while it is written.
    """

    REJECTED = "rejected"

    def __init__(self, config):
        self._output = config.output
        self._seed = config.seed
        self._resume = config.resume
        self._opts = config.check_options()
        self._concurrency = config.read_concurrency
        self._store = config.store
        self._compression = config.compression
        self._written = Metrics.counter("imgrec", "written")
        self._written_bytes = Metrics.counter("imgrec", "written_bytes")
        self._shards = Metrics.counter("imgrec", "shards_written")
        self._resumed = Metrics.counter("imgrec", "shards_resumed")

    def _prefetched(self, entries):
        """Yield (record, bytes, error detail) in order, `read_concurrency` reads in flight."""
        reads = storage.read_many((e[_PATH] for e in entries), self._concurrency)
        for entry, (_, result) in zip(entries, reads, strict=True):
            record = writer_record(entry)
            if isinstance(result, storage.ReadError):
                yield record, None, result.detail
            else:
                yield record, result, None

    def _stored_bytes(self, record: dict, data: bytes) -> StoredImage:
        """What to write for one file under --store, re-checked against inspection.

        Raises:
            Rejected: the bytes changed since inspection, or no longer decode/transcode.
        """
        if hashlib.sha256(data).hexdigest() != record["sha256"]:
            raise Rejected(
                "changed_during_run",
                "the file's bytes no longer match the sha256 seen at inspection",
            )
        info = ImageInfo(
            format=record["format"],
            source_format=record["source_format"],
            height=record["height"],
            width=record["width"],
            channels=record["channels"],
            transcode=record["transcode"],
        )
        return store_image(data, info, self._opts, self._store)

    def process(self, element, plan, label_names):
        (split, index), entries = element
        num_shards = plan[split]
        label_ids = {name: i for i, name in enumerate(label_names)}
        entries = sorted(entries, key=lambda e: (int_hash("order", self._seed, e[_KEY]), e[_KEY]))
        relname = schema.shard_name(split, index, num_shards, shard_suffix(self._compression))
        final = storage.join(self._output, relname)
        marker = plan_marker_path(self._output, split, index, num_shards)
        digest = hashlib.sha256(repr((self._opts, self._store, self._compression)).encode())
        for e in entries:
            # Also what an Example holds that neither the bytes nor the options decide: its
            # path, label and label id (a relabel or a new class must not keep a stale shard).
            label = e[_LABEL]
            digest.update(
                f"{e[_KEY]}\0{e[_SHA256]}\0{e[_TRANSCODE]}\0{e[_PATH]}\0{label}\0"
                f"{label_ids.get(label, -1)}\n".encode()
            )
        plan_digest = digest.hexdigest()

        if self._resume:
            previous = read_shard_info(marker)
            if previous and previous.get("plan_digest") == plan_digest and storage.exists(final):
                self._resumed.inc()
                yield previous["shard"]
                return

        tmp = storage.temp_sibling(final)
        num_examples = 0
        transcoded = collections.Counter()
        labels = collections.Counter()  # examples per label text: exact class counts for free
        out = _HashingWriter(tmp)
        sink = GzipSink(out) if self._compression == "gzip" else out
        try:
            for record, data, error in self._prefetched(entries):
                reason = "unreadable"
                if error is None:
                    try:
                        stored = self._stored_bytes(record, data)
                    except Rejected as e:
                        reason, error = e.reason, e.detail
                    except storage.StoreOutageError:
                        raise
                    except Exception as e:  # noqa: BLE001  (the per-file dead-letter boundary)
                        failure = decoder_error(record["path"], e)
                        reason, error = failure["reason"], failure["detail"]
                if error is not None:
                    Metrics.counter("imgrec", f"rejected_{reason}").inc()
                    yield pvalue.TaggedOutput(
                        self.REJECTED, {"path": record["path"], "reason": reason, "detail": error}
                    )
                    continue
                transcode = record["transcode"]
                if stored.raw:
                    transcode = ",".join(filter(None, [transcode, PIXELS_REASON]))
                for why in filter(None, transcode.split(",")):
                    transcoded[why] += 1
                example = schema.make_example(
                    encoded=stored.data,
                    image_format=stored.format,
                    height=stored.height,
                    width=stored.width,
                    channels=stored.channels,
                    label=label_ids.get(record["label"], -1),
                    label_text=record["label"],
                    filename=record["path"],
                    sha256=(
                        record["sha256"]
                        if stored.data is data
                        else hashlib.sha256(stored.data).hexdigest()
                    ),
                    transcoded_from=record["source_format"] if transcode else "",
                    transcode_reason=transcode,
                )
                _TFRecordUtil.write_record(sink, example)
                num_examples += 1
                labels[record["label"]] += 1
        finally:
            sink.close()
        if out.opened:
            storage.rename(tmp, final)
        else:  # Every file failed at write time: an empty shard keeps the planned name.
            storage.write_bytes_atomic(final, b"")
        info = {
            "split": split,
            "index": index,
            "file": relname,
            "num_examples": num_examples,
            "num_bytes": out.num_bytes,
            "sha256": out.sha256.hexdigest(),
            "transcoded": dict(transcoded),
            "label_counts": dict(sorted(labels.items())),
        }
        storage.write_bytes_atomic(
            marker, json.dumps({"plan_digest": plan_digest, "shard": info}).encode()
        )
        self._written.inc(num_examples)
        self._written_bytes.inc(out.num_bytes)
        self._shards.inc()
        yield info


class WriteShards(beam.PTransform):
    """((split, index), [entry]) -> {"shards": ShardInfo, "rejected": Reject}."""

    def __init__(self, config, plan, label_names):
        super().__init__()
        self._config = config
        self._plan = plan
        self._label_names = label_names

    def expand(self, groups):
        out = groups | "WriteShard" >> beam.ParDo(
            _WriteShardFn(self._config),
            plan=pvalue.AsSingleton(self._plan),
            label_names=pvalue.AsSingleton(self._label_names),
        ).with_outputs(_WriteShardFn.REJECTED, main="shards")
        return {"shards": out.shards, "rejected": out[_WriteShardFn.REJECTED]}
