"""Near-duplicates: cluster images whose perceptual hashes are close; report, group or drop them.

Only hashes cross the band shuffle and only the (few) clustered images' names cross the next
one: never bytes, never every file's name.
"""

from __future__ import annotations

import collections
import dataclasses

import apache_beam as beam
import numpy as np
from apache_beam import pvalue

from transforms.dedupe import DropNamedFn
from transforms.elements import InspectedImage, NearCluster, NearMember, split_unit
from transforms.hamming import (
    BANDS,
    band_edges,
    components,
    distance,
    largest_distance,
    spanning_pairs,
)

__all__ = ["FindNearDuplicates", "cluster_summary"]

_ALL_BITS = 0xFFFF_FFFF_FFFF_FFFF


def _unsigned(phash: int) -> int:
    return phash & _ALL_BITS


class _HashCountsFn(beam.CombineFn):
    """Batches of unsigned hashes of one band key -> {hash: images with it}; pre-combined per
    bundle, so a bundle sends one dict per band through the shuffle."""

    def create_accumulator(self):
        return collections.Counter()

    def add_input(self, acc, hashes):
        acc.update(hashes)
        return acc

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for acc in accumulators:
            merged.update(acc)
        return merged

    def extract_output(self, acc):
        return acc


def _band_keys(batch: list[InspectedImage]) -> list[tuple[int, list[int]]]:
    hashes = [_unsigned(r.phash) for r in batch if r.phash is not None]
    return [(band, hashes) for band in range(BANDS)] if hashes else []


def _band_edges(band_counts: tuple[int, collections.Counter], threshold: int):
    """(band, {hash: count}) -> (a, b) hash pairs at most `threshold` bits apart found in that
    band; band 0 also pairs each hash that several images share with itself."""
    band, counts = band_counts
    hashes = np.fromiter(counts, dtype=np.uint64, count=len(counts))
    i, j, _ = band_edges(hashes, band, threshold)
    i, j = spanning_pairs(len(hashes), i, j)  # the same clusters, at most one pair a hash
    pairs = list(zip(hashes[i].tolist(), hashes[j].tolist(), strict=True))
    if band == 0:
        pairs += [(h, h) for h, n in counts.items() if n > 1]
    return pairs


class _ComponentsFn(beam.CombineFn):
    """Hash pairs -> {hash: its cluster's smallest hash}, by union-find in one step: the pairs
    are only those of near-duplicates, a small list next to the images."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, pair):
        acc.append(pair)
        return acc

    def merge_accumulators(self, accumulators):
        return [pair for acc in accumulators for pair in acc]

    def extract_output(self, acc):
        return components(acc)


def _members(batch: list[InspectedImage], clusters: dict):
    """[InspectedImage] -> (cluster, NearMember) of its images that are in a cluster."""
    for image in batch:
        if image.phash is not None and (c := clusters.get(_unsigned(image.phash))) is not None:
            yield c, NearMember.of(image)


def _cluster(grouped) -> NearCluster:
    _, members = grouped
    members = tuple(sorted(members))
    return NearCluster(members, largest_distance(m.phash for m in members))


class _SplitUnitsFn(beam.CombineFn):
    """NearCluster -> {unit: split} for every unit (--group_by group or file) that must move so
    that each cluster, with the groups its images belong to, lies in one split: the split of
    the image first by key among those joined (union-find over clusters and units)."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, cluster):
        acc.append([(m.key, m.unit, m.split) for m in cluster.members])
        return acc

    def merge_accumulators(self, accumulators):
        return [c for acc in accumulators for c in acc]

    def extract_output(self, acc):
        first_key, split_of = {}, {}
        for key, unit, split in (m for members in acc for m in members):
            first_key[unit] = min(key, first_key.get(unit, key))
            split_of[unit] = split
        units = sorted(first_key, key=first_key.get)  # node n: the unit n-th by its first key
        index = {unit: n for n, unit in enumerate(units)}
        edges = [(index[members[0][1]], index[unit]) for members in acc for _, unit, _ in members]
        moves = {}
        for node, first in components(edges).items():
            split = split_of[units[first]]
            if split_of[units[node]] != split:
                moves[units[node]] = split
        return moves


