"""List: input patterns or a manifest -> one ListedFile per distinct file, with key, label, split."""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from core import names
from core.rejects import make_reject
from transforms import groups
from transforms.elements import ListedFile, MatchedFile
from transforms.keys import assign_split, group_hash, split_key
from transforms.match_local import match_bucket, match_local

__all__ = [
    "ListImages",
    "ManifestError",
    "input_root",
    "match_bucket",
    "read_manifest_rows",
    "resolve_local",
]

_GLOB_CHARS = "*?["


class ManifestError(ValueError):
    """The manifest cannot be read or parsed; the message names it and the fix."""


def resolve_local(pattern: str) -> str:
    """Absolute form of a local path; URIs (gs://, s3://, ...) unchanged."""
    if "://" in pattern:
        return pattern
    return os.path.abspath(os.path.expanduser(pattern))


def input_root(pattern: str) -> str:
    """The directory part of `pattern` before its first glob character, ending in '/'.

    Keys are paths relative to this root, so a dataset copied between disk and buckets keeps
    its keys, hence its splits and shards.
    """
    cut = min((i for i, c in enumerate(pattern) if c in _GLOB_CHARS), default=len(pattern))
    head = pattern[:cut]
    if cut == len(pattern):  # A plain file path: its directory is the root.
        head = pattern.rsplit("/", 1)[0] + "/" if "/" in pattern else ""
    return head[: head.rfind("/") + 1]


def _parent_name(path: str) -> str:
    """The name of the folder holding `path`: the label of --label_from parent.

    Object stores and POSIX file systems separate names with '/' only (a backslash is an
    ordinary character there); only local paths on Windows also use '\\'.
    """
    if os.sep == "\\" and "://" not in path:
        path = path.replace("\\", "/")
    return posixpath.basename(posixpath.dirname(path))


def read_manifest_rows(manifest: str):
    """Yield (line_number, row dict) from a CSV (header optional) or JSONL manifest.

    Raises:
        ManifestError: when the file cannot be opened or its format is not CSV/JSONL.
    """
    try:
        with FileSystems.open(names.local_path(manifest), compression_type="uncompressed") as f:
            data = f.read()
        if b"\0" in data:  # UTF-16/32 or a binary file: no CSV or JSONL we could read right
            raise UnicodeDecodeError("utf-8", data[:0], 0, 1, "NUL bytes in the file")
        # Bytes that are not UTF-8 are paths' bytes (a Latin-1 file name written as is): they
        # come through as surrogate escapes and are escaped as the listing does (core/names.py).
        text = data.decode("utf-8-sig", "surrogateescape")
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(
            f"--manifest {manifest}: cannot read it ({type(e).__name__}: {e}); "
            "check the path and that it is UTF-8 CSV or JSONL"
        ) from e
    first = text.lstrip()[:1]
    if manifest.endswith((".jsonl", ".json")) or first == "{":
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ManifestError(
                    f"--manifest {manifest}: line {lineno} is not JSON ({e.msg}); "
                    'expected one object per line like {"path": ..., "label": ...}'
                ) from e
            if not isinstance(row, dict):
                raise ManifestError(f"--manifest {manifest}: line {lineno} is not a JSON object")
            yield lineno, row
        return
    reader = csv.reader(io.StringIO(text))
    header = None
    for lineno, cells in enumerate(reader, 1):
        if not cells or not any(c.strip() for c in cells):
            continue
        if header is None and lineno == 1 and cells[0].strip().lower() == "path":
            header = [c.strip().lower() for c in cells]
            continue
        columns = header or ["path", "label", "split"][: len(cells)]
        yield lineno, dict(zip(columns, (c.strip() for c in cells), strict=False))


# Listed files travel in batches until they are spread over workers: one shuffle element per
# batch instead of per file. 64 files is a few seconds of inspection work per batch, and
# enough batches to balance workers from a few thousand files up.
LIST_BATCH = 64


def _key(path: str, root: str) -> str:
    """`path` relative to its pattern's `root` (a URI without its scheme when outside it); a
    local name that is not UTF-8 (an escaped `file://` path) gives the same key escaped."""
    local = names.local_path(path)
    if local is not path:
        root = names.local_path(root)
        return names.escape_text(local[len(root) :] if local.startswith(root) else local)
    return path[len(root) :] if path.startswith(root) else path.split("://")[-1]


