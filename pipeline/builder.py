"""The convert pipeline as a plain function: list -> inspect -> dedupe -> plan -> write -> describe."""

from __future__ import annotations

import tempfile
from typing import Protocol

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    PipelineOptions,
    StandardOptions,
    TestOptions,
    TypeOptions,
)
from apache_beam.runners.runner import PipelineRunner

from core.runners import is_direct_runner, is_local_runner
from pipeline.options import ConvertConfig
from pipeline.runners.direct import DirectRunner
from transforms.analyze import AnalyzeDataset
from transforms.analyze_aside import AnalyzeAside
from transforms.count_progress import CountProgress
from transforms.dedupe import DropNamed, FindDuplicates
from transforms.describe import DescribeDataset
from transforms.elements import ShardInfo
from transforms.inspect_images import InspectImages
from transforms.list_images import ListImages
from transforms.match_annotations import MatchAnnotations
from transforms.near_duplicates import FindNearDuplicates
from transforms.plan_shards import PlanShards
from transforms.publish_version import DigestListing, PublishVersion, WriteFileIndex
from transforms.reuse_inspections import RecordInspections, ReuseInspections, reuse_sources
from transforms.tiles.cut_chips import CutChips
from transforms.write_shards import WriteShards

__all__ = ["RunServices", "build_pipeline", "add_convert"]


class RunServices(Protocol):
    """What the launch started for this run (pipeline/launch/services.py LocalServices), as the
    builder reads it: it starts and stops nothing itself."""

    analysis_handoff: str | None  # TFT's analysis process's folder; None: TFT in the job
    progress_dir: str | None  # where workers' tallies go for the live display; None: none
    type_inference: bool  # keep Beam's construction-time type inference (an A/B switch)

    def runner(self, options: PipelineOptions) -> PipelineRunner | None:
        """The runner object for `beam.Pipeline(runner=...)`."""


class _LabelSetFn(beam.CombineFn):
    """Sets of label texts -> their sorted union without "" (files without a label)."""

    def create_accumulator(self):
        return set()

    def add_input(self, acc, labels):
        acc |= labels
        return acc

    def merge_accumulators(self, accumulators):
        return set().union(*accumulators)

    def extract_output(self, acc):
        return sorted(acc - {""})


def _shard_examples(shard: ShardInfo) -> int:
    return shard.num_examples


def _add_progress(folder: str, listing, inspection, written, rejected, deduped, reused) -> None:
    """Side branches that count files for the live progress line (pipeline/progress.py)."""

    def count(stage: str, size=lambda _: 1) -> CountProgress:
        return CountProgress(folder, stage, size)

    _ = listing["listed"] | "ProgressListed" >> count("listed", len)
    _ = listing["rejected"] | "ProgressListRejects" >> count("listed")
    _ = inspection["inspected"] | "ProgressInspected" >> count("inspected", len)
    _ = inspection["rejected"] | "ProgressInspectRejects" >> count("inspected")
    _ = written["shards"] | "ProgressWritten" >> count("written", _shard_examples)
    _ = rejected | "ProgressRejected" >> count("rejected")
    _ = deduped["duplicates"] | "ProgressDuplicates" >> count("duplicates")
    if reused is not None:  # Files taken from records count as inspected too.
        _ = reused | "ProgressReused" >> count("inspected", len)


