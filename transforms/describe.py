"""Describe: write rejected.jsonl, duplicates.jsonl and, last of all, dataset_info.json."""

from __future__ import annotations

import collections
import datetime
import hashlib
import json
import re

import apache_beam as beam
from apache_beam import pvalue

from core import dali_index, schema, storage
from core.errors import ERROR_PREFIX
from transforms.describe_objects import describe_objects
from transforms.elements import ShardInfo
from transforms.near_duplicates import cluster_summary
from transforms.tiles.describe_tiles import describe_tiles

__all__ = ["DescribeDataset", "TooManyRejectsError", "ERROR_PREFIX"]


_SHARD_RE = re.compile(r"^(?P<split>.+)-\d{5}-of-\d{5}\.tfrecord(\.gz)?(\.idx)?$")
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class TooManyRejectsError(RuntimeError):
    """More than --max_bad_fraction of the listed files were rejected."""


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode("utf-8")


def _check_bad_fraction(config, num_listed: int, num_rejected: int, reasons) -> None:
    """Raise TooManyRejectsError when more than --max_bad_fraction of the files were rejected."""
    bad = num_rejected / num_listed if num_listed else 0.0
    if bad <= config.max_bad_fraction:
        return
    top = ", ".join(f"{k}={v}" for k, v in reasons.most_common(4))
    raise TooManyRejectsError(
        f"{ERROR_PREFIX}{num_rejected} of {num_listed} listed files were rejected "
        f"({bad:.1%} > --max_bad_fraction {config.max_bad_fraction}; {top}); see "
        f"{storage.join(config.output, schema.REJECTED)}. Fix the input (wrong path or bucket?), "
        "or rerun with a higher --max_bad_fraction plus --resume (keeps the shards "
        "written) or --overwrite. No dataset_info.json was written."
    )


def _split_entry(shards: list[ShardInfo]) -> dict:
    """A split's entry in dataset_info.json from its shards, in index order."""
    entries = [s.listing() for s in shards]
    entry = {
        "num_examples": sum(e["num_examples"] for e in entries),
        # Files written: fewer than records when --frames all writes a record per frame.
        "num_files": sum(s.num_examples if s.num_files is None else s.num_files for s in shards),
        "num_bytes": sum(e["num_bytes"] for e in entries),
        "num_shards": len(shards),
        "shards": entries,
    }
    # Examples per label text ("" = no label), as written, if every shard says (markers of
    # older runs may not).
    if all(s.label_counts is not None for s in shards):
        labels = collections.Counter()
        for s in shards:
            labels.update(s.label_counts)
        entry["label_counts"] = dict(sorted(labels.items()))
    if all(s.layouts is not None for s in shards):  # what the reader's dtype/bands work from
        layouts = collections.Counter()
        for s in shards:
            layouts.update(s.layouts)
        entry["pixel_layouts"] = dict(sorted(layouts.items()))
    if any(s.groups is not None for s in shards):  # --group_by: distinct groups in the split
        entry["num_groups"] = len(set().union(*(s.groups or () for s in shards)))
    return entry


def _written_totals(shards: list[ShardInfo]) -> dict:
    """dataset_info.json's records per transcode reason and, if every shard says, per format."""
    transcoded, formats = collections.Counter(), collections.Counter()
    for s in shards:
        transcoded.update(s.transcoded or {})
        formats.update(s.formats or {})
    totals = {"transcoded_by_reason": dict(sorted(transcoded.items()))}
    if all(s.formats is not None for s in shards):
        totals["formats_written"] = dict(sorted(formats.items()))
    return totals


def _check_accounting(info: dict) -> None:
    """Every listed file is written, rejected or a duplicate; anything else is a bug."""
    num_listed, num_written = info["num_listed"], info["num_written"]
    if num_listed != num_written + info["num_rejected"] + info["num_duplicates"]:
        raise RuntimeError(
            f"{ERROR_PREFIX}accounting mismatch: listed {num_listed} != written {num_written} "
            f"+ rejected {info['num_rejected']} + duplicates {info['num_duplicates']}; this is "
            "a bug, please report it with the command line"
        )


def _check_training_split(config, info: dict) -> None:
    """Fail when records were written but none to the training split the statistics need (a
    --splits mistake); a run that wrote nothing at all ends with its rejects and an empty
    dataset instead (--max_bad_fraction said so)."""
    if not config.analyze or info["statistics"] is not None or not info["num_records"]:
        return
    if info["splits"].get(config.train_split, {}).get("num_examples"):
        return
    raise ValueError(
        f"{ERROR_PREFIX}the {config.train_split!r} split is empty, so there are no statistics "
        "to compute: check --splits, or pass --no_analyze"
    )