class _MatchAllFn(beam.DoFn):
    """None -> batches of MatchedFile for every file the patterns match;
    what a pattern matched but is no file (dangling link, unreadable folder, folder) -> REJECTED.

    All patterns are matched in one call so a file matched by two patterns is listed once (the
    first pattern's key wins), without a shuffle of every path. Local patterns are walked by
    transforms/match_local.py, which reports what Beam's local match drops without a word.
    """

    REJECTED = "rejected"

    def __init__(self, patterns: tuple[str, ...]):
        self._patterns = patterns
        self._matched = Metrics.counter("imgrec", "files_matched")

    @staticmethod
    def _entries(pattern: str):
        """(path, size, stamp, reason, detail) for everything `pattern` matches."""
        local = names.local_path(pattern)  # an escaped `file://` pattern is a local one
        if "://" not in local:
            for e in match_local(local):
                yield e.path, e.size, e.stamp, e.reason, e.detail
            return
        for metadata in match_bucket(pattern):
            if metadata.path.endswith("/"):  # Object-store "directory" placeholders.
                continue
            updated = float(metadata.last_updated_in_seconds or 0.0)
            # A bucket object's version as the listing shows it: its update time (0: unknown).
            stamp = repr(updated) if updated > 0 else None
            yield metadata.path, int(metadata.size_in_bytes), stamp, None, ""

    def _files(self):
        seen = set() if len(self._patterns) > 1 else None
        for pattern in self._patterns:
            root = input_root(pattern)
            for path, size, stamp, reason, detail in self._entries(pattern):
                if seen is not None:
                    if path in seen:
                        continue
                    seen.add(path)
                if reason is not None:
                    Metrics.counter("imgrec", f"rejected_{reason}").inc()
                    yield pvalue.TaggedOutput(self.REJECTED, make_reject(path, reason, detail))
                    continue
                self._matched.inc()
                key = _key(path, root)
                yield MatchedFile(path, key, size, stamp)

    def process(self, _):
        yield from _in_batches(self._files())


def _in_batches(outputs):
    """Listing outputs -> the same, MatchedFiles gathered in lists of LIST_BATCH (rejects, as
    TaggedOutputs, pass through as they come)."""
    batch = []
    for out in outputs:
        if isinstance(out, pvalue.TaggedOutput):
            yield out
            continue
        batch.append(out)
        if len(batch) == LIST_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


class _ReadManifestFn(beam.DoFn):
    """manifest URI -> batches of MatchedFile (one per row); rows without a path -> REJECTED."""

    REJECTED = "rejected"

    def _rows(self, manifest: str):
        here = names.local_path(manifest)  # relative rows are joined to its bytes, unescaped
        base = here.rsplit("/", 1)[0] + "/" if "/" in here else ""
        for lineno, row in read_manifest_rows(manifest):
            raw = str(row.get("path") or "").strip()
            if not raw:
                yield pvalue.TaggedOutput(
                    self.REJECTED,
                    make_reject(
                        f"{manifest}:{lineno}",
                        "bad_manifest_row",
                        f"line {lineno} has no path: {row!r}",
                    ),
                )
                continue
            # A row may hold a name's bytes as they are, or escaped as rejected.jsonl writes it.
            raw = names.local_path(raw)
            is_absolute = "://" in raw or raw.startswith("/")
            path = names.from_local(raw if is_absolute else base + raw)
            if is_absolute:
                key = _key(path, base)
            else:
                key = names.escape_text(posixpath.normpath(raw))
            label, split, group = (
                names.escape_text(str(row[column])) if row.get(column) not in (None, "") else ""
                for column in ("label", "split", "group")
            )
            yield MatchedFile(
                path,
                key,
                -1,
                None,
                manifest_label=label,
                manifest_split=split,
                manifest_group=group,
            )

    def process(self, manifest: str):
        seen = set()

        def once(outputs):
            for out in outputs:
                if not isinstance(out, pvalue.TaggedOutput):
                    if out.path in seen:  # A file listed twice is one file.
                        continue
                    seen.add(out.path)
                yield out

        yield from _in_batches(once(self._rows(manifest)))


