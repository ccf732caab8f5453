"""The training epoch order: which records make up each global step, a pure function of
(seed, epoch) and the split's shard sizes. TensorFlow ops (same values eagerly and in a graph).

An epoch of N records is laid out in three draws, each from its own stateless seed:
1. the shards (pieces of them, pipeline/reader/pieces.py) in a random order;
2. merged as tf.data's deterministic `interleave(cycle_length=lanes, block_length=1)` merges
   them: `lanes` shards open at once, one record from each in turn; a lane whose shard has
   ended takes the next shard of the order when its turn next comes (`_interleave` spells
   this out, and a test holds it to tf.data's own);
3. the merged stream cut into windows of `window` records, each permuted at random (unless
   `permute` is off: a window of one global batch holds a set of records, already drawn from
   a random merge, and permuting it would only copy them).
Global step s is final positions [s*B, (s+1)*B). The reader's order is this in each of a few
partitions of the split, side by side (pipeline/reader/partitions.py). Nothing depends on the
number of workers or replicas, on read speed or on `deterministic`, and starting at any step
reads only the shards still needed (each open one from its record, later ones whole) plus one
window.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

__all__ = [
    "EpochOrder",
    "crop_seeds",
    "merged_listed",
    "resume_from",
    "resumed_inputs",
    "shard_order",
    "stream_seed",
    "window_permutation",
]

# Independent random streams drawn from one seed (any distinct constants would do).
_SHARDS, _WINDOWS, _CROPS = 1, 3, 4


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
        return stream_seed(self.seed % (2**62), epoch, stream, index)

    def shard_order(self, epoch) -> tf.Tensor:
        """int64 [F]: listed shard indices in this epoch's order (lane of position i: i % lanes)."""
        return shard_order(self.seed % (2**62), epoch, len(self.counts))

    def window_permutation(self, epoch, index, size) -> tf.Tensor:
        """int64 [size]: merged positions (within the window) in final order."""
        positions = tf.range(tf.cast(size, tf.int64), dtype=tf.int64)
        if not self.permute:
            return positions
        return window_permutation(self.seed % (2**62), epoch, index, size)

    def crop_seeds(self, epoch, index, size) -> tf.Tensor:
        """int64 [size, 2]: stateless crop and flip seeds of the window's final positions."""
        return crop_seeds(self.seed % (2**62), epoch, index, size)

    def resume_inputs(self, epoch, merged_start) -> tuple[tf.Tensor, tf.Tensor]:
        """The interleave's input from merged position `merged_start` on: (int64 [K] listed
        shard indices, int64 [K] records to skip in each). Interleaved as the epoch is, they
        give the merged stream from there: the open shards first, from the lane whose turn
        is next, then the shards not yet opened."""
        order = self.shard_order(epoch)

        def resumed(order, start):
            return resumed_inputs(self.counts, self.lanes, order.numpy(), int(start))

        return resume_from(order, merged_start, resumed)

    def merged_records(self, epoch) -> tf.Tensor:
        """int64 [N]: the listed-order index (shard by shard) of each merged position's record."""
        order = self.shard_order(epoch)

        def merged(order):
            return merged_listed(self.counts, self.lanes, order.numpy())

        return tf.ensure_shape(tf.py_function(merged, [order], tf.int64), [self.num_examples])

    def epoch_records(self, epoch: int) -> list[int]:
        """The listed-order index of the record at every final position (tests, benchmarks)."""
        merged = self.merged_records(epoch).numpy()
        if not self.permute:
            return [int(v) for v in merged]
        out: list[int] = []
        for index, first in enumerate(range(0, self.num_examples, self.window)):
            size = min(self.window, self.num_examples - first)
            perm = self.window_permutation(epoch, index, size).numpy()
            out.extend(int(merged[first + j]) for j in perm)
        return out


def shard_order(seed, epoch, num_units) -> tf.Tensor:
    """int64 [num_units]: the units in `epoch`'s order drawn from `seed` (EpochOrder's)."""
    listed = tf.range(tf.cast(num_units, tf.int64), dtype=tf.int64)
    return tf.random.experimental.stateless_shuffle(listed, stream_seed(seed, epoch, _SHARDS))


def resume_from(
    order: tf.Tensor, merged_start, resumed, *extra: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """(units, skips) from merged position `merged_start` of the merge of `order`: from the
    start, `order` itself; inside, what `resumed(order, start, *extra)` (numpy, run as a
    py_function) says."""

    def from_start():
        return order, tf.zeros_like(order)

    def from_inside():
        inputs = [order, merged_start, *extra]
        shards, skips = tf.py_function(resumed, inputs, [tf.int64] * 2)
        return tf.ensure_shape(shards, [None]), tf.ensure_shape(skips, [None])

    return tf.cond(tf.equal(merged_start, 0), from_start, from_inside)


def resumed_inputs(counts, lanes: int, order: np.ndarray, start: int) -> tuple:
    """(units, skips) of the merge of `counts`' units in `order` over `lanes` lanes after
    `start` records: the interleave input that goes on from there (numpy)."""
    sizes = np.asarray(counts, np.int64)[order]
    shards, skips = _interleave(sizes, lanes, start).inputs(sizes)
    return order[shards], skips


def merged_listed(counts, lanes: int, order: np.ndarray) -> np.ndarray:
    """The listed-order index (unit by unit) of each merged position of the merge of
    `counts`' units in `order` over `lanes` lanes (numpy)."""
    counts = np.asarray(counts, np.int64)
    sizes = counts[order]
    inputs = _interleave(sizes, lanes, sizes.sum()).taken
    # Record i of input j is listed record firsts[order[j]] + i.
    within = np.empty_like(inputs)
    grouped = np.argsort(inputs, kind="stable")
    within[grouped] = np.arange(inputs.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    firsts = np.cumsum(counts) - counts
    return firsts[order[inputs]] + within


def stream_seed(seed, epoch, stream: int, index=None) -> tf.Tensor:
    """A [2] stateless seed for `stream` of `epoch` (and of window `index`) from `seed` (an
    int64 scalar below 2**62: a tensor serves several orders in one traced function)."""
    seed = tf.stack([tf.cast(seed, tf.int64), tf.constant(stream, tf.int64)])
    seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(epoch, tf.int64))
    if index is not None:
        seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(index, tf.int64))
    return seed


