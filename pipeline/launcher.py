"""Launch a conversion: parse and check options, prepare the output, run the pipeline, summarise."""

from __future__ import annotations

import argparse
import datetime
import errno
import json
import os
import platform
import sys
import time

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
from pipeline.launch.choose import AUTO_PROCESSES_MIN_FILES, configure_runner
from pipeline.launch.plan import LaunchPlan, PlanError, read_plan
from pipeline.options import ConvertConfig, ConvertOptions, OptionError
from pipeline.preflight import PreflightError, check_writable, delete_dataset, preflight
from pipeline.report.summary import format_summary
from pipeline.runners import dask_runner
from pipeline.versions import fast_rerun
from transforms.list_images import ManifestError, resolve_local

__all__ = [
    "run_convert",
    "check_options",
    "parse_convert_args",
    "PreflightError",
    "IMGREC_VERSION",
    "print_help",
    "check_writable",
]

IMGREC_VERSION = "0.1.0"
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
    import yaml

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
    from importlib import metadata

    found = {"imgrec": IMGREC_VERSION, "python": platform.python_version()}
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


def check_options(argv: list[str]) -> int | None:
    """Parse `argv` as `run_convert` will, before the heavy imports and forks: `--help`, a bad
    option and (on this machine's disk) an input that matches nothing, a missing manifest or an
    output that already holds a dataset are answered after Beam's import alone. Returns the exit
    status to end with, or None to go on."""
    if any(a in ("-h", "--help") for a in argv):
        print_help()
        return 0
    try:
        _, config, _ = parse_convert_args(argv)
        # `run_convert` runs the same preflight again (and counts the files): on local paths
        # this one stops at each pattern's first match, a few ms; a --manifest is read whole
        # by both (and by the listing). Buckets wait for it: their clients start threads, and
        # the program forks after this.
        paths = [*config.inputs, config.manifest or "", config.output]
        if not config.versioned and all(storage.is_local(p) for p in paths):
            preflight(config)
    except (OptionError, PreflightError, ManifestError) as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 2
    return None


def run_convert(argv: list[str], plan: LaunchPlan | None = None) -> int:
    """`imgrec convert ARGS`: returns the process exit status (0 ok, 2 bad usage, 1 failed).

    `plan` is the launch's reading of the command line (pipeline/launch/plan.py); a library
    caller may leave it out.
    """
    if any(a in ("-h", "--help") for a in argv):
        print_help()
        return 0
    started = time.time()
    try:
        plan = plan or read_plan(["convert", *argv])
        options, config, argv = _prepare(list(plan.args), plan)
    except (OptionError, PreflightError, ManifestError, versions.VersionError, PlanError) as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 2
    provenance = {
        "versions": _versions(),
        "argv": fast_rerun.redact_argv(argv),
        "runner": options.view_as(StandardOptions).runner,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
    }
    from pipeline.builder import build_pipeline  # Heavy transforms only once options are good.

    # What a no-change rerun compares (pipeline/versions/fast_rerun.py): the command line as given.
    rerun_key = fast_rerun.run_key(list(plan.args), plan.convert)
    pipeline = build_pipeline(config, options, provenance, rerun_key=rerun_key)
    status, result = _run_pipeline(pipeline, options)
    if status is None:
        _summarise(config, options, result, started)
        status = 0
    return status


def _prepare(argv: list[str], plan: LaunchPlan):
    """Parse, preflight and claim the output: (options, config, effective argv) to build from.

    Raises:
        OptionError, PreflightError, ManifestError, VersionError: naming the problem and the fix.
    """
    options, config, argv = parse_convert_args(argv)
    # The preflight lists --input and checks --output through FileSystems: give it the
    # --s3_* / GCS options now, not only to the pipeline's workers.
    FileSystems.set_options(options)
    dry_run = bool(options.view_as(TestOptions).dry_run)  # builds the job and touches nothing
    if config.versioned:  # --output is the root; the run writes one version folder in it
        config, version_note = versions.plan_run(config)
    num_files = preflight(config, count_up_to=AUTO_PROCESSES_MIN_FILES)
    if not dry_run:
        check_writable(config, options)
    if config.versioned and not dry_run:
        config = versions.claim_run(config, {"argv": fast_rerun.redact_argv(argv)})
        print(version_note.format(name=versions.split_version_dir(config.output)[1]))
    if config.overwrite and not dry_run:
        delete_dataset(config.output)
    config = configure_runner(options, argv, config, num_files)
    return options, config, argv


def _run_pipeline(pipeline, options: PipelineOptions):
    """Run and wait (a Dataflow job: submit, show its link, poll its counters).

    Returns:
        (None, the result) when there is a dataset to summarise, else (exit status, None).
    """
    runner = str(options.view_as(StandardOptions).runner or "")
    remote = "Dataflow" in runner
    dry_run = bool(options.view_as(TestOptions).dry_run)
    from pipeline import progress

    try:
        # Local runs show live counts fed by the workers (pipeline/progress.py).
        with progress.live(enabled=not remote and not dry_run):
            result = pipeline.run()
            if dry_run:
                return 0, None  # The runner reported the job it built; nothing ran to summarise.
            if os.environ.get(_FLEX_TEMPLATE_ENV):
                return 0, None  # Dataflow's rule for template launchers: submit, then exit.
            _wait(result, options, remote)
    except (KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - any failure: one clear line
        return _failure_status(e, remote), None
    return None, result


def _wait(result, options: PipelineOptions, remote: bool) -> None:
    # A template launch (Flex Template) only writes the job's spec: no job, no id yet.
    if not (remote and getattr(result, "has_job", False)):
        result.wait_until_finish()
        return
    from pipeline import progress

    gcp = options.view_as(GoogleCloudOptions)
    print(
        f"imgrec: Dataflow job {result.job_id()}: https://console.cloud.google.com/"
        f"dataflow/jobs/{gcp.region}/{result.job_id()}?project={gcp.project}"
    )
    with progress.poll_remote(result):  # the job's counters while it runs
        result.wait_until_finish()


def _failure_status(e: BaseException, remote: bool) -> int:
    """One line on the terminal for a failed or interrupted run; returns the exit status."""
    if not interrupted(e):  # Beam re-raises a DoFn's KeyboardInterrupt as a RuntimeError
        from pipeline.quiet import log_hint

        print(f"imgrec: {_beam_error_line(e)}{log_hint()}", file=sys.stderr)
        # Too many rejects is the input's problem, not a crash: its own status (see --help).
        too_many = "TooManyRejectsError" in f"{type(e).__name__} {e}"  # Beam wraps ours
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
    from transforms.splice_records import splice_lines

    for line in splice_lines(config, result):  # records taken from the previous version
        print(line)


def _write_report(output: str) -> None:
    """report.html next to dataset_info.json; a report that fails never fails the conversion."""
    from pipeline.report.page import write_report

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
