"""Launch a conversion: parse and check options, prepare the output, run the pipeline, summarise."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import errno
import json
import os
import platform
import sys
import time
from importlib import metadata

import yaml
from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
    TestOptions,
)

from core import retention, schema, storage, versions
from core.errors import ERROR_PREFIX, interrupted
from pipeline import progress
from pipeline.builder import build_pipeline
from pipeline.launch.choose import (
    AUTO_PROCESSES_MIN_FILES,
    configure_runner,
    uses_worker_processes,
)
from pipeline.launch.plan import LaunchPlan, PlanError, read_plan
from pipeline.launch.services import LocalServices, can_fork_workers, local_services
from pipeline.launch_annotations import read_annotations, remove_staging
from pipeline.options import ConvertConfig, ConvertOptions, OptionError
from pipeline.preflight import PreflightError, check_writable, delete_dataset, preflight
from pipeline.quiet import log_hint
from pipeline.report.page import write_report
from pipeline.report.summary import format_summary
from pipeline.runners import dask_runner
from pipeline.versions import fast_rerun
from transforms.annotations.objects import AnnotationError
from transforms.list_images import ManifestError, resolve_local
from transforms.splice_records import splice_lines

__all__ = [
    "ConvertRequest",
    "VERSION",
    "check_writable",
    "convert",
    "parse_convert_args",
    "prepare",
    "print_help",
    "read_request",
    "run_convert",
]

VERSION = "0.1.0"
# Exit status when more than --max_bad_fraction of the listed files were rejected (documented in
# `imgrec --help`): scripts can tell "fix the input" from "the job crashed" (1).
EXIT_TOO_MANY_REJECTS = 3

# Set in a Dataflow Flex Template's launcher container (templates/flex/Dockerfile).
_FLEX_TEMPLATE_ENV = "FLEX_TEMPLATE_PYTHON_PY_FILE"


# The parser PipelineOptions parses with: some of Beam's own option classes call its
# add_value_provider_argument. Private to Beam; plain argparse where it is gone.
_BeamArgumentParser = getattr(pipeline_options, "_BeamArgumentParser", argparse.ArgumentParser)


class _RaisingParser(_BeamArgumentParser):
    """Beam's argument parser, raising OptionError instead of printing usage and exiting."""

    def error(self, message):
        raise OptionError(message)


def _option_classes() -> list[type]:
    """Every registered PipelineOptions subclass once (Beam's own get_all_options does the same)."""
    subset = {}
    for cls in PipelineOptions.__subclasses__():
        subset.setdefault(str(cls), cls)
    return list(subset.values())


