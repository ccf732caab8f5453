"""The training epoch order: which records make up each global step, a pure function of
(seed, epoch) and the split's shard sizes. TensorFlow ops (same values eagerly and in a graph).

An epoch of N records is laid out in three draws, each from its own stateless seed:
1. the shards in a random order, dealt round-robin to `lanes` lanes (shards read at once): a
   lane is the concatenation of its shards' records, in shard order;
2. the lanes merged by a random interleaving: position m of the merged stream takes the next
   record of lane `labels[m]`, where `labels` is a random permutation holding lane l as many
   times as lane l has records (every lane ends near the epoch's end);
3. the merged stream cut into windows of `window` records, each permuted at random (unless
   `permute` is off: a window of one global batch holds a set of records, already drawn from
   a random merge, and permuting it would only copy them).
Global step s is final positions [s*B, (s+1)*B); input pipeline p of P takes positions whose
offset in the step is in [p*B/P, (p+1)*B/P). Nothing depends on the number of workers or
replicas, on read speed or on `deterministic`, and starting at any step reads only the shards
still needed (each lane's current shard from its record, later ones whole) plus one window.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

__all__ = ["EpochOrder", "pipeline_mask"]

# Independent random streams drawn from one seed (any distinct constants would do).
_SHARDS, _LANES, _WINDOWS, _CROPS = 1, 2, 3, 4


@dataclasses.dataclass(frozen=True)
class EpochOrder:
    """The order of one split's records in every epoch.

    counts: records of each shard, in dataset_info.json's order.
    seed: the user's seed (the reader passes a fixed one for seed=None).
    lanes: shards read at once (at most the number of shards).
    window: records permuted together after the merge (at most N).
    permute: whether windows are permuted (else the merged order is final).
    """

    counts: tuple[int, ...]
    seed: int
    lanes: int
    window: int
    permute: bool = True

    def __post_init__(self) -> None:
        if not self.counts or min(self.counts) < 0:
            raise ValueError(f"every shard needs a known record count, got {self.counts}")
        if self.lanes <= 0 or self.window <= 0:
            raise ValueError(f"lanes and window must be positive: {self.lanes}, {self.window}")
        object.__setattr__(self, "lanes", min(self.lanes, len(self.counts)))
        object.__setattr__(self, "window", max(1, min(self.window, self.num_examples)))

    @property
    def num_examples(self) -> int:
        return sum(self.counts)

    def steps(self, global_batch_size: int) -> int:
        """Global steps per epoch: the last partial global batch is dropped."""
        return self.num_examples // global_batch_size

    def stream_seed(self, epoch, stream: int, index=None) -> tf.Tensor:
        """A [2] stateless seed for `stream` of `epoch` (and of window `index`)."""
        seed = tf.constant([self.seed % (2**62), stream], tf.int64)
        seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(epoch, tf.int64))
        if index is not None:
            seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(index, tf.int64))
        return seed

    def shard_order(self, epoch) -> tf.Tensor:
        """int64 [F]: listed shard indices in this epoch's order (lane of position i: i % lanes)."""
        listed = tf.range(len(self.counts), dtype=tf.int64)
        return tf.random.experimental.stateless_shuffle(listed, self.stream_seed(epoch, _SHARDS))

    def lane_labels(self, epoch) -> tf.Tensor:
        """int64 [N]: the lane each merged position takes its record from."""
        counts = tf.constant(self.counts, tf.int64)
        order = self.shard_order(epoch)
        lane_of = tf.range(len(self.counts), dtype=tf.int64) % self.lanes
        lengths = tf.math.unsorted_segment_sum(tf.gather(counts, order), lane_of, self.lanes)
        labels = tf.repeat(tf.range(self.lanes, dtype=tf.int64), lengths)
        return tf.random.experimental.stateless_shuffle(labels, self.stream_seed(epoch, _LANES))

    def window_permutation(self, epoch, index, size) -> tf.Tensor:
        """int64 [size]: merged positions (within the window) in final order."""
        positions = tf.range(tf.cast(size, tf.int64), dtype=tf.int64)
        if not self.permute:
            return positions
        seed = self.stream_seed(epoch, _WINDOWS, index)
        return tf.random.experimental.stateless_shuffle(positions, seed)

    def crop_seeds(self, epoch, index, size) -> tf.Tensor:
        """int64 [size, 2]: stateless crop and flip seeds of the window's final positions."""
        shape = tf.stack([tf.cast(size, tf.int32), 2])
        seed = self.stream_seed(epoch, _CROPS, index)
        return tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.int64)

    def lane_shards(self, epoch) -> tf.RaggedTensor:
        """int64 [lanes, None]: each lane's listed shard indices, in reading order."""
        lanes, n = self.lanes, len(self.counts)
        # Position i of the shard order goes to lane i % lanes.
        grouped = [i for lane in range(lanes) for i in range(lane, n, lanes)]
        lengths = [len(range(lane, n, lanes)) for lane in range(lanes)]
        shards = tf.gather(self.shard_order(epoch), tf.constant(grouped, tf.int64))
        return tf.RaggedTensor.from_row_lengths(shards, tf.constant(lengths, tf.int64))

    def lane_starts(self, epoch, merged_start) -> tuple[tf.RaggedTensor, tf.Tensor]:
        """Where the merged stream from position `merged_start` on takes up each lane:
        (int64 [lanes, None] listed indices of its shards still to read, int64 [lanes]
        records to skip in the first of them)."""
        labels = self.lane_labels(epoch)[: tf.cast(merged_start, tf.int64)]
        used = tf.math.bincount(labels, minlength=self.lanes, maxlength=self.lanes, dtype=tf.int64)
        shards = self.lane_shards(epoch)
        lane_of = shards.value_rowids()
        sizes = tf.gather(tf.constant(self.counts, tf.int64), shards.flat_values)
        # Each shard's end within its lane; the shards the merge has read through are done.
        starts = tf.cumsum(sizes, exclusive=True)  # over all lanes, lane after lane
        ends = starts + sizes - tf.gather(tf.gather(starts, shards.row_starts()), lane_of)
        done = ends <= tf.gather(used, lane_of)
        read = tf.math.unsorted_segment_sum(tf.where(done, sizes, 0), lane_of, self.lanes)
        return tf.ragged.boolean_mask(shards, shards.with_flat_values(~done)), used - read

    def merged_records(self, epoch) -> tf.Tensor:
        """int64 [N]: the listed-order index (shard by shard) of each merged position's record."""
        counts = tf.constant(self.counts, tf.int64)
        firsts = tf.cumsum(counts, exclusive=True)
        by_lane = self.lane_shards(epoch).flat_values
        # Every lane's records, lane after lane, in reading order.
        streams = tf.ragged.range(
            tf.gather(firsts, by_lane), tf.gather(firsts + counts, by_lane), dtype=tf.int64
        ).flat_values
        # The j-th merged position of lane l (in merged order) reads lane l's j-th record.
        positions = tf.argsort(self.lane_labels(epoch), stable=True)
        return tf.gather(streams, tf.math.invert_permutation(positions))

    def epoch_records(self, epoch: int) -> list[int]:
        """The listed-order index of the record at every final position (tests, benchmarks)."""
        merged = self.merged_records(epoch).numpy()
        out: list[int] = []
        for index, first in enumerate(range(0, self.num_examples, self.window)):
            size = min(self.window, self.num_examples - first)
            perm = self.window_permutation(epoch, index, size).numpy()
            out.extend(int(merged[first + j]) for j in perm)
        return out


def pipeline_mask(
    first, size, global_batch_size: int, num_pipelines: int, pipeline_id: int, begin, end
) -> tf.Tensor:
    """bool [size]: which of the final positions [first, first+size) pipeline `pipeline_id`
    yields: its part of each global batch, from position `begin` up to `end` (exclusive)."""
    positions = tf.cast(first, tf.int64) + tf.range(tf.cast(size, tf.int64), dtype=tf.int64)
    part = global_batch_size // num_pipelines
    offset = positions % global_batch_size
    mine = (offset >= pipeline_id * part) & (offset < (pipeline_id + 1) * part)
    return mine & (positions >= tf.cast(begin, tf.int64)) & (positions < tf.cast(end, tf.int64))