def window_permutation(seed, epoch, index, size) -> tf.Tensor:
    """int64 [size]: a permuted window's merged positions in final order (EpochOrder's)."""
    positions = tf.range(tf.cast(size, tf.int64), dtype=tf.int64)
    return tf.random.experimental.stateless_shuffle(
        positions, stream_seed(seed, epoch, _WINDOWS, index)
    )


def crop_seeds(seed, epoch, index, size) -> tf.Tensor:
    """int64 [size, 2]: stateless crop and flip seeds of a window's final positions."""
    shape = tf.stack([tf.cast(size, tf.int32), 2])
    seed = stream_seed(seed, epoch, _CROPS, index)
    return tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.int64)


@dataclasses.dataclass
class _Merge:
    """tf.data's deterministic interleave (block_length 1) over inputs of known sizes, stopped
    after some records: lane `lane` holds input `slot[lane]` (-1: none) with `left[lane]`
    records to go, `turn` is the lane read next and `opened` inputs have been opened."""

    slot: np.ndarray
    left: np.ndarray
    turn: int = 0
    opened: int = 0
    count: int = 0
    chunks: list = dataclasses.field(default_factory=list)

    @property
    def taken(self) -> np.ndarray:
        """int64 [records taken]: the input each merged position came from."""
        return np.concatenate(self.chunks or [np.zeros(0, np.int64)]).astype(np.int64)

    def inputs(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, skips) whose interleave goes on where this one stopped: the lanes' open
        inputs from lane `turn` on (an empty lane takes the next unopened one, as it would),
        then the inputs not yet opened."""
        shards, skips, opened = [], [], self.opened
        for lane in np.roll(np.arange(self.slot.size), -self.turn):
            if self.slot[lane] >= 0:
                shards.append(self.slot[lane])
                skips.append(sizes[self.slot[lane]] - self.left[lane])
            elif opened < sizes.size:
                shards.append(opened)
                skips.append(0)
                opened += 1
        rest = np.arange(opened, sizes.size)
        return (
            np.concatenate([np.asarray(shards, np.int64), rest]).astype(np.int64),
            np.concatenate([np.asarray(skips, np.int64), np.zeros(rest.size, np.int64)]),
        )


def _interleave(sizes: np.ndarray, lanes: int, stop: int) -> _Merge:
    """The merge of inputs of `sizes` over `lanes` lanes, after `stop` records."""
    merge = _Merge(slot=np.full(lanes, -1, np.int64), left=np.zeros(lanes, np.int64))
    while merge.count < stop:
        if merge.turn == 0 and _whole_rounds(merge, sizes.size, stop - merge.count):
            continue
        if not _visit(merge, sizes):
            break  # every input read
    return merge


def _whole_rounds(merge: _Merge, num_inputs: int, most: int) -> bool:
    """Takes the rounds in which every lane reads a record or stays empty for good, at once
    (the merge's bulk: nothing opens or ends in them); False when there are none."""
    open_ = merge.slot >= 0
    if not open_.any() or (merge.left[open_] == 0).any():
        return False
    if merge.opened < num_inputs and not open_.all():
        return False
    rounds = min(int(merge.left[open_].min()), most // int(open_.sum()))
    if rounds == 0:
        return False
    merge.chunks.append(np.tile(merge.slot[open_], rounds))
    merge.left[open_] -= rounds
    merge.count += rounds * int(open_.sum())
    return True


def _visit(merge: _Merge, sizes: np.ndarray) -> bool:
    """One turn of tf.data's InterleaveDataset loop at lane `turn`; False when all is read."""
    lane = merge.turn
    if merge.slot[lane] < 0:
        if merge.opened < sizes.size:  # an empty lane opens the next input and reads from it
            merge.slot[lane], merge.left[lane] = merge.opened, sizes[merge.opened]
            merge.opened += 1
            return True
        if (merge.slot < 0).all():
            return False
    elif merge.left[lane] > 0:
        merge.chunks.append(merge.slot[lane : lane + 1].copy())
        merge.left[lane] -= 1
        merge.count += 1
    else:  # the input has ended: the lane is empty until its next turn
        merge.slot[lane] = -1
    merge.turn = (lane + 1) % merge.slot.size
    return True