def add_convert(
    p: beam.Pipeline,
    config: ConvertConfig,
    provenance: dict,
    rerun_key: str | None = None,
    services: RunServices | None = None,
) -> beam.PCollection:
    """Add the whole conversion to `p`; returns the PCollection holding the dataset_info dict.

    `rerun_key` (pipeline/versions/fast_rerun.py) is recorded with a versioned run's listing
    digest, so that a rerun of the same command on an unchanged input can reuse the version whole.
    `services`: what the launch started beside the job (none for a library caller).
    """
    listing = p | "List" >> ListImages(config)
    listed = listing["listed"]  # [ListedFile]: batches of names, never bytes
    num_listed = _count_listed(listing)
    # Label map: the sorted set of names over everything listed, stable across runs.
    label_names = (
        listed
        | "Labels" >> beam.Map(lambda batch: {r.label for r in batch})
        # A set-union combine, pre-combined per bundle: no shuffle element per file.
        | "LabelSet" >> beam.CombineGlobally(_LabelSetFn())
    )
    matched = _match_annotations(listed, config)  # None: a run without --annotations
    if matched is not None:
        listed = matched["listed"]  # [ListedFile], each with its objects
    inspection, inspected, reused = _inspect(listed, config, num_listed)  # [InspectedImage]
    deduped = _dedupe(inspected, config)  # {"unique", "duplicates", "clusters"}
    to_plan = deduped["unique"]
    if config.tiles is not None:  # [InspectedChip]: each scene's chips, planned like files
        to_plan = to_plan | "CutChips" >> CutChips(config.tiles, config.seed)
    planned = to_plan | "Plan" >> PlanShards(config)
    handoff = services.analysis_handoff if services else None
    analysis = _Analysis(p, config, deduped["unique"], label_names, handoff)
    groups = analysis.before_writing(planned["groups"])  # ((split, index), [entry])
    written = groups | "Write" >> WriteShards(config, planned["plan"], label_names)
    statistics = analysis.statistics(after=written["shards"])
    rejected = (
        listing["rejected"],
        *((matched["rejected"],) if matched is not None else ()),
        inspection["rejected"],
        written["rejected"],
    ) | "AllRejected" >> beam.Flatten()
    # Live progress: side branches that only count (pipeline/progress.py), no output. Local
    # runs only: a distributed runner's job graph stays as it was (its counters are polled).
    folder = services.progress_dir if services else None
    if folder and is_local_runner(p.options.view_as(StandardOptions).runner):
        _add_progress(folder, listing, inspection, written, rejected, deduped, reused)
    described = p | "Describe" >> DescribeDataset(
        config,
        provenance,
        num_listed=num_listed,
        shards=written["shards"],
        rejected=rejected,
        duplicates=deduped["duplicates"],
        plan=planned["plan"],
        label_names=label_names,
        statistics=statistics,
        objects=_object_outputs(p, matched, written) if config.annotations else None,
        near_duplicates=deduped["clusters"],
    )
    if config.versioned:
        _publish_version(config, described, planned["groups"], listing, rerun_key)
    return described


def _match_annotations(listed, config: ConvertConfig) -> dict | None:
    """The listed files joined to their objects (--annotations), or None."""
    if config.annotations is None or not config.annotations.paths:
        return None
    return listed | "MatchAnnotations" >> MatchAnnotations(config)


def _dedupe(inspected, config: ConvertConfig) -> dict:
    """{"unique": the images without exact duplicates and as --near_duplicates leaves them,
    "duplicates": Duplicate rows (exact, and near ones dropped), "clusters": NearCluster, or
    None with off}. With clusters, one pass drops the duplicates and finds the clustered images."""
    if config.dedupe:
        duplicates = inspected | "Dedupe" >> FindDuplicates()
    else:
        duplicates = inspected.pipeline | "NoDuplicates" >> beam.Create([])
    if config.near_duplicates == "off":
        unique = (
            inspected | "DropDuplicates" >> DropNamed(duplicates) if config.dedupe else inspected
        )
        return {"unique": unique, "duplicates": duplicates, "clusters": None}
    near = inspected | "NearDuplicates" >> FindNearDuplicates(
        config.near_duplicates,
        config.near_threshold,
        duplicates=duplicates if config.dedupe else None,
    )
    if config.near_duplicates == "drop":
        duplicates = (duplicates, near["dropped"]) | "AllDuplicates" >> beam.Flatten()
    return {"unique": near["images"], "duplicates": duplicates, "clusters": near["clusters"]}


def _object_outputs(p, matched, written) -> dict:
    """What Describe writes besides the records of an annotated run."""
    unmatched = matched["unmatched"] if matched is not None else None
    if unmatched is None:  # --masks alone: no annotation files to match
        unmatched = p | "NoUnmatched" >> beam.Create([])
    return {"unmatched": unmatched, "objects_changed": written["objects_changed"]}


def _count_listed(listing) -> beam.PCollection:
    """Every listed file, written or rejected at listing: one number."""
    return (
        (
            listing["listed"] | "BatchSizes" >> beam.Map(len),
            listing["rejected"] | "OnePerReject" >> beam.Map(lambda _: 1),
        )
        | "AllListed" >> beam.Flatten()
        | "CountListed" >> beam.CombineGlobally(sum)
    )


