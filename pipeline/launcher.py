"""Launch a conversion: parse and check options, prepare the output, run the pipeline, summarise."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import sys
import time

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    StandardOptions,
    TestOptions,
    _BeamArgumentParser,
)

from pipeline import dask_runner, schema, storage
from pipeline.errors import ERROR_PREFIX
from pipeline.options import ConvertConfig, ConvertOptions, OptionError
from transforms.list_images import ManifestError, read_manifest_rows, resolve_local

__all__ = ["run_convert", "parse_convert_args", "PreflightError", "IMGREC_VERSION", "print_help"]

IMGREC_VERSION = "0.1.0"

# Option names whose values never reach logs, provenance or error messages.
_SECRET_RE = re.compile(r"(secret|token|password|credential|access_key|key_id|session)", re.I)


class PreflightError(ValueError):
    """The input or output is not usable as given; the message names it and the fix."""


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


def _redact(argv: list[str]) -> list[str]:
    out, hide_next = [], False
    for a in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
            continue
        if a.startswith("--") and _SECRET_RE.search(a.split("=", 1)[0]):
            if "=" in a:
                out.append(a.split("=", 1)[0] + "=<redacted>")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(a)
    return out


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
        result = FileSystems.match([pattern], limits=[limit] if limit else None)[0]
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


def preflight(config: ConvertConfig) -> None:
    """Check inputs exist and the output is free, before anything is written.

    Raises:
        PreflightError / ManifestError: naming the problem and the fix.
    """
    if config.manifest:
        if not storage.exists(config.manifest):
            raise ManifestError(f"--manifest {config.manifest}: no such file; check the path")
        rows = read_manifest_rows(config.manifest)
        if next(rows, None) is None:
            raise ManifestError(
                f"--manifest {config.manifest}: no rows; expected path,label[,split]"
            )
    else:
        for pattern in config.inputs:
            if not _matched_paths(resolve_local(pattern), 1):
                raise PreflightError(
                    f"--input {pattern}: matched no files; check the path, and quote glob "
                    "patterns (--input 'data/*/*.jpg'); use '**' to match across folders"
                )
    finished, partial = _existing_output(config.output)
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


def _configure_runner(options: PipelineOptions, argv: list[str], config: ConvertConfig):
    """Default to DirectRunner with one worker per core; returns the config to run.

    Several workers run as processes: on 12,000 photos, 2 processes converted ~1.3x faster than
    2 threads of one process (Beam's per-element Python work contends for the GIL), at the cost
    of ~2.5 s more start-up and one more TensorFlow in RAM (bench/convert.py). One worker runs
    in-process and decodes on one thread per core (decoders release the GIL).
    """
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = "DirectRunner"
    decode_threads = 1  # Distributed runners run one SDK process per core already.
    if dask_runner.is_dask(standard.runner):
        standard.runner = dask_runner.IMGREC_DASK_RUNNER  # Beam's, with fixes (docs/runners.md)
    if standard.runner in ("DirectRunner", "direct", "BundleBasedDirectRunner"):
        direct = options.view_as(DirectOptions)
        cores = os.cpu_count() or 1
        workers = options.view_as(ConvertOptions).workers or cores
        if not any(a.startswith("--direct_num_workers") for a in argv):
            direct.direct_num_workers = workers
        if not any(a.startswith("--direct_running_mode") for a in argv):
            direct.direct_running_mode = "multi_processing" if workers > 1 else "in_memory"
        decode_threads = max(1, cores // max(1, direct.direct_num_workers or 1))
    if not options.view_as(ConvertOptions).decode_threads:
        config = dataclasses.replace(config, decode_threads=decode_threads)
    return config


def _beam_error_line(exc: BaseException) -> str:
    text = str(exc)
    if ERROR_PREFIX in text:
        return text[text.index(ERROR_PREFIX) + len(ERROR_PREFIX) :].splitlines()[0]
    last = [ln for ln in text.splitlines() if ln.strip()]
    tail = last[-1] if last else type(exc).__name__
    return f"conversion failed: {type(exc).__name__}: {tail[:500]}"


def format_summary(info: dict, output: str, seconds: float) -> str:
    """The human summary printed after a conversion."""
    lines = [
        f"imgrec: converted {info['num_listed']} listed files in {seconds:.1f} s "
        f"({info['num_listed'] / max(seconds, 1e-9):.0f} files/s) -> {output}"
    ]
    parts = []
    for split, s in info["splits"].items():
        parts.append(
            f"{split} {s['num_examples']} ({s['num_shards']} shard"
            f"{'s' if s['num_shards'] != 1 else ''}, {s['num_bytes'] / 1e6:.1f} MB)"
        )
    lines.append(f"  written     {info['num_written']:>7}   " + ", ".join(parts))
    reasons = ", ".join(f"{k} {v}" for k, v in info.get("rejected_by_reason", {}).items())
    lines.append(f"  rejected    {info['num_rejected']:>7}   {reasons}".rstrip())
    lines.append(f"  duplicates  {info['num_duplicates']:>7}")
    transcoded = ", ".join(f"{k} {v}" for k, v in info.get("transcoded_by_reason", {}).items())
    if transcoded:
        lines.append(
            f"  transcoded  {sum(info['transcoded_by_reason'].values()):>7}   {transcoded}"
        )
    total = sum(s["num_bytes"] for s in info["splits"].values())
    nshards = sum(s["num_shards"] for s in info["splits"].values())
    lines.append(
        f"  shards      {nshards:>7}   {total / 1e6:.1f} MB in all; labels: "
        f"{len(info['label_names'])}"
    )
    if info.get("num_rejected"):
        lines.append(f"  reasons per file: {storage.join(output, schema.REJECTED)}")
    return "\n".join(lines)


def print_help() -> None:
    parser = argparse.ArgumentParser(
        prog="imgrec convert",
        description="Convert image files (local, gs://, s3://) into sharded TFRecords.",
        epilog="Any Apache Beam pipeline option passes through (--runner, --direct_num_workers, "
        "--project, --temp_location, --s3_endpoint_url, ...).",
    )
    ConvertOptions._add_argparse_args(parser)
    parser.print_help()


def run_convert(argv: list[str]) -> int:
    """`imgrec convert ARGS`: returns the process exit status (0 ok, 2 bad usage, 1 failed)."""
    if any(a in ("-h", "--help") for a in argv):
        print_help()
        return 0
    started = time.time()
    try:
        options, config, argv = parse_convert_args(argv)
        # The preflight lists --input and checks --output through FileSystems: give it the
        # --s3_* / GCS options now, not only to the pipeline's workers.
        FileSystems.set_options(options)
        dry_run = bool(options.view_as(TestOptions).dry_run)
        preflight(config)
        if config.overwrite and not dry_run:  # A dry run builds the job and touches nothing.
            _delete_dataset(config.output)
        config = _configure_runner(options, argv, config)
    except (OptionError, PreflightError, ManifestError) as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 2
    provenance = {
        "versions": _versions(),
        "argv": _redact(argv),
        "runner": options.view_as(StandardOptions).runner,
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
    }
    from pipeline.builder import build_pipeline  # Heavy transforms only once options are good.

    pipeline = build_pipeline(config, options, provenance)
    runner = str(options.view_as(StandardOptions).runner or "")
    remote = "Dataflow" in runner
    try:
        result = pipeline.run()
        if dry_run:
            return 0  # The runner reported the job it built; nothing ran, nothing to summarise.
        if remote and hasattr(result, "job_id"):
            gcp = options.view_as(GoogleCloudOptions)
            print(
                f"imgrec: Dataflow job {result.job_id()}: https://console.cloud.google.com/"
                f"dataflow/jobs/{gcp.region}/{result.job_id()}?project={gcp.project}"
            )
        result.wait_until_finish()
    except KeyboardInterrupt:
        if remote:
            print(
                "imgrec: stopped waiting; the Dataflow job keeps running (cancel it with "
                "`gcloud dataflow jobs cancel JOB_ID --region REGION`)",
                file=sys.stderr,
            )
        else:
            print(
                "imgrec: interrupted; rerun with --resume to keep finished shards", file=sys.stderr
            )
        return 130
    except Exception as e:  # noqa: BLE001 - any pipeline failure becomes one clear line
        print(f"imgrec: {_beam_error_line(e)}", file=sys.stderr)
        return 1
    info_path = storage.join(config.output, schema.DATASET_INFO)
    if storage.exists(info_path):
        info = json.loads(storage.read_bytes(info_path))
        print(format_summary(info, config.output, time.time() - started))
    return 0