def _config_to_argv(path: str, parser: argparse.ArgumentParser, cli_dests: set[str]) -> list[str]:
    """Turn a YAML config of option names into argv, skipping options the command line sets."""
    try:
        with FileSystems.open(resolve_local(path), compression_type="uncompressed") as f:
            data = yaml.safe_load(f.read().decode("utf-8")) or {}
    except OSError as e:
        raise OptionError(f"--config {path}: cannot read it ({e}); check the path") from e
    except yaml.YAMLError as e:
        raise OptionError(f"--config {path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise OptionError(f"--config {path}: expected a mapping of option: value")
    actions = {a.dest: a for a in parser._actions}
    argv = []
    for name, value in data.items():
        dest = str(name).lstrip("-").replace("-", "_")
        if dest not in actions:
            raise OptionError(
                f"--config {path}: unknown option {name!r}; see `imgrec convert --help`"
            )
        if dest in cli_dests or dest == "config":
            continue
        flag = f"--{dest}"
        if isinstance(actions[dest], (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if value:
                argv.append(flag)
        elif isinstance(value, list):
            for v in value:
                argv += [flag, str(v)]
        elif isinstance(value, dict):
            argv += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        else:
            argv += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def parse_convert_args(argv: list[str]) -> tuple[PipelineOptions, ConvertConfig, list[str]]:
    """Parse convert arguments (config file merged, unknown options refused).

    Returns:
        (pipeline options, validated config, the effective argv).

    Raises:
        OptionError: naming the option and the fix.
    """
    if dask_runner.is_dask(dask_runner.runner_in_argv(argv)):
        dask_runner.register_dask_options()  # Beam's --dask_* options exist once imported.
    parser = _RaisingParser(allow_abbrev=False)
    for cls in _option_classes():
        cls._add_argparse_args(parser)
    known, unknown = parser.parse_known_args(argv)
    stray = [a for a in unknown if a.startswith("-")]
    if stray:
        raise OptionError(f"unknown option {stray[0]}; see `imgrec convert --help`")
    if unknown:
        raise OptionError(
            f"unexpected argument {unknown[0]!r}; quote glob patterns so the shell does not "
            "expand them, e.g. --input 'data/*/*.jpg'"
        )
    if known.config:
        cli_dests = {
            a.dest
            for a in parser._actions
            if any(s in argv or any(x.startswith(s + "=") for x in argv) for s in a.option_strings)
        }
        argv = _config_to_argv(known.config, parser, cli_dests) + list(argv)
        parser.parse_known_args(argv)  # Re-validate the merged values.
    options = PipelineOptions(argv)
    return options, ConvertConfig.from_options(options), argv


def _versions() -> dict:
    found = {"imgrec": VERSION, "python": platform.python_version()}
    for dist in ("apache-beam", "tensorflow", "tensorflow-transform", "pillow"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _beam_error_line(exc: BaseException) -> str:
    text = str(exc)
    if ERROR_PREFIX in text:
        return text[text.index(ERROR_PREFIX) + len(ERROR_PREFIX) :].splitlines()[0]
    last = [ln for ln in text.splitlines() if ln.strip()]
    tail = last[-1] if last else type(exc).__name__
    line = f"conversion failed: {type(exc).__name__}: {tail[:500]}"
    if "No space left on device" in text or f"[Errno {errno.ENOSPC}]" in text:
        line += (
            "; free space on the disk of --output (or of the temp dir), then rerun with "
            "--resume to keep the finished shards"
        )
    return line


def print_help() -> None:
    parser = argparse.ArgumentParser(
        prog="imgrec convert",
        description="Convert image files (local, gs://, s3://) into sharded TFRecords.",
        epilog="Any Apache Beam pipeline option passes through (--runner, --direct_num_workers, "
        "--project, --temp_location, --s3_endpoint_url, ...). -v/--verbose shows other "
        "libraries' logs, which otherwise go to a log file named when a run fails. Exit status: "
        "0 done, 1 failed, 2 bad option/input/output, 3 too many rejects (--max_bad_fraction), "
        "130 interrupted. Options reference: docs/options.md.",
    )
    ConvertOptions._add_argparse_args(parser)
    parser.print_help()


@dataclasses.dataclass(frozen=True)
class ConvertRequest:
    """`imgrec convert`'s options read once (command line, --config YAML and Beam's options), then
    prepared once: the preflight run, the version claimed, the runner configured."""

    options: PipelineOptions
    config: ConvertConfig
    argv: tuple[str, ...]  # effective: the --config file's options merged in
    prepared: bool = False

    @property
    def dry_run(self) -> bool:
        """Builds the job and touches nothing."""
        return bool(self.options.view_as(TestOptions).dry_run)

    @property
    def local_paths(self) -> bool:
        """Whether every input, manifest and output is on this machine's disk."""
        paths = [*self.config.inputs, self.config.manifest or "", self.config.output]
        return all(storage.is_local(p) for p in paths)

    @property
    def may_fork(self) -> bool:
        """Whether forked workers may serve the run: worker processes chosen, or not yet chosen."""
        return not self.prepared or uses_worker_processes(self.options)


# What a bad option, input, output or version answers with: one line, exit status 2.
_USAGE_ERRORS = (
    OptionError,
    PreflightError,
    ManifestError,
    versions.VersionError,
    PlanError,
    AnnotationError,
)


def read_request(argv: list[str]) -> ConvertRequest:
    """`imgrec convert ARGV` parsed once; FileSystems gets its --s3_* / GCS options.

    Raises:
        OptionError: naming the option and the fix.
    """
    options, config, argv = parse_convert_args(argv)
    # The preflight lists --input and checks --output through FileSystems: give it the
    # --s3_* / GCS options now, not only to the pipeline's workers.
    FileSystems.set_options(options)
    return ConvertRequest(options, config, tuple(argv))


def prepare(request: ConvertRequest, forked: bool) -> ConvertRequest:
    """The preflight (once), the version claimed, the output cleared for --overwrite and the
    runner configured (`forked`: the zygote may serve worker processes).

    Raises:
        PreflightError, ManifestError, VersionError: naming the problem and the fix.
    """
    options, config, dry_run = request.options, request.config, request.dry_run
    if config.versioned:  # --output is the root; the run writes one version folder in it
        config, version_note = versions.plan_run(config)
    config = read_annotations(config)  # before anything is written: exit 2 on a bad file
    num_files = preflight(config, count_up_to=AUTO_PROCESSES_MIN_FILES)
    if not dry_run:
        check_writable(config, options)
    if config.versioned and not dry_run:
        config = versions.claim_run(config, {"argv": fast_rerun.redact_argv(list(request.argv))})
        print(version_note.format(name=versions.split_version_dir(config.output)[1]))
    if config.overwrite and not dry_run:
        delete_dataset(config.output)
    config = configure_runner(options, list(request.argv), config, num_files, forked)
    return dataclasses.replace(request, config=config, prepared=True)


def convert(plan: LaunchPlan) -> int:
    """`imgrec convert`, as the plan reads it: returns the exit status (0 ok, 2 bad usage, 1
    failed, 3 too many rejects, 130 interrupted).

    The request is read once; on this machine's disk it is prepared before the heavy start, so a
    mistake answers after Beam's import alone. Bucket paths are listed once the services have
    started (their clients start threads; the launch forks before that).
    """
    if plan.convert.help:
        print_help()
        return 0
    started = time.time()
    try:
        request = read_request(list(plan.args))
        if request.local_paths:
            request = prepare(request, can_fork_workers(plan))
    except _USAGE_ERRORS as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 2
    with local_services(plan, request) as services:  # the start-up ends; processes start
        try:
            if not request.prepared:
                request = prepare(request, services.forks_workers)
        except _USAGE_ERRORS as e:
            print(f"imgrec: {e}", file=sys.stderr)
            return 2
        if not uses_worker_processes(request.options):
            services.stop_workers()  # no worker to fork in this run: free the zygote now
        return _run(plan, request, services, started)


def run_convert(argv: list[str]) -> int:
    """`imgrec convert ARGV` for a library caller (no program start-up, no forks)."""
    try:
        plan = read_plan(["convert", *argv])
    except PlanError as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 2
    return convert(plan)


def _run(plan: LaunchPlan, request: ConvertRequest, services: LocalServices, started) -> int:
    """Build, run and summarise the prepared request."""
    options, config = request.options, request.config
    provenance = {
        "versions": _versions(),
        "argv": fast_rerun.redact_argv(list(request.argv)),
        "runner": options.view_as(StandardOptions).runner,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
    }
    # What a no-change rerun compares (pipeline/versions/fast_rerun.py): the command line as given.
    rerun_key = fast_rerun.run_key(list(plan.args), plan.convert)
    pipeline = build_pipeline(config, options, provenance, rerun_key, services)
    try:
        status, result = _run_pipeline(pipeline, options, services, plan.log_path)
    finally:
        remove_staging(config)
    if status is None:
        _summarise(config, options, result, started)
        status = 0
    return status


def _run_pipeline(pipeline, options: PipelineOptions, services: LocalServices, log_path):
    """Run and wait (a Dataflow job: submit, show its link, poll its counters).

    Returns:
        (None, the result) when there is a dataset to summarise, else (exit status, None).
    """
    runner = str(options.view_as(StandardOptions).runner or "")
    remote = "Dataflow" in runner
    dry_run = bool(options.view_as(TestOptions).dry_run)
    try:
        # Local runs show live counts fed by the workers (pipeline/progress.py).
        every = services.switches.progress_every_s
        with progress.live(services.progress_dir, every):
            result = pipeline.run()
            if dry_run:
                return 0, None  # The runner reported the job it built; nothing ran to summarise.
            if os.environ.get(_FLEX_TEMPLATE_ENV):
                return 0, None  # Dataflow's rule for template launchers: submit, then exit.
            _wait(result, options, remote)
    except (KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - any failure: one clear line
        return _failure_status(e, remote, log_path), None
    return None, result


def _wait(result, options: PipelineOptions, remote: bool) -> None:
    # A template launch (Flex Template) only writes the job's spec: no job, no id yet.
    if not (remote and getattr(result, "has_job", False)):
        result.wait_until_finish()
        return
    gcp = options.view_as(GoogleCloudOptions)
    print(
        f"imgrec: Dataflow job {result.job_id()}: https://console.cloud.google.com/"
        f"dataflow/jobs/{gcp.region}/{result.job_id()}?project={gcp.project}"
    )
    with progress.poll_remote(result):  # the job's counters while it runs
        result.wait_until_finish()


def _failure_status(e: BaseException, remote: bool, log_path: str | None) -> int:
    """One line on the terminal for a failed or interrupted run; returns the exit status."""
    if not interrupted(e):  # Beam re-raises a DoFn's KeyboardInterrupt as a RuntimeError
        print(f"imgrec: {_beam_error_line(e)}{log_hint(log_path)}", file=sys.stderr)
        # Too many rejects is the input's problem, not a crash: its own status (see --help).
        text = f"{type(e).__name__} {e}"  # Beam wraps ours
        too_many = "TooManyRejectsError" in text or "TooManyUnmatchedError" in text
        return EXIT_TOO_MANY_REJECTS if too_many else 1
    if remote:
        print(
            "imgrec: stopped waiting; the Dataflow job keeps running (cancel it with "
            "`gcloud dataflow jobs cancel JOB_ID --region REGION`)",
            file=sys.stderr,
        )
    else:
        print("imgrec: interrupted; rerun with --resume to keep finished shards", file=sys.stderr)
    return 130


def _summarise(config: ConvertConfig, options: PipelineOptions, result, started: float) -> None:
    """The summary lines, the version's lines and the report, once the dataset is written."""
    info_path = storage.join(config.output, schema.DATASET_INFO)
    if not storage.exists(info_path):
        return
    info = json.loads(storage.read_bytes(info_path))
    print(format_summary(info, config.output, time.time() - started))
    if config.versioned:
        _print_version_lines(config, result)
    if not options.view_as(ConvertOptions).no_report:
        _write_report(config.output)


def _print_version_lines(config: ConvertConfig, result) -> None:
    print(versions.publication_line(config.output))
    reused = versions.reuse_line(config, result)
    if reused:
        print(reused)
    root = versions.split_version_dir(config.output)[0]
    kept = retention.retention_line(root, config.keep_versions, config.keep_for_s)
    if kept:  # versions --keep_versions let go that a reader or --keep_for still holds
        print(kept)
    for line in splice_lines(config, result):  # records taken from the previous version
        print(line)


def _write_report(output: str) -> None:
    """report.html next to dataset_info.json; a report that fails never fails the conversion."""
    try:
        path = write_report(output)
    except Exception as e:  # noqa: BLE001 - the dataset is written; the report is a view of it
        print(
            f"imgrec: report not written ({type(e).__name__}: {str(e)[:200]}); "
            f"retry with `imgrec preview {output}`",
            file=sys.stderr,
        )
        return
    print(f"  report      {path}")
