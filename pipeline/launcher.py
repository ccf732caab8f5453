"""Launch a conversion: parse and check options, prepare the output, run the pipeline, summarise."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import errno
import itertools
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid

from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
    TestOptions,
)

from core import names, retention, schema, storage, versions
from core.errors import ERROR_PREFIX, interrupted
from pipeline.launch.choose import AUTO_PROCESSES_MIN_FILES, configure_runner
from pipeline.launch.plan import LaunchPlan, PlanError, read_plan
from pipeline.options import ConvertConfig, ConvertOptions, OptionError
from pipeline.report.summary import format_summary
from pipeline.runners import dask_runner
from pipeline.versions import fast_rerun
from transforms.list_images import ManifestError, read_manifest_rows, resolve_local

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


class PreflightError(ValueError):
    """The input or output is not usable as given; the message names it and the fix."""


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


def _matched_paths(pattern: str, limit: int | None = None, what: str = "--input") -> list[str]:
    """Files `pattern` matches (at most `limit`); object-store folder placeholders left out."""
    try:
        local = names.local_path(pattern)  # an --input whose name is not UTF-8
        result = FileSystems.match([local], limits=[limit] if limit else None)[0]
    except (OSError, ValueError) as e:
        detail = str(e).splitlines()[0][:300]
        if "No files found" in detail or "matched no files" in detail:
            return []
        raise PreflightError(f"{what} {pattern}: cannot list it ({detail})") from e
    return [m.path for m in result.metadata_list if not m.path.endswith("/")]


def _existing_output(output: str) -> tuple[bool, bool]:
    """(holds a finished dataset, holds partial output of an earlier run)."""
    finished = storage.exists(storage.join(output, schema.DATASET_INFO))
    partial = False
    for pattern in (
        storage.join(output, "*", "*-of-*.tfrecord*"),
        storage.join(output, ".imgrec", "**"),
    ):
        if _matched_paths(pattern, 1, what="--output"):
            partial = True
            break
    return finished, partial


def _delete_dataset(output: str) -> None:
    """Remove what imgrec writes in `output` (for --overwrite); leave anything else alone."""
    patterns = [
        storage.join(output, schema.DATASET_INFO),
        storage.join(output, schema.REJECTED),
        storage.join(output, schema.DUPLICATES),
        storage.join(output, "report.html"),  # pipeline/report/page.py REPORT_FILE
        storage.join(output, "*", "*-of-*.tfrecord*"),
        storage.join(output, "*", ".tmp-*"),
        storage.join(output, ".imgrec", "**"),
        storage.join(output, "transform_fn", "**"),
        storage.join(output, "transformed_metadata", "**"),
    ]
    paths = set()
    for pattern in patterns:
        paths.update(_matched_paths(pattern, what="--output"))
    storage.delete_quietly(sorted(paths))
    if "://" not in output:  # Empty local folders left by the deletion.
        for sub in ("transform_fn", "transformed_metadata", ".imgrec"):
            d = os.path.join(output, sub)
            if os.path.isdir(d):
                import shutil

                shutil.rmtree(d, ignore_errors=True)


def preflight(config: ConvertConfig, count_up_to: int = 1) -> int:
    """Check inputs exist and the output is free, before anything is written.

    Returns:
        How many input files (or manifest rows) there are, counted up to `count_up_to`
        (at least 1: the count stops early, so a huge input is not listed twice).

    Raises:
        PreflightError / ManifestError: naming the problem and the fix.
    """
    if config.manifest:
        if not storage.exists(names.local_path(config.manifest)):
            raise ManifestError(f"--manifest {config.manifest}: no such file; check the path")
        rows = read_manifest_rows(config.manifest)
        count = sum(1 for _ in itertools.islice(rows, max(1, count_up_to)))
        if not count:
            raise ManifestError(
                f"--manifest {config.manifest}: no rows; expected path,label[,split]"
            )
    else:
        count = 0
        for pattern in config.inputs:
            matched = len(_matched_paths(resolve_local(pattern), max(1, count_up_to)))
            if not matched:
                raise PreflightError(
                    f"--input {names.printable(pattern)}: matched no files; check the path, "
                    "and quote glob "
                    "patterns (--input 'data/*/*.jpg'); use '**' to match across folders"
                    f"{_bracket_hint(pattern)}"
                )
            count += matched
    try:
        finished, partial = _existing_output(config.output)
    except PreflightError as e:
        raise PreflightError(
            f"--output {config.output}: cannot list it ({_first_line(e.__cause__ or e)}); "
            f"{_write_hint(config.output)}"
        ) from e
    if finished and not (config.overwrite or config.resume):
        raise PreflightError(
            f"--output {config.output} already holds a dataset ({schema.DATASET_INFO}); "
            "pass --overwrite to replace it, or choose another --output"
        )
    if partial and not finished and not (config.overwrite or config.resume):
        raise PreflightError(
            f"--output {config.output} holds the partial output of an earlier run; pass "
            "--resume to continue it, or --overwrite to start over"
        )
    return count


# Written and deleted by the preflight's write check; the temporary prefix keeps it out of every
# listing and shard glob should the delete fail.
_PROBE_NAME = f"{storage.TEMP_PREFIX}imgrec-preflight-probe"
_PROBE_BYTES = b"imgrec preflight: checks that this location is writable; safe to delete\n"
# What to check when a store refuses the probe, by scheme.
_WRITE_HINTS = {
    "s3": "check that the bucket exists and that the AWS credentials (AWS_ACCESS_KEY_ID / "
    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE) may put and delete objects in it; for an S3-compatible "
    "server pass --s3_endpoint_url and --s3_region_name",
    "gs": "check that the bucket exists and that the account (gcloud auth application-default "
    "login, or GOOGLE_APPLICATION_CREDENTIALS) may create and delete objects in it",
    None: "check that this user can create and delete files there, or choose another --output",
}


def _write_hint(output: str) -> str:
    return _WRITE_HINTS.get(FileSystems.get_scheme(output), _WRITE_HINTS[None])


def _first_line(exc: BaseException) -> str:
    """The innermost error of Beam's nested BeamIOErrors, on one line (at most 300 chars)."""
    from apache_beam.io.filesystem import BeamIOError

    for _ in range(4):  # Match -> List -> the client's error: a few levels at most
        inner = [
            v
            for v in (getattr(exc, "exception_details", None) or {}).values()
            if isinstance(v, BaseException)
        ]
        if not isinstance(exc, BeamIOError) or not inner:
            break
        exc = inner[0]
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