class _DescribeFn(beam.DoFn):
    """One element in -> the dataset's description files out (side inputs hold everything)."""

    def __init__(self, config, provenance: dict):
        self._config = config
        self._provenance = provenance

    def process(
        self,
        _,
        num_listed,
        shards,
        rejected,
        duplicates,
        plan,
        label_names,
        statistics,
        unmatched=None,
        objects_changed=None,
        near_duplicates=None,
    ):
        out = self._config.output
        rejected = sorted(rejected, key=lambda r: (r["path"], r["reason"]))
        duplicates = sorted(duplicates, key=lambda r: r["path"])
        storage.write_bytes_atomic(storage.join(out, schema.REJECTED), _jsonl(rejected))
        storage.write_bytes_atomic(storage.join(out, schema.DUPLICATES), _jsonl(duplicates))
        # Files: a chip that failed (--tile, "chip" in its line) leaves its scene written.
        files_rejected = [r for r in rejected if "chip" not in r]
        reasons = collections.Counter(r["reason"] for r in files_rejected)
        _check_bad_fraction(self._config, num_listed, len(files_rejected), reasons)
        every_shard, splits = self._splits(plan, shards)
        self._remove_stale_shards(splits)
        info = self._info(
            num_listed,
            num_rejected=len(files_rejected),
            num_duplicates=len(duplicates),
            label_names=label_names,
            splits=splits,
            rejected_by_reason=dict(sorted(reasons.items())),
            written=_written_totals(every_shard),
            statistics=statistics,
        )
        if self._config.annotations is not None:
            info["annotations"] = describe_objects(
                self._config, every_shard, unmatched or [], objects_changed or []
            )
            info["feature_spec"] = {**info["feature_spec"], **schema.OBJECT_FEATURE_SPEC_JSON}
        if self._config.tiles is not None:
            info["tiles"] = describe_tiles(self._config.tiles, every_shard)
        self._near_duplicates(info, near_duplicates)
        _check_accounting(info)
        _check_training_split(self._config, info)
        # Written last: its presence means the dataset is complete.
        storage.write_bytes_atomic(
            storage.join(out, schema.DATASET_INFO),
            json.dumps(info, indent=2, sort_keys=False).encode("utf-8"),
            mime_type="application/json",
        )
        yield info

    def _near_duplicates(self, info: dict, clusters) -> None:
        """near_duplicates.jsonl (clusters across splits first) and its counts in `info`; with
        --near_duplicates off, no file (one left by an earlier run is removed)."""
        path = storage.join(self._config.output, schema.NEAR_DUPLICATES)
        if clusters is None:
            storage.delete_quietly([path])
            return
        rows = sorted(
            (c.to_dict() for c in clusters), key=lambda r: (len(r["splits"]) < 2, r["paths"])
        )
        storage.write_bytes_atomic(path, _jsonl(rows))
        info["near_duplicates"] = {
            "mode": self._config.near_duplicates,
            "threshold": self._config.near_threshold,
            **cluster_summary(rows),
        }

    def _splits(self, plan: dict, shards: list[ShardInfo]) -> tuple[list[ShardInfo], dict]:
        """(every planned shard, {split: its dataset_info.json entry}); a planned shard no file
        hashed to is written empty."""
        by_split = collections.defaultdict(dict)
        for s in shards:
            by_split[s.split][s.index] = s
        every_shard, splits = [], {}
        for split in sorted(plan):
            found = by_split[split]
            n = plan[split]
            planned = [found.get(i) or self._empty_shard(split, i, n) for i in range(n)]
            splits[split] = _split_entry(planned)
            every_shard += planned
        return every_shard, splits

    def _empty_shard(self, split: str, index: int, num_shards: int) -> ShardInfo:
        """Write the shard no file hashed to, empty, under its planned name."""
        c = self._config
        relname = schema.shard_name(split, index, num_shards, schema.shard_suffix(c.compression))
        storage.write_bytes_atomic(storage.join(c.output, relname), b"")
        empty = {"num_bytes": 0, "sha256": _EMPTY_SHA256}
        index_entry = None
        if c.dali_index:
            idx_rel = dali_index.index_name(relname)
            storage.write_bytes_atomic(storage.join(c.output, idx_rel), b"")
            index_entry = {"file": idx_rel, **empty}
        return ShardInfo(
            split, index, relname, num_examples=0, **empty, formats={}, label_counts={}, layouts={},
            dali_index=index_entry,
        )  # fmt: skip

    def _info(
        self,
        num_listed: int,
        *,
        num_rejected: int,
        num_duplicates: int,
        label_names,
        splits: dict,
        rejected_by_reason: dict,
        written: dict,
        statistics,
    ) -> dict:
        """dataset_info.json's contents (`written`: _written_totals)."""
        c = self._config
        return {
            "schema_version": schema.SCHEMA_VERSION,
            "num_listed": num_listed,
            "num_written": sum(s["num_files"] for s in splits.values()),
            "num_records": sum(s["num_examples"] for s in splits.values()),
            "num_rejected": num_rejected,
            "num_duplicates": num_duplicates,
            "label_names": list(label_names),
            "num_classes": len(label_names),
            "splits": splits,
            "rejected_by_reason": rejected_by_reason,
            "transcoded_by_reason": written["transcoded_by_reason"],
            # --transcode as run (`verify` checks every record is a JPEG under "jpeg"), and the
            # records per image/format (the summary warns about non-JPEG ones).
            "transcode": c.check.transcode,
            **{k: v for k, v in written.items() if k == "formats_written"},
            "dali_index": c.dali_index,
            # How records store images (reader: which decode path) and how shards are compressed.
            "store": c.store,
            "compression": c.compression,
            # --group_by (the spec, never a group's value), --bit_depth and --frames as run.
            "group_by": c.group_by,
            "bit_depth": c.check.bit_depth,
            "frames": c.check.frames,
            "feature_spec": schema.FEATURE_SPEC_JSON,
            "statistics": statistics,
            "provenance": {
                **self._provenance,
                "finished": datetime.datetime.now(datetime.UTC).isoformat(),
            },
        }

    def _remove_stale_shards(self, splits: dict) -> None:
        """Delete leftovers in our split folders: temp files of failed attempts, and shards of
        an earlier plan (other shard counts) that a --resume run superseded."""
        out = self._config.output
        for split, entry in splits.items():
            keep = {storage.join(out, e["file"]) for e in entry["shards"]}
            keep |= {
                storage.join(out, e["dali_index"]["file"])
                for e in entry["shards"]
                if "dali_index" in e
            }
            found = storage.match_under(storage.join(out, split), "*")
            stale = []
            for m in found:
                name = m.path.rstrip("/").rsplit("/", 1)[-1]
                if m.path in keep:
                    continue
                if name.startswith(".tmp-") or _SHARD_RE.match(name):
                    stale.append(m.path)
            storage.delete_quietly(stale)