def _inspect(listed, config: ConvertConfig, num_listed):
    """(the inspection's outputs, every InspectedImage batch, the reused ones or None).

    Files whose listing stamp matches a record of the earlier run (--resume) or of the previous
    version (--versioned) skip the read and decode.
    """
    stats_count = num_listed if config.analyze else None
    to_inspect, reused = listed, None
    if reuse_sources(config):
        reuse = listed | "ReuseUnchanged" >> ReuseInspections(config, stats_count)
        to_inspect, reused = reuse["todo"], reuse["reused"]
        if config.previous_version:  # This version's records must cover every file too.
            reuse["carried"] | "RecordReused" >> RecordInspections(config)
    inspection = to_inspect | "Inspect" >> InspectImages(config, stats_count)
    inspection["inspected"] | "RecordInspections" >> RecordInspections(config)
    inspected = inspection["inspected"]
    if reused is not None:
        inspected = (inspected, reused) | "WithReused" >> beam.Flatten()
    return inspection, inspected, reused


class _Analysis:
    """The statistics branch: TFT in the analysis process beside the job where the launch
    started one (`handoff`: its request goes out before the shards are written, its answer is
    awaited after), else TFT's stages in the job itself, or no statistics with --no_analyze."""

    def __init__(self, p: beam.Pipeline, config: ConvertConfig, unique, label_names, handoff):
        self._p, self._aside, self._requested, self._statistics = p, None, None, None
        if not config.analyze:
            self._statistics = p | "NoStatistics" >> beam.Create([None])
            return
        # A dry run only builds the job: keep TFT's scratch folder local, not in --temp_location.
        dry_run = bool(p.options.view_as(TestOptions).dry_run)
        train = config.train_split
        # InspectedImage of the training split: only it feeds the statistics.
        train_images = unique | "TrainImages" >> beam.FlatMap(
            lambda batch: [r for r in batch if r.split == train]
        )
        if handoff and not dry_run:
            self._aside = AnalyzeAside(config.output, label_names, handoff, train)
            self._requested = train_images | "AnalysisRequest" >> self._aside.request()
            return
        temp_dir = tempfile.mkdtemp(prefix="imgrec-dry-run-") if dry_run else None
        self._statistics = train_images | "Analyze" >> AnalyzeDataset(
            config.output, label_names=label_names, train_split=train, temp_dir=temp_dir
        )

    def before_writing(self, groups):
        """The shard groups, held until the analysis request has gone out (if there is one)."""
        if self._requested is None:
            return groups
        return groups | "AfterAnalysisRequest" >> beam.Map(
            lambda group, unused_token: group, beam.pvalue.AsSingleton(self._requested)
        )

    def statistics(self, after) -> beam.PCollection:
        """The statistics; from the analysis process, awaited only `after` the shards."""
        if self._aside is None:
            return self._statistics
        return self._requested | "Analyze" >> self._aside.answer(after=after)


def _publish_version(config, described, groups, listing, rerun_key) -> None:
    index = groups | "IndexFiles" >> WriteFileIndex(config.output)
    digest = (listing["listed"], listing["rejected"]) | "DigestListing" >> DigestListing()
    _ = described | "PublishVersion" >> PublishVersion(config, index, digest, rerun_key)


def build_pipeline(
    config: ConvertConfig,
    options: PipelineOptions,
    provenance: dict,
    rerun_key: str | None = None,
    services: RunServices | None = None,
) -> beam.Pipeline:
    """A ready-to-run `beam.Pipeline` converting `config`'s input into `config.output`.

    Beam's DirectRunner (the default) runs as imgrec's (pipeline/runners/direct.py): never on a
    Prism binary downloaded at run time. Beam's construction-time type inference is off in
    `options`, whoever made them: imgrec declares no element types and checks none, and
    inferring them disassembles every stage's functions. `services`: what the launch started
    for the run (pipeline/launch/services.py); a library caller leaves it out and gets plain
    Beam, TFT in the job's own stages and no progress display."""
    if not (services and services.type_inference):
        options.view_as(TypeOptions).pipeline_type_check = False
    p = beam.Pipeline(runner=_runner(options, services), options=options)
    add_convert(p, config, provenance, rerun_key, services)
    return p


def _runner(options: PipelineOptions, services: RunServices | None) -> PipelineRunner | None:
    if services is not None:
        return services.runner(options)
    if is_direct_runner(options.view_as(StandardOptions).runner):
        return DirectRunner()
    return None