class _LabelAndSplitFn(beam.DoFn):
    """[MatchedFile] -> [ListedFile], label, split and group set; files without a label or
    split -> REJECTED.

    --group_by hashes the split from the group's value, so a group never spans two splits;
    --group_by dicom:TAG and --label_from dicom:TAG read the file's DICOM header here.
    """

    REJECTED = "rejected"

    def __init__(self, config):
        self._label_from = config.label_from
        self._split_from = config.split_from
        self._seed = config.seed
        self._splits = config.splits
        self._group_by = config.group_by
        self._salt = config.group_salt
        self._keywords = groups.dicom_keywords(config.label_from, config.group_by)
        self._path_group = groups.path_pattern(config.group_by)

    def process(self, batch):
        listed = []
        for item in batch:
            for out in self._one(item):
                if isinstance(out, pvalue.TaggedOutput):
                    yield out
                else:
                    listed.append(out)
        if listed:
            yield listed

    def _one(self, item: MatchedFile):
        path, key = item.path, item.key
        tags = groups.read_dicom_tags(path, self._keywords) if self._keywords else {}
        if self._label_from.startswith("dicom:"):
            keyword = self._label_from.split(":", 1)[1]
            label = tags.get(keyword, "")
            if not label:
                detail = f"--label_from dicom:{keyword}: the file has no {keyword} tag"
                yield pvalue.TaggedOutput(self.REJECTED, make_reject(path, "no_label", detail))
                return
            label = names.escape_text(label)
        elif self._label_from == "parent":
            label = _parent_name(path)
        elif self._label_from == "manifest":
            label = item.manifest_label
            if not label:
                yield pvalue.TaggedOutput(
                    self.REJECTED,
                    make_reject(
                        path,
                        "bad_manifest_row",
                        "the manifest row has no label (or pass --label_from parent|none)",
                    ),
                )
                return
        else:
            label = ""
        group = groups.file_group(self._group_by, self._path_group, key, item.manifest_group, tags)
        if self._split_from in ("hash", "annotations"):  # annotations: the join replaces it
            split = assign_split(split_key(key, group), self._seed, self._splits)
        elif self._split_from == "manifest":
            split = item.manifest_split
        else:  # path: <split>/<label>/file under the input root
            parts = key.split("/")
            split = parts[0] if len(parts) >= 2 else ""
        if not split:
            yield pvalue.TaggedOutput(
                self.REJECTED,
                make_reject(
                    path,
                    "no_split",
                    f"--split_from {self._split_from} found no split for key {key!r} "
                    "(expected <split>/<label>/<file> under the input root, or a split "
                    "column in the manifest)",
                ),
            )
            return
        hashed = group_hash(group, self._salt, self._seed) if group else ""
        yield ListedFile(path, key, label, split, item.size, item.stamp, group=hashed)


class ListImages(beam.PTransform):
    """Match --input patterns (or read a --manifest) into ListedFiles, one per distinct file.

    Returns:
        {"listed": PCollection[[ListedFile]] (batches of up to LIST_BATCH files),
         "rejected": PCollection[Reject]}.
    """

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, pbegin):
        c = self._config
        if c.manifest:
            read = (
                pbegin
                | "Manifest" >> beam.Create([c.manifest])
                | "ReadManifest"
                >> beam.ParDo(_ReadManifestFn()).with_outputs(
                    _ReadManifestFn.REJECTED, main="batches"
                )
            )
            batches, bad_rows = read.batches, read[_ReadManifestFn.REJECTED]
        else:
            patterns = tuple(resolve_local(p) for p in c.inputs)
            matched = (
                pbegin
                | "Start" >> beam.Create([None])
                | "MatchFiles"
                >> beam.ParDo(_MatchAllFn(patterns)).with_outputs(
                    _MatchAllFn.REJECTED, main="batches"
                )
            )
            batches, bad_rows = matched.batches, matched[_MatchAllFn.REJECTED]
        listed = (
            batches
            # [MatchedFile]: spread the listing over workers, a batch (names only) at a time.
            | "Redistribute" >> beam.Reshuffle()
            | "LabelAndSplit"
            >> beam.ParDo(_LabelAndSplitFn(c)).with_outputs(
                _LabelAndSplitFn.REJECTED, main="listed"
            )
        )
        rejected = (listed[_LabelAndSplitFn.REJECTED], bad_rows) | "MergeListingRejects" >> (
            beam.Flatten()
        )
        return {"listed": listed.listed, "rejected": rejected}
