"""Golden values and edge cases of split/shard/sample hashing and shard planning: the mutants a
mutation run (bench/MUTATION.md) found alive after tests/test_planning_guards.py.

The hash values below are part of the output contract: a change to the hash (its purpose salt,
byte order, or the key it reads) silently moves every user's files to other splits and shards,
so a rerun would no longer be byte-identical to the previous version.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.unit.test_transforms import _config, _record
from transforms import keys
from transforms.elements import ListedFile, WriterEntry
from transforms.keys import assign_split, int_hash, unit_hash, wants_stats
from transforms.plan_shards import PlanShards, _batch_totals, _ConcatFn, _SplitTotals


def _listed(split: str, key: str) -> ListedFile:
    return ListedFile(f"/in/{key}", key, "", split, -1, None)


SPLITS_3 = (("train", 0.7), ("validation", 0.2), ("test", 0.1))


def test_hashes_are_pinned_across_releases():
    # sha256 of "purpose\0seed\0key", first 8 bytes big-endian.
    assert int_hash("split", 0, "cls/00001.jpg") == 14847323563467580899
    assert int_hash("shard", 7, "cls/00001.jpg") == 7827919414041351661
    assert int_hash("stats", 3, "k1") == 14503937518765023258
    assert unit_hash("split", 0, "cls/00001.jpg") == 14847323563467580899 / 2.0**64


def test_split_assignment_is_pinned_across_releases():
    got = [assign_split(f"cls/{i:05d}.jpg", 0, SPLITS_3) for i in range(8)]
    assert got == ["validation", "validation", "train", "validation"] + ["train"] * 4


def test_split_boundary_belongs_to_the_next_split(monkeypatch):
    # Each split owns [start, end): u exactly at 0.7 is validation, not train.
    monkeypatch.setattr(keys, "unit_hash", lambda purpose, seed, key: 0.7)
    assert assign_split("k", 0, SPLITS_3) == "validation"


def test_split_rounding_past_the_last_fraction_goes_to_the_last_split(monkeypatch):
    # Fractions that sum to a hair under 1.0 (0.7 + 0.2 + 0.0999999): u above the sum.
    monkeypatch.setattr(keys, "unit_hash", lambda purpose, seed, key: 0.99999995)
    splits = (("train", 0.7), ("validation", 0.2), ("test", 0.0999999))
    assert assign_split("k", 0, splits) == "test"


def test_split_hash_salt_is_the_split_purpose(monkeypatch):
    seen = []
    monkeypatch.setattr(keys, "unit_hash", lambda purpose, seed, key: seen.append(purpose) or 0.1)
    assign_split("k", 0, SPLITS_3)
    wants_stats(_listed("train", "k"), "train", 0.5, 0)
    assert seen == ["split", "stats"]


def test_stats_sample_is_the_half_open_interval_below_the_fraction(monkeypatch):
    monkeypatch.setattr(keys, "unit_hash", lambda purpose, seed, key: 0.25)
    item = _listed("train", "k")
    assert not wants_stats(item, "train", 0.25, 0)
    assert wants_stats(item, "train", 0.2500001, 0)


def test_stats_sample_is_pinned_across_releases():
    items = [_listed("train", f"k{i}") for i in range(10)]
    assert [i for i, it in enumerate(items) if wants_stats(it, "train", 0.5, 3)] == [
        i for i in range(10) if int_hash("stats", 3, f"k{i}") / 2.0**64 < 0.5
    ]


def test_writer_entry_round_trips_and_rejects_a_short_entry():
    record = _record("/in/a/1.jpg", "a/1.jpg", split="train")
    entry = WriterEntry.of(record)
    assert len(entry) == len(WriterEntry._fields)
    # A chip's window (--tile) is None for a whole image.
    assert entry._asdict() == {f: getattr(record, f, None) for f in WriterEntry._fields}
    with pytest.raises(TypeError):
        WriterEntry._make(entry[:-1])


def test_split_totals_count_bytes_and_files_per_split():
    batch = [
        _record("/a", "a", split="train", size=5),
        _record("/b", "b", split="train", size=7),
        _record("/c", "c", split="test", size=11),
    ]
    assert dict(_batch_totals(batch)) == {"train": (12, 2), "test": (11, 1)}
    fn = _SplitTotals()
    acc = fn.create_accumulator()
    assert acc == (0, 0)
    acc = fn.add_input(acc, (12, 2))
    merged = fn.merge_accumulators([acc, fn.add_input(fn.create_accumulator(), (3, 1))])
    assert fn.extract_output(merged) == (15, 3)


def test_concat_keeps_every_record_of_every_accumulator():
    fn = _ConcatFn()
    accs = [fn.add_input(fn.create_accumulator(), [i, i + 10]) for i in range(3)]
    assert sorted(fn.extract_output(fn.merge_accumulators(accs))) == [0, 1, 2, 10, 11, 12]


def test_plan_counts_files_per_split_when_files_bound_the_shard_count(tmp_path):
    # 3 files of 10 MB at a 1 MB target: 30 shards by bytes, but never more shards than files.
    config = _config(tmp_path, target_shard_mb=1.0, min_shards=1, seed=0)
    rows = [_record(f"/in/c/{i}.jpg", f"c/{i}.jpg", size=10_000_000) for i in range(3)]
    rows.append(_record("/in/c/v.jpg", "c/v.jpg", split="validation", size=10))
    with TestPipeline() as p:
        out = p | beam.Create([rows[:2], rows[2:]]) | PlanShards(config)
        assert_that(out["plan"], equal_to([{"train": 3, "validation": 1}]), label="Plan")
        sizes = out["groups"] | beam.MapTuple(lambda key, entries: (key[0], len(entries)))
        totals = sizes | beam.CombinePerKey(sum)
        assert_that(totals, equal_to([("train", 3), ("validation", 1)]), label="Counts")