class DescribeDataset(beam.PTransform):
    """Gathers counts, shard infos, rejects, duplicates and statistics; writes the description.

    Runs after everything it reads (side inputs), so dataset_info.json is the last file written.
    """

    def __init__(
        self,
        config,
        provenance: dict,
        *,
        num_listed,
        shards,
        rejected,
        duplicates,
        plan,
        label_names,
        statistics,
        objects=None,
        near_duplicates=None,
    ):
        super().__init__()
        self._config = config
        self._provenance = provenance
        # Annotated runs: {"unmatched": ..., "objects_changed": ...} PCollections.
        self._objects = objects
        self._near_duplicates = near_duplicates  # NearCluster; None: --near_duplicates off
        self._inputs = dict(
            num_listed=num_listed,
            shards=shards,
            rejected=rejected,
            duplicates=duplicates,
            plan=plan,
            label_names=label_names,
            statistics=statistics,
        )

    def expand(self, pbegin):
        i = self._inputs
        objects = {}
        if self._objects is not None:
            objects = {name: pvalue.AsList(pc) for name, pc in self._objects.items()}
        if self._near_duplicates is not None:
            objects["near_duplicates"] = pvalue.AsList(self._near_duplicates)
        return (
            pbegin
            | "Once" >> beam.Create([None])
            | "WriteDescription"
            >> beam.ParDo(
                _DescribeFn(self._config, self._provenance),
                num_listed=pvalue.AsSingleton(i["num_listed"]),
                shards=pvalue.AsList(i["shards"]),
                rejected=pvalue.AsList(i["rejected"]),
                duplicates=pvalue.AsList(i["duplicates"]),
                plan=pvalue.AsSingleton(i["plan"]),
                label_names=pvalue.AsSingleton(i["label_names"]),
                statistics=pvalue.AsSingleton(i["statistics"]),
                **objects,
            )
        )
