"""Guards for the pure planning logic that earlier tests let planted bugs through (issue 13):
every split of a 3-way split gets its share, MB means 10**6 bytes, every shard index is used,
and a file's shard follows its key (relative to the input root), never its full path."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tests.unit.test_transforms import _config, _record
from transforms import keys
from transforms.elements import ListedFile
from transforms.keys import assign_split, int_hash
from transforms.plan_shards import PlanShards, _write_order, num_shards_for

SPLITS_3 = (("train", 0.7), ("validation", 0.2), ("test", 0.1))


def test_three_way_split_gives_each_split_its_fraction():
    got = [assign_split(f"cls/{i:05d}.jpg", 0, SPLITS_3) for i in range(20_000)]
    for name, fraction in SPLITS_3:
        # 20,000 draws: the binomial standard deviation of a 10 % share is 0.2 %.
        assert got.count(name) / len(got) == pytest.approx(fraction, abs=0.015), name


@pytest.mark.parametrize(
    "u, expected",
    [(0.0, "train"), (0.6999, "train"), (0.7001, "validation"), (0.8999, "validation"),
     (0.9001, "test"), (0.999999, "test")],
)  # fmt: skip
def test_split_boundaries_are_cumulative_fractions(monkeypatch, u, expected):
    monkeypatch.setattr(keys, "unit_hash", lambda purpose, seed, key: u)
    assert assign_split("any", 0, SPLITS_3) == expected


def test_split_hash_is_salted_by_purpose_and_seed():
    assert int_hash("split", 0, "a") != int_hash("shard", 0, "a")
    assert int_hash("split", 0, "a") != int_hash("split", 1, "a")
    assert int_hash("split", 0, "a") == int_hash("split", 0, "a")
    assert 0 <= keys.unit_hash("split", 0, "a") < 1


def test_shard_target_counts_decimal_megabytes():
    # 3,000,000 bytes at a 1 MB target: 3 shards; one byte more needs a 4th (MiB would say 3).
    assert num_shards_for(3_000_000, 100, 1.0, 1) == 3
    assert num_shards_for(3_000_001, 100, 1.0, 1) == 4
    assert num_shards_for(3_000_001, 2, 1.0, 1) == 2  # never more shards than files
    assert num_shards_for(10, 100, 1.0, 5) == 5  # --min_shards wins over a small split


def test_every_shard_index_is_used_and_shards_follow_keys_not_paths(tmp_path):
    config = _config(tmp_path, target_shard_mb=1.0, min_shards=4, seed=7)
    rows = [
        # The path's directory differs from the key's: a copied dataset must hash the same.
        _record(f"/mnt/copy-{i % 3}/cls/{i}.jpg", f"cls/{i}.jpg", sha256=f"{i:064d}")
        for i in range(200)
    ]
    expected = sorted(("train", int_hash("shard", 7, r.key) % 4, r.path) for r in rows)
    assert {index for _, index, _ in expected} == {0, 1, 2, 3}
    with TestPipeline() as p:
        out = p | beam.Create([rows[i : i + 16] for i in range(0, 200, 16)]) | PlanShards(config)
        assert_that(out["plan"], equal_to([{"train": 4}]), label="Plan")
        placed = out["groups"] | beam.FlatMapTuple(
            lambda key, entries: [(key[0], key[1], e.path) for e in entries]
        )
        assert_that(placed, equal_to(expected), label="Placement")


def _listed(split: str, key: str) -> ListedFile:
    return ListedFile(f"/in/{key}", key, "", split, -1, None)


def test_stats_sample_is_capped_and_only_in_the_training_split():
    assert keys.stats_fraction(1.0, 4000, 12000) == pytest.approx(1 / 3)
    assert keys.stats_fraction(0.1, 4000, 12000) == 0.1  # the smaller share wins
    assert keys.stats_fraction(1.0, 0, 12000) == 1.0  # 0: no cap
    assert keys.stats_fraction(1.0, 4000, 0) == 1.0  # count unknown
    items = [_listed("train", f"k{i}") for i in range(20_000)]
    picked = sum(keys.wants_stats(it, "train", 0.25, 3) for it in items)
    assert picked / len(items) == pytest.approx(0.25, abs=0.015)
    assert not keys.wants_stats(_listed("validation", "k"), "train", 1.0, 3)
    assert not keys.wants_stats(_listed("train", "k"), None, 1.0, 3)  # --no_analyze


def test_shards_are_emitted_so_that_round_robin_gives_each_worker_its_share():
    """The local runner hands grouped shards to its workers round-robin in the order their keys
    first arrive (transforms/plan_shards.py `_write_order`): the large split's shards alternate
    first, then the small split's, so 10 train and 2 validation shards on 2 workers are 5 train
    and 1 validation each (the order the records arrived in gave one worker 6 train shards and
    the other 4 train and both validation shards in a 48,000-photo run)."""
    plan = {"validation": 2, "train": 10}
    keys_seen = [(split, i) for split in ("validation", "train") for i in range(plan[split])]
    ordered = sorted(keys_seen, key=lambda k: _write_order(k, plan))
    two = [ordered[w::2] for w in range(2)]
    assert [sorted(s for s, _ in share) for share in two] == [["train"] * 5 + ["validation"]] * 2
    three = [ordered[w::3] for w in range(3)]
    train = [sum(s == "train" for s, _ in share) for share in three]
    validation = [sum(s == "validation" for s, _ in share) for share in three]
    assert max(train) - min(train) <= 1 and max(validation) == 1, three
    assert ordered[:2] == [("train", 0), ("train", 1)]