def _move(batch: list[InspectedImage], moves: dict) -> list[InspectedImage]:
    """The batch, each image whose unit moves in its new split."""
    if not moves:
        return batch
    # A group mate of a clustered image moves with it: the unit is the group.
    moved = ((image, moves.get(split_unit(image))) for image in batch)
    return [dataclasses.replace(image, split=split) if split else image for image, split in moved]


def _moved(cluster: NearCluster, moves: dict) -> NearCluster:
    members = tuple(m._replace(split=moves.get(m.unit, m.split)) for m in cluster.members)
    return dataclasses.replace(cluster, members=members)


def _dropped(cluster: NearCluster):
    """The duplicates.jsonl rows of a cluster's images but the first by key."""
    first = cluster.members[0]
    for m in cluster.members[1:]:
        yield {
            "path": m.path,
            "duplicate_of": first.path,
            "sha256": m.sha256,
            "distance": distance(m.phash, first.phash),
        }


class FindNearDuplicates(beam.PTransform):
    """[InspectedImage] -> {"images": [InspectedImage], "clusters": NearCluster,
    "dropped": duplicates.jsonl rows (None but with drop)}.

    `mode` report leaves the images as they are; group moves every image of a cluster (and
    its --group_by group) into one split; drop keeps a cluster's first image by key and drops
    the others as duplicates. The clusters are reported as the images end up.
    """

    def __init__(self, mode: str, threshold: int):
        super().__init__()
        self._mode = mode
        self._threshold = threshold

    def expand(self, inspected):
        threshold = self._threshold
        clusters = (
            inspected
            # (band, [unsigned pHash]), one per band and batch of images
            | "BandKeys" >> beam.FlatMap(_band_keys)
            | "HashesPerBand" >> beam.CombinePerKey(_HashCountsFn())  # (band, {hash: count})
            | "CloseInBand" >> beam.FlatMap(_band_edges, threshold)  # (hash, hash)
            # {hash: cluster}; none at all without images (the side inputs' default then)
            | "Components" >> beam.CombineGlobally(_ComponentsFn()).without_defaults()
        )
        found = (
            inspected
            | "ClusterMembers"
            >> beam.FlatMap(_members, pvalue.AsSingleton(clusters, default_value={}))
            | "GroupClusters" >> beam.GroupByKey()  # (cluster, [NearMember])
            | "Clusters" >> beam.Map(_cluster)
        )
        images, dropped = inspected, None
        if self._mode == "group":
            moves = pvalue.AsSingleton(
                found | "SplitUnits" >> beam.CombineGlobally(_SplitUnitsFn()).without_defaults(),
                default_value={},
            )
            images = inspected | "MoveToOneSplit" >> beam.Map(_move, moves)
            found = found | "AsMoved" >> beam.Map(_moved, moves)
        elif self._mode == "drop":
            dropped = found | "Dropped" >> beam.FlatMap(_dropped)
            paths = dropped | "DroppedPaths" >> beam.Map(lambda d: (d["path"], d["duplicate_of"]))
            images = inspected | "DropNearDuplicates" >> beam.ParDo(
                DropNamedFn("near_duplicates_dropped"), dropped=pvalue.AsDict(paths)
            )
        return {"images": images, "clusters": found, "dropped": dropped}


def cluster_summary(clusters: list[dict]) -> dict:
    """dataset_info.json's near-duplicate counts of near_duplicates.jsonl's lines."""
    return {
        "num_clusters": len(clusters),
        "num_images": sum(len(c["paths"]) for c in clusters),
        "num_across_splits": sum(len(c["splits"]) > 1 for c in clusters),
    }
