"""The convert pipeline as a plain function: list -> inspect -> dedupe -> plan -> write -> describe."""

from __future__ import annotations

import tempfile

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions, TestOptions

from core import beam_compat
from pipeline.options import ConvertConfig
from pipeline.runners import forked_workers
from transforms.count_progress import CountProgress
from transforms.dedupe import DropDuplicates
from transforms.describe import DescribeDataset
from transforms.inspect_images import InspectImages
from transforms.list_images import ListImages
from transforms.plan_shards import PlanShards
from transforms.reuse_inspections import RecordInspections, ReuseInspections, reuse_sources
from transforms.write_shards import WriteShards

__all__ = ["build_pipeline", "add_convert"]


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


def _shard_examples(shard: dict) -> int:
    return int(shard.get("num_examples", 0))


# Runners whose workers run on this machine and inherit the progress folder's variable.
_LOCAL_RUNNERS = ("DirectRunner", "direct", "BundleBasedDirectRunner", "SwitchingDirectRunner")


def _add_progress(listing, inspection, written, rejected, deduped) -> None:
    """Side branches that count files for the live progress line (pipeline/progress.py)."""
    listed = listing["listed"]
    _ = listed | "ProgressListed" >> CountProgress("listed", len)
    _ = listing["rejected"] | "ProgressListRejects" >> CountProgress("listed")
    _ = inspection["inspected"] | "ProgressInspected" >> CountProgress("inspected", len)
    _ = inspection["rejected"] | "ProgressInspectRejects" >> CountProgress("inspected")
    _ = written["shards"] | "ProgressWritten" >> CountProgress("written", _shard_examples)
    _ = rejected | "ProgressRejected" >> CountProgress("rejected")
    _ = deduped["duplicates"] | "ProgressDuplicates" >> CountProgress("duplicates")


def _analysis_handoff(options: PipelineOptions) -> str | None:
    """The started analysis process's hand-off folder, if this job can use it
    (pipeline/analysis_process.py): a runner on this machine, TFT's scratch in the temp dir."""
    runner = str(options.view_as(StandardOptions).runner or "DirectRunner")
    if runner not in _LOCAL_RUNNERS:
        return None
    from pipeline import analysis_process
    from transforms.analyze import scratch_root

    return analysis_process.claim(scratch_root(options))


