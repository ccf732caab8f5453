"""How training cuts a split into pieces (pipeline/reader/pieces.py) and the default window
that follows, from the shards' listing and their markers, through a store that serves only
what it was given."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from core import shard_markers
from pipeline.reader.files import ShardFile
from pipeline.reader.pieces import split_pieces
from pipeline.reader.resumable import epoch_order

ROOT = "gs://bucket/data"


class _Markers:
    """A store holding a marker for every shard given to it (read_bytes only)."""

    def __init__(self, shards, sizes=None):
        """Records of 10 bytes; `sizes`: {shard index: the size its marker names instead}."""
        self.bodies, self.reads = {}, []
        for i, s in enumerate(shards):
            starts = [r * 10 for r in range(s.num_examples)]
            records = [
                shard_markers.RecordLocation("", "", "", "", 0, o, 10, "", "") for o in starts
            ]
            shard = {
                "file": s.path[len(ROOT) + 1 :],
                "num_bytes": (sizes or {}).get(i, s.num_bytes),
            }
            body = {shard_markers.SHARD_KEY: shard, shard_markers.RECORDS_KEY: records}
            self.bodies[shard_markers.marker_of_shard(s.path)] = json.dumps(body).encode()

    def read_bytes(self, uri: str) -> bytes:
        self.reads.append(uri)
        if uri not in self.bodies:
            raise FileNotFoundError(uri)
        return self.bodies[uri]


def _shards(counts, compression=""):
    suffix = ".gz" if compression else ""
    return [
        ShardFile(
            f"{ROOT}/train/train-{i:05d}-of-{len(counts):05d}.tfrecord{suffix}",
            compression,
            n,
            n * 10,
        )
        for i, n in enumerate(counts)
    ]


def test_large_shards_are_cut_in_pieces_of_about_16_mb():
    shards = _shards((20_000, 20_000))
    pieces = split_pieces(shards, _Markers(shards), 40_000 * 140_000, 32)  # 140 KB records
    assert pieces.count[:168] == (119,) * 168 and pieces.count[168] == 20_000 - 168 * 119
    assert pieces.shard.count(0) == 169 and sum(pieces.count) == 40_000
    assert pieces.first[169] == 0 and pieces.shard[169] == 1
    assert pieces.offset[1] == 1190 and pieces.lanes == 2 and pieces.cut


def test_a_small_split_has_16_pieces_per_lane_at_least():
    shards = _shards((40, 32))
    pieces = split_pieces(shards, _Markers(shards), 72 * 2_000, 32)
    assert pieces.lanes == 2  # as many as shards
    assert pieces.count == (2,) * 36  # 72 // (2 lanes * 16 pieces each)
    assert pieces.offset[:3] == (0, 20, 40) and pieces.offset[20] == 0  # shard 1's first


def test_a_split_of_many_shards_is_read_whole_without_reading_markers():
    shards = _shards((5,) * 40)
    store = _Markers(shards)
    pieces = split_pieces(shards, store, 200 * 1000, 32)
    assert pieces.count == (5,) * 40 and pieces.lanes == 32 and pieces.cut
    assert store.reads == []


@pytest.mark.parametrize("why", ["compressed", "no marker", "marker of another size"])
def test_a_small_split_with_a_shard_that_cannot_be_cut_is_read_whole(why):
    shards = _shards((50, 7), "GZIP" if why == "compressed" else "")
    store = _Markers(shards, sizes={1: 71} if why == "marker of another size" else None)
    if why == "no marker":
        del store.bodies[shard_markers.marker_of_shard(shards[1].path)]
    pieces = split_pieces(shards, store, 57 * 1000, 32)
    assert (pieces.count, pieces.offset, pieces.lanes, pieces.cut) == ((50, 7), (0, 0), 2, False)


@pytest.mark.parametrize(
    ("shards", "markers", "window_records", "window"),
    [(32, False, 0, 64), (31, False, 0, 2048), (31, True, 0, 64), (31, False, 100, 128)],
)
def test_the_default_window_is_one_global_batch_when_pieces_mix(
    shards, markers, window_records, window
):
    """Pieces (or 32 shards read at once) mix a global batch; a few whole shards are also
    permuted over the shuffle buffer's records (here 2000); `shuffle_buffer_mb` (window_records)
    decides when given."""
    listed = _shards((100,) * shards)
    store = _Markers(listed if markers else [])
    config = SimpleNamespace(
        pieces=split_pieces(listed, store, 100 * shards * 1000, 32),
        global_batch_size=64,
        window_records=window_records,
        shuffle_records=2000,
        seed=1,
    )
    assert epoch_order(config, 0).window == window
