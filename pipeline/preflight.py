"""The preflight of a conversion: its inputs exist, its output is free and writable, before
anything is written; and what --overwrite deletes."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import tempfile
import uuid

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from core import names, schema, storage
from pipeline.options import ConvertConfig
from transforms.analyze import scratch_root
from transforms.list_images import ManifestError, read_manifest_rows, resolve_local

__all__ = ["PreflightError", "check_writable", "delete_dataset", "preflight"]


class PreflightError(ValueError):
    """The input or output is not usable as given; the message names it and the fix."""


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


def delete_dataset(output: str) -> None:
    """Remove what imgrec writes in `output` (for --overwrite); leave anything else alone."""
    patterns = [
        storage.join(output, schema.DATASET_INFO),
        storage.join(output, schema.REJECTED),
        storage.join(output, schema.DUPLICATES),
        storage.join(output, "report.html"),  # pipeline/report/page.py REPORT_FILE
        storage.join(output, schema.LABEL_MAP),
        storage.join(output, schema.UNMATCHED_ANNOTATIONS),
        storage.join(output, schema.OBJECTS_CHANGED),
        storage.join(output, schema.ANNOTATION_STAGING, "**"),
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
