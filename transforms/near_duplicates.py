"""Near-duplicates: cluster images whose perceptual hashes are close; report, group or drop them.

Only hashes cross the clustering's combine and only the (few) clustered images' names cross the
next shuffle: never bytes, never every file's name. The clustered images are found in dedupe's
pass over the images (which drops the exact duplicates), so no pass reads them only for this.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
from apache_beam import pvalue

from transforms.dedupe import DropNamed, DropNamedFn, named
from transforms.elements import InspectedImage, NearCluster, NearMember, split_unit
from transforms.hamming import cluster_ids, components, distance, largest_distance
from transforms.images.phash import unpack

__all__ = ["FindNearDuplicates", "cluster_summary"]

_ALL_BITS = 0xFFFF_FFFF_FFFF_FFFF
_NONE = np.empty(0, dtype=np.uint64)


def _unsigned(phash: int) -> int:
    return phash & _ALL_BITS


def _hashes(batch: list[InspectedImage]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A batch's unsigned (pHashes, the owner of each crop window, the windows' pHashes) as
    arrays (none for a batch without any hash)."""
    hashed = [r for r in batch if r.phash is not None]
    if not hashed:
        return []
    hashes = np.array([r.phash for r in hashed], dtype=np.int64).view(np.uint64)
    windows = [unpack(r.phash_crops) if r.phash_crops else _NONE for r in hashed]
    owners = np.repeat(hashes, [len(w) for w in windows])
    return [(hashes, owners, np.concatenate(windows))]


class _ClustersFn(beam.CombineFn):
    """(hashes, crop owners, crop windows) arrays -> {hash: its cluster's smallest hash}
    (hamming.cluster_ids) in one step: the hashes alone (8 bytes an image and 16 a window) fit
    one worker."""

    def __init__(self, threshold: int):
        self._threshold = threshold

    def create_accumulator(self):
        return []

    def add_input(self, acc, hashes):
        acc.append(hashes)
        return acc

    def merge_accumulators(self, accumulators):
        return self.compact([hashes for acc in accumulators for hashes in acc])

    def compact(self, acc):
        return [tuple(np.concatenate(c) for c in zip(*acc, strict=True))] if len(acc) > 1 else acc

    def extract_output(self, acc):
        if not acc:
            return {}
        hashes, owners, windows = self.compact(acc)[0]
        return cluster_ids(hashes, self._threshold, (owners, windows))


class _KeepFn(DropNamedFn):
    """[InspectedImage] -> the batch without dedupe's duplicates (`dropped`), and on MEMBERS
    (cluster, NearMember) of its kept images that are in a cluster (`clusters`)."""

    MEMBERS = "members"

    def process(self, batch, dropped, clusters):
        images = self.keep(batch, dropped)
        if images:
            yield images
        for image in images if clusters else ():
            if image.phash is not None and (c := clusters.get(_unsigned(image.phash))) is not None:
                yield pvalue.TaggedOutput(self.MEMBERS, (c, NearMember.of(image)))


def _cluster(grouped):
    """(cluster, [NearMember]) -> its NearCluster, if two images or more are left in it (an
    image's exact duplicates share its hash, but dedupe drops them)."""
    _, members = grouped
    members = tuple(sorted(members))
    if len(members) > 1:
        yield NearCluster(members, largest_distance(m.phash for m in members))


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

    `duplicates`: dedupe's rows (FindDuplicates) of these images, left out of "images" in the
    pass that finds the clusters' images; None: no dedupe. `mode` report leaves the images as
    they are; group moves every image of a cluster (and its --group_by group) into one split;
    drop keeps a cluster's first image by key and drops the others as duplicates. The clusters
    are reported as the images end up.
    """

    def __init__(self, mode: str, threshold: int, duplicates=None):
        super().__init__()
        self._mode = mode
        self._threshold = threshold
        self._duplicates = duplicates

    def expand(self, inspected):
        clusters = (
            inspected
            | "Hashes" >> beam.FlatMap(_hashes)
            # {hash: cluster}; none at all without images (the side input's default then)
            | "Cluster" >> beam.CombineGlobally(_ClustersFn(self._threshold)).without_defaults()
        )
        passed = inspected | "KeepAndFindMembers" >> beam.ParDo(
            _KeepFn(),
            dropped=named(self._duplicates) if self._duplicates is not None else {},
            clusters=pvalue.AsSingleton(clusters, default_value={}),
        ).with_outputs(_KeepFn.MEMBERS, main="images")
        found = (
            passed[_KeepFn.MEMBERS]
            | "GroupClusters" >> beam.GroupByKey()  # (cluster, [NearMember])
            | "Clusters" >> beam.FlatMap(_cluster)
        )
        return self._apply_mode(passed.images, found)

    def _apply_mode(self, images, found) -> dict:
        dropped = None
        if self._mode == "group":
            moves = pvalue.AsSingleton(
                found | "SplitUnits" >> beam.CombineGlobally(_SplitUnitsFn()).without_defaults(),
                default_value={},
            )
            images = images | "MoveToOneSplit" >> beam.Map(_move, moves)
            found = found | "AsMoved" >> beam.Map(_moved, moves)
        elif self._mode == "drop":
            dropped = found | "Dropped" >> beam.FlatMap(_dropped)
            images = images | "DropNearDuplicates" >> DropNamed(dropped, "near_duplicates_dropped")
        return {"images": images, "clusters": found, "dropped": dropped}


def cluster_summary(clusters: list[dict]) -> dict:
    """dataset_info.json's near-duplicate counts of near_duplicates.jsonl's lines."""
    return {
        "num_clusters": len(clusters),
        "num_images": sum(len(c["paths"]) for c in clusters),
        "num_across_splits": sum(len(c["splits"]) > 1 for c in clusters),
    }