@contextlib.contextmanager
def _storage_logs_muted():
    """Mute log records while probing: the storage clients log a refused write with a traceback
    (Beam's S3 uploader on the root logger), and the preflight reports it in its own line."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)


def _probe_output(output: str) -> None:
    """Write, rename and delete one small object in `output` through Beam's FileSystems.

    That is what every writer of the job does (shards, reports, the TFT export: temp name, then
    rename). A local folder the probe had to create is removed again.
    """
    local = storage.is_local(output)
    created = None
    if local:
        missing = os.path.abspath(output)
        while not os.path.exists(os.path.dirname(missing)) and os.path.dirname(missing) != missing:
            missing = os.path.dirname(missing)
        created = missing if not os.path.exists(missing) else None
    probe = storage.join(output, f"{_PROBE_NAME}-{uuid.uuid4().hex}")
    try:
        with _storage_logs_muted():
            storage.write_bytes_atomic(probe, _PROBE_BYTES, mime_type="text/plain")
            storage.delete(probe)
    finally:
        if created and os.path.isdir(created):
            shutil.rmtree(created, ignore_errors=True)


def _probe_scratch(scratch: str) -> None:
    """Make and remove a folder in TFT's scratch through TensorFlow's file layer (TFT's writer)."""
    if storage.is_local(scratch):
        folder = tempfile.mkdtemp(prefix="imgrec-preflight-", dir=scratch)
        try:
            with open(os.path.join(folder, "probe"), "wb") as f:
                f.write(_PROBE_BYTES)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    import tensorflow as tf  # Remote runners only: the layer TFT itself writes with.

    folder = os.path.join(scratch, f"imgrec-preflight-{uuid.uuid4().hex}")
    tf.io.gfile.makedirs(folder)
    with tf.io.gfile.GFile(os.path.join(folder, "probe"), "wb") as f:
        f.write(_PROBE_BYTES)
    tf.io.gfile.rmtree(folder)


def check_writable(config: ConvertConfig, options: PipelineOptions) -> None:
    """Fail before the job starts unless every writer it will use can write where it writes.

    The output gets a probe object written (temp name, rename) and deleted through Beam's
    FileSystems; with analysis on, tensorflow-transform's scratch folder (`scratch_root`) gets
    one through TensorFlow's file layer. Nothing is left behind.

    Raises:
        PreflightError: naming the location and what to check.
    """
    try:
        _probe_output(config.output)
    except Exception as e:  # noqa: BLE001 - any failure means the job could not finish
        raise PreflightError(
            f"--output {config.output}: cannot write there ({_first_line(e)}); "
            f"{_write_hint(config.output)}"
        ) from e
    if not config.analyze:
        return
    from transforms.analyze import scratch_root

    try:
        scratch = scratch_root(options)
        _probe_scratch(scratch)
    except Exception as e:  # noqa: BLE001 - any failure means the analysis could not finish
        raise PreflightError(
            "tensorflow-transform's scratch folder (the system temp dir, TMPDIR, on a local "
            "runner; --temp_location on Dataflow) is not writable "
            f"({_first_line(e)}); point TMPDIR or --temp_location at a writable folder, or "
            "pass --no_analyze"
        ) from e


def _bracket_hint(pattern: str) -> str:
    """A hint for a local pattern whose folder names hold "[" (read as a one-character class),
    when the folder exists with that name taken literally; else ""."""
    wild = min((i for i, c in enumerate(pattern) if c in "*?"), default=len(pattern))
    folder = pattern[:wild].rsplit("/", 1)[0] if "/" in pattern[:wild] else ""
    if "[" not in folder or not storage.is_local(folder) or not os.path.isdir(folder):
        return ""
    return (
        f"; in a pattern, [...] matches one of the characters inside, so {folder!r} is not "
        f"read as that folder's name: write [[] for each literal [ "
        f"(--input '{storage.glob_escape(folder)}{pattern[len(folder) :]}')"
    )


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
        _delete_dataset(config.output)
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