def add_convert(
    p: beam.Pipeline, config: ConvertConfig, provenance: dict, rerun_key: str | None = None
) -> beam.PCollection:
    """Add the whole conversion to `p`; returns the PCollection holding the dataset_info dict.

    `rerun_key` (pipeline/versions/fast_rerun.py) is recorded with a versioned run's listing digest, so
    that a rerun of the same command on an unchanged input can reuse the version whole.
    """
    listing = p | "List" >> ListImages(config)
    listed = listing["listed"]  # [ListedFile]: batches of names, never bytes

    num_listed = (
        (
            listed | "BatchSizes" >> beam.Map(len),
            listing["rejected"] | "OnePerReject" >> beam.Map(lambda _: 1),
        )
        | "AllListed" >> beam.Flatten()
        | "CountListed" >> beam.CombineGlobally(sum)
    )
    # Label map: the sorted set of names over everything listed, stable across runs.
    label_names = (
        listed
        | "Labels" >> beam.Map(lambda batch: {r["label"] for r in batch})
        # A set-union combine, pre-combined per bundle: no shuffle element per file.
        | "LabelSet" >> beam.CombineGlobally(_LabelSetFn())
    )

    stats_count = num_listed if config.analyze else None
    to_inspect, reused = listed, None
    if reuse_sources(config):
        # Files whose listing stamp matches a record of the earlier run (--resume) or of the
        # previous version (--versioned) skip the read and decode.
        reuse = listed | "ReuseUnchanged" >> ReuseInspections(config, stats_count)
        to_inspect, reused = reuse["todo"], reuse["reused"]
        if config.previous_version:  # This version's records must cover every file too.
            reuse["carried"] | "RecordReused" >> RecordInspections(config)
    inspection = to_inspect | "Inspect" >> InspectImages(config, stats_count)
    inspection["inspected"] | "RecordInspections" >> RecordInspections(config)
    inspected = inspection["inspected"]
    if reused is not None:
        inspected = (inspected, reused) | "WithReused" >> beam.Flatten()
    # [InspectedImage]
    deduped = (
        inspected | "Dedupe" >> DropDuplicates()
        if config.dedupe
        else {
            "unique": inspected,
            "duplicates": p | "NoDuplicates" >> beam.Create([]),
        }
    )
    unique = deduped["unique"]

    planned = unique | "Plan" >> PlanShards(config)
    # ((split, index), [entry]): an entry is a tuple of plan_shards.WRITER_FIELDS
    groups = planned["groups"]

    handoff = aside = requested = None
    if config.analyze:
        # A dry run only builds the job: keep TFT's scratch folder local, not in --temp_location.
        dry_run = bool(p.options.view_as(TestOptions).dry_run)
        train = config.train_split
        # InspectedImage of the training split: only it feeds the statistics.
        train_images = unique | "TrainImages" >> beam.FlatMap(
            lambda batch: [r for r in batch if r["split"] == train]
        )
        handoff = None if dry_run else _analysis_handoff(p.options)
        if handoff:  # TFT runs in the analysis process started with the command
            from transforms.analyze_aside import AnalyzeAside

            aside = AnalyzeAside(config.output, label_names, handoff, train)
            requested = train_images | "AnalysisRequest" >> aside.request()
            # The shards are written while TFT analyses: only after the request, and the job
            # waits for the answer only after the shards (AnalyzeAside).
            groups = groups | "AfterAnalysisRequest" >> beam.Map(
                lambda group, unused_token: group, beam.pvalue.AsSingleton(requested)
            )
        else:
            from transforms.analyze import AnalyzeDataset  # TFT import only when it is used.

            temp_dir = tempfile.mkdtemp(prefix="imgrec-dry-run-") if dry_run else None
            statistics = train_images | "Analyze" >> AnalyzeDataset(
                config.output, label_names=label_names, train_split=train, temp_dir=temp_dir
            )
    else:
        statistics = p | "NoStatistics" >> beam.Create([None])
    if handoff is None:  # a started analysis process has no use in this job: end it now
        from pipeline import analysis_process

        analysis_process.stop()

    written = groups | "Write" >> WriteShards(config, planned["plan"], label_names)
    if aside is not None:
        statistics = requested | "Analyze" >> aside.answer(after=written["shards"])

    rejected = (
        listing["rejected"],
        inspection["rejected"],
        written["rejected"],
    ) | "AllRejected" >> beam.Flatten()
    # Live progress: side branches that only count (pipeline/progress.py), no output. Local
    # runs only: a distributed runner's job graph stays as it was (its counters are polled).
    runner = str(p.options.view_as(StandardOptions).runner or "DirectRunner")
    if runner in _LOCAL_RUNNERS:
        _add_progress(listing, inspection, written, rejected, deduped)
        if reused is not None:  # Files taken from records count as inspected too.
            _ = reused | "ProgressReused" >> CountProgress("inspected", len)
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
    )
    if config.versioned:
        from transforms.publish_version import DigestListing, PublishVersion, WriteFileIndex

        index = planned["groups"] | "IndexFiles" >> WriteFileIndex(config.output)
        digest = (listed, listing["rejected"]) | "DigestListing" >> DigestListing()
        _ = described | "PublishVersion" >> PublishVersion(config, index, digest, rerun_key)
    return described


def build_pipeline(
    config: ConvertConfig,
    options: PipelineOptions,
    provenance: dict,
    rerun_key: str | None = None,
) -> beam.Pipeline:
    """A ready-to-run `beam.Pipeline` converting `config`'s input into `config.output`.

    Beam's DirectRunner (the default) runs as `beam_compat.DirectRunner`: never on a Prism
    binary downloaded at run time. Beam's construction-time type inference is off in `options`
    (`beam_compat.skip_type_inference`), whoever made them: the command line, a test or a
    script building the job itself."""
    beam_compat.skip_type_inference(options)
    runner = options.view_as(StandardOptions).runner
    direct = None
    if beam_compat.is_direct_runner(runner):
        # Worker processes forked by `imgrec convert`'s zygote, where it runs one.
        direct = beam_compat.DirectRunner(worker_command=forked_workers.command())
    p = beam.Pipeline(runner=direct, options=options)
    add_convert(p, config, provenance, rerun_key)
    return p
