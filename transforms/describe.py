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

__all__ = ["DescribeDataset", "TooManyRejectsError", "ERROR_PREFIX"]


_SHARD_RE = re.compile(r"^(?P<split>.+)-\d{5}-of-\d{5}\.tfrecord(\.gz)?(\.idx)?$")


# What dataset_info.json lists per shard (dali_index: {"file", "num_bytes", "sha256"} of the
# shard's DALI index, with --dali_index only).
_SHARD_FIELDS = ("file", "num_examples", "num_bytes", "sha256", "dali_index")


class TooManyRejectsError(RuntimeError):
    """More than --max_bad_fraction of the listed files were rejected."""


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode("utf-8")


class _DescribeFn(beam.DoFn):
    """One element in -> the dataset's description files out (side inputs hold everything)."""

    def __init__(self, config, provenance: dict):
        self._config = config
        self._provenance = provenance

    def process(self, _, num_listed, shards, rejected, duplicates, plan, label_names, statistics):
        c = self._config
        out = c.output
        rejected = sorted(rejected, key=lambda r: (r["path"], r["reason"]))
        duplicates = sorted(duplicates, key=lambda r: r["path"])
        storage.write_bytes_atomic(storage.join(out, schema.REJECTED), _jsonl(rejected))
        storage.write_bytes_atomic(storage.join(out, schema.DUPLICATES), _jsonl(duplicates))
        bad = len(rejected) / num_listed if num_listed else 0.0
        reasons = collections.Counter(r["reason"] for r in rejected)
        if bad > c.max_bad_fraction:
            top = ", ".join(f"{k}={v}" for k, v in reasons.most_common(4))
            raise TooManyRejectsError(
                f"{ERROR_PREFIX}{len(rejected)} of {num_listed} listed files were rejected "
                f"({bad:.1%} > --max_bad_fraction {c.max_bad_fraction}; {top}); see "
                f"{storage.join(out, schema.REJECTED)}. Fix the input (wrong path or bucket?), "
                "or rerun with a higher --max_bad_fraction plus --resume (keeps the shards "
                "written) or --overwrite. No dataset_info.json was written."
            )

        by_split = collections.defaultdict(dict)
        for s in shards:
            by_split[s["split"]][s["index"]] = s
        transcoded = collections.Counter()
        formats = collections.Counter()  # records per image/format, if every shard says
        formats_known = True
        empty_sha256 = hashlib.sha256(b"").hexdigest()
        splits = {}
        for split in sorted(plan):
            n = plan[split]
            entries = []
            labels = collections.Counter()
            counted = True  # every shard says what it holds (markers of older runs may not)
            for index in range(n):
                s = by_split[split].get(index)
                if s is None:  # No file hashed to this shard: write it empty, keep the name.
                    relname = schema.shard_name(split, index, n, schema.shard_suffix(c.compression))
                    storage.write_bytes_atomic(storage.join(out, relname), b"")
                    s = {
                        "file": relname,
                        "num_examples": 0,
                        "num_bytes": 0,
                        "sha256": empty_sha256,
                        "formats": {},
                        "label_counts": {},
                    }
                    if c.dali_index:
                        idx_rel = dali_index.index_name(relname)
                        storage.write_bytes_atomic(storage.join(out, idx_rel), b"")
                        s["dali_index"] = {"file": idx_rel, "num_bytes": 0, "sha256": empty_sha256}
                transcoded.update(s.get("transcoded", {}))
                if "formats" in s:
                    formats.update(s["formats"])
                else:
                    formats_known = False
                if "label_counts" in s:
                    labels.update(s["label_counts"])
                else:
                    counted = False
                entries.append({k: s[k] for k in _SHARD_FIELDS if k in s})
            splits[split] = {
                "num_examples": sum(e["num_examples"] for e in entries),
                "num_bytes": sum(e["num_bytes"] for e in entries),
                "num_shards": n,
                "shards": entries,
            }
            if counted:  # examples per label text ("" = no label), as written
                splits[split]["label_counts"] = dict(sorted(labels.items()))
        self._remove_stale_shards(splits)
        num_written = sum(s["num_examples"] for s in splits.values())
        info = {
            "schema_version": schema.SCHEMA_VERSION,
            "num_listed": num_listed,
            "num_written": num_written,
            "num_rejected": len(rejected),
            "num_duplicates": len(duplicates),
            "label_names": list(label_names),
            "num_classes": len(label_names),
            "splits": splits,
            "rejected_by_reason": dict(sorted(reasons.items())),
            "transcoded_by_reason": dict(sorted(transcoded.items())),
            # --transcode as run (`verify` checks every record is a JPEG under "jpeg"), and the
            # records per image/format (the summary warns about non-JPEG ones).
            "transcode": c.check.transcode,
            **({"formats_written": dict(sorted(formats.items()))} if formats_known else {}),
            "dali_index": c.dali_index,
            # How records store images (reader: which decode path) and how shards are compressed.
            "store": c.store,
            "compression": c.compression,
            "feature_spec": schema.FEATURE_SPEC_JSON,
            "statistics": statistics,
            "provenance": {
                **self._provenance,
                "finished": datetime.datetime.now(datetime.UTC).isoformat(),
            },
        }
        if num_listed != info["num_written"] + info["num_rejected"] + info["num_duplicates"]:
            raise RuntimeError(
                f"{ERROR_PREFIX}accounting mismatch: listed {num_listed} != written {num_written} "
                f"+ rejected {len(rejected)} + duplicates {len(duplicates)}; this is a bug, "
                "please report it with the command line"
            )
        # Written last: its presence means the dataset is complete.
        storage.write_bytes_atomic(
            storage.join(out, schema.DATASET_INFO),
            json.dumps(info, indent=2, sort_keys=False).encode("utf-8"),
            mime_type="application/json",
        )
        yield info

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
    ):
        super().__init__()
        self._config = config
        self._provenance = provenance
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
            )
        )
