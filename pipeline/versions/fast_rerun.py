"""The no-change rerun: a `--versioned` run whose input listing, command line and software equal
those of the version LATEST names is built from that version without running the pipeline.

Every versioned conversion records, in `VERSION/.imgrec/rerun.json`, a *run key* (sha256 of the
command line as given, of the versions of the libraries that decide output bytes and of
imgrec's own source) and a *listing digest* (sha256 of every listed file's path, size and
listing stamp, and of every listing reject, as the pipeline's own listing saw them; see
`core.rerun_record.listing_line`). A rerun with the same key lists the input again (one `stat` per file locally,
one listing on a bucket); when the digest is equal too, a from-scratch conversion would write
exactly the previous version's bytes again (the same trust as incremental reruns: a file whose
path, size and stamp are unchanged holds the same bytes). So the new version is made from the
previous one: shards hard-linked locally (server-side copies on a bucket), each checked against
the size and sha256 its dataset_info.json records before it is renamed into place, the other
files linked or copied, `dataset_info.json` rewritten with this run's provenance, `changes.json`
computed ("no change"), `report.html` rebased onto the new folder; then LATEST moves and
`--keep_versions` prunes as after a pipeline run. Locally, neither Beam nor TensorFlow is
imported. Anything unexpected before the first write (no record, another key or listing, a
previous version with rejects that a rerun could judge differently, a shard whose bytes do not
match) falls back to the pipeline; a failure after the version folder was claimed removes that
folder first.

What differs from a from-scratch conversion of the same input: `dataset_info.json`'s
provenance (`started`, `finished`), `report.html`'s "converted" and "Written" times, the
version names in `version.json` and `changes.json`, and tensorflow-transform's
`transform_fn/saved_model.pb` and `fingerprint.pb` (the previous version's; two from-scratch
runs write different bytes there too, with equal analyzer results). `.imgrec/` bookkeeping is
carried over as it is, except the previous version's readers' leases (`.imgrec/leases/`) and
its `.imgrec/published.json` (this version writes its own when LATEST moves to it).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import gzip
import hashlib
import html
import json
import os
import platform
import re
import sys
import time
from importlib import metadata

from core import changes, dali_index, leases, retention, schema, versions
from core.rerun_record import (
    RECORD_FORMAT,
    RERUN_RECORD,
    listing_digest,
    record_bytes,
)
from pipeline.launch.plan import ConvertPlan, LaunchPlan
from pipeline.report.summary import format_summary
from pipeline.versions.rerun_stores import BucketStore, LocalStore, latest_version, list_lines

__all__ = ["redact_argv", "run_key", "try_fast_rerun"]

# Libraries whose versions can change an output byte: Beam (listing, stamps), TensorFlow
# (decoders, Example protos), TFT and tfx-bsl (the export), Pillow, simplejpeg (checks,
# transcodes), protobuf (Example bytes), numpy and pyarrow (statistics).
_KEY_DISTS = (
    "apache-beam",
    "tensorflow",
    "tensorflow-transform",
    "tfx-bsl",
    "pillow",
    "simplejpeg",
    "protobuf",
    "numpy",
    "pyarrow",
)
# Reject reasons a rerun could judge differently on unchanged bytes (a read that failed, a file
# that changed while it was written, a decoder process that died): a previous version holding
# any of them is never reused whole; the pipeline inspects those files again.
_UNSTABLE_REJECTS = frozenset({"unreadable", "changed_during_run", "decoder_error"})
# Files of the previous version that this run writes itself instead of copying.
_OWN_FILES = (
    schema.DATASET_INFO,
    versions.CHANGES,
    versions.VERSION_MARKER,
    "report.html",
    RERUN_RECORD,
    versions.PUBLISHED,
)
# Files of the previous version never carried over: its readers' leases are not the new one's.
_NOT_CARRIED_PREFIX = leases.LEASE_FOLDER + "/"
# Shards copied and checked at once: enough to keep 8 cores hashing or 8 bucket copies in flight.
_COPY_THREADS = 8

# Option names whose values never reach logs, provenance or error messages.
_SECRET_RE = re.compile(r"(secret|token|password|credential|access_key|key_id|session)", re.I)


def redact_argv(argv: list[str]) -> list[str]:
    """`argv` with the values of secret-looking options replaced by `<redacted>`."""
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


# -- The record: run key and listing digest ----------------------------------------------------


def _source_digest() -> str:
    """sha256 of imgrec's own code (every .py of core/, pipeline/ and transforms/): any change to the
    converter makes the next run convert instead of reusing a version it wrote."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    digest = hashlib.sha256()
    for package in (os.path.join(root, p) for p in ("core", "pipeline", "transforms")):
        for folder, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read())
    return digest.hexdigest()


def _software() -> dict:
    found = {"python": platform.python_version(), "imgrec_source": _source_digest()}
    for dist in _KEY_DISTS:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def run_key(argv: list[str], plan: ConvertPlan) -> str | None:
    """The run key of `imgrec convert ARGV` (None: such a run is never reused whole).

    Two runs with one key have the same options and the same software, so equal input
    listings give equal outputs. The command line is taken as given, so any option change
    (even one that writes the same bytes) runs the pipeline.
    """
    if not plan.fast_rerun:
        return None
    body = {"format": RECORD_FORMAT, "argv": list(argv), "software": _software()}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def _resolve_local(pattern: str) -> str:
    """transforms.list_images.resolve_local, without importing Beam."""
    if "://" in pattern:
        return pattern
    return os.path.abspath(os.path.expanduser(pattern))


# -- The fast path -----------------------------------------------------------------------------


class _NotApplicable(Exception):
    """This run cannot be made from the previous version; the pipeline runs instead."""


def _check_previous(store, folder: str) -> dict:
    """The previous version's dataset_info.json, when that version may be reused whole."""
    info_bytes = store.read(store.join(folder, schema.DATASET_INFO))
    if info_bytes is None:
        raise _NotApplicable("the previous version is not complete")
    info = json.loads(info_bytes)
    rejected = store.read(store.join(folder, schema.REJECTED)) or b""
    reasons = {json.loads(line).get("reason") for line in rejected.splitlines() if line.strip()}
    if reasons & _UNSTABLE_REJECTS:
        raise _NotApplicable("the previous version has rejects a rerun may judge otherwise")
    return info


def _facts(store, folder: str) -> dict:
    """changes.load_file_facts of a version, read through `store`."""
    index = store.read(store.join(folder, versions.FILE_INDEX))
    if index is None:
        raise _NotApplicable("the previous version has no file index")
    return changes.facts_from_files(
        gzip.decompress(index),
        store.read(store.join(folder, schema.REJECTED)),
        store.read(store.join(folder, schema.DUPLICATES)),
    )


def _rebase_report(text: str, before: tuple[str, str], after: tuple[str, str]) -> str | None:
    """The previous version's report.html as `pipeline.report.page.build_report` writes it for the
    new folder: the folder's name and the conversion time replaced, and a new "Written" time.
    None when the report does not have the expected form (it is then built anew)."""
    e = html.escape
    (old_dir, old_finished), (new_dir, new_finished) = before, after
    swaps = [
        (
            f"<title>imgrec report: {e(old_dir)}</title>",
            f"<title>imgrec report: {e(new_dir)}</title>",
        ),
        (
            f"<h1>imgrec report</h1><p class=path>{e(old_dir)}</p>",
            f"<h1>imgrec report</h1><p class=path>{e(new_dir)}</p>",
        ),
        (
            f"<tr><th>converted</th><td>{e(str(old_finished))} by imgrec ",
            f"<tr><th>converted</th><td>{e(str(new_finished))} by imgrec ",
        ),
    ]
    for old, new in swaps:
        if text.count(old) != 1:
            return None
        text = text.replace(old, new)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    written = re.compile(r"<p class=muted>Written [^<]* by imgrec preview\.</p>")
    if len(written.findall(text)) != 1:
        return None
    return written.sub(f"<p class=muted>Written {stamp} by imgrec preview.</p>", text)


def _shard_files(info: dict) -> dict[str, tuple[int, str]]:
    """{relative name: (size, sha256)} of every shard and every shard's DALI index."""
    files = {}
    for split in info["splits"].values():
        for shard in split["shards"]:
            for entry in (shard, shard.get("dali_index")):
                if entry:
                    files[entry["file"]] = (entry["num_bytes"], entry["sha256"])
    return files


def _build(store, root: str, previous: str, name: str, info: dict) -> int:
    """Fill the claimed version folder `name` from `previous`; returns shards copied.

    Raises:
        _NotApplicable: a shard does not match its recorded size and sha256.
    """
    src, dst = store.join(root, previous), store.join(root, name)
    shards = _shard_files(info)
    for rel in store.folders(src):  # empty folders of the TFT export, as publish_export makes
        if (rel.replace(os.sep, "/") + "/").startswith(_NOT_CARRIED_PREFIX):
            continue
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
    checked = []  # (relative path, size and sha256) of the non-empty shards
    for rel in store.files(src):
        posix = rel.replace(os.sep, "/")
        if posix in _OWN_FILES or posix.startswith(_NOT_CARRIED_PREFIX):
            continue
        verify = shards.get(posix)
        if verify is None:
            store.copy(store.join(src, rel), store.join(dst, rel))
        elif verify[0] == 0:
            store.write(store.join(dst, rel), b"")
        else:
            checked.append((rel, verify))

    def copy_checked(job) -> bool:
        rel, verify = job
        return store.copy(store.join(src, rel), store.join(dst, rel), verify)

    # Checking a shard reads all its bytes (hashlib releases the GIL on large reads, a bucket
    # copy waits on the network): one thread per core, at most _COPY_THREADS.
    threads = max(1, min(_COPY_THREADS, os.cpu_count() or 1, len(checked)))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(copy_checked, checked))
    bad = [rel for (rel, _), ok in zip(checked, results, strict=True) if not ok]
    if bad:
        raise _NotApplicable(f"{bad[0]} of {previous} does not match its dataset_info.json")
    if set(shards) - {r.replace(os.sep, "/") for r in store.files(dst)}:
        raise _NotApplicable("a shard of the previous version is missing")
    return sum(not rel.endswith(dali_index.INDEX_SUFFIX) for rel, _ in checked)


def try_fast_rerun(launch: LaunchPlan) -> int | None:
    """Serve `imgrec convert` from the previous version when nothing changed.

    Returns:
        The exit status (0) when the run was served, None when the pipeline must run (nothing
        was left behind then).

    Raises:
        Exception: only once the new version is complete, from publishing it, pruning, the
            summary or the report (as the pipeline's run would).
    """
    started = time.time()
    argv, convert = list(launch.args), launch.convert
    try:
        root, patterns, keep, keep_for_s = _eligible(convert)
        remote = "://" in root or any("://" in p for p in patterns)
        if remote:
            from apache_beam.io.filesystems import FileSystems
            from apache_beam.options.pipeline_options import PipelineOptions

            from pipeline.options import ConvertOptions  # noqa: F401 - registers its options

            FileSystems.set_options(PipelineOptions(argv))
        store = BucketStore() if remote else LocalStore()
        plan = _plan(store, launch, root, patterns)
        made = _make_version(store, argv, root, plan, started)
    except _NotApplicable:
        return None
    except (OSError, ValueError, KeyError, versions.VersionError):
        # Before publishing: the pipeline can still convert (and report a real problem).
        return None
    _publish(store, root, plan, made, (keep, keep_for_s), convert.no_report, started)
    return 0


def _eligible(convert: ConvertPlan) -> tuple[str, list[str], int, float]:
    """(root, input patterns, --keep_versions, --keep_for seconds) of a run the fast path may
    serve.

    Raises:
        _NotApplicable: anything else.
    """
    if not convert.fast_rerun:
        raise _NotApplicable("not a plain local versioned run")
    if len(convert.outputs) != 1 or not convert.inputs:
        raise _NotApplicable("no single --output or no --input")
    keep = convert.keep_versions
    if keep is not None and not keep.isdigit():
        raise _NotApplicable("--keep_versions is not a number: the parser says so")
    try:
        keep_for_s = retention.parse_duration(convert.keep_for or retention.DEFAULT_KEEP_FOR)
    except ValueError:
        raise _NotApplicable("--keep_for is not a duration: the parser says so") from None
    return (
        convert.outputs[0].rstrip("/"),
        [_resolve_local(p) for p in convert.inputs],
        int(keep or 0),
        keep_for_s,
    )


def _plan(store, launch: LaunchPlan, root: str, patterns: list[str]) -> dict:
    """Everything the new version is made from; raises _NotApplicable unless nothing changed."""
    previous = latest_version(store, root)
    if previous is None:
        raise _NotApplicable("no previous version")
    names = store.versions(root)
    unfinished = [n for n in names if n > previous]
    if launch.convert.resume and unfinished:
        raise _NotApplicable("--resume continues an unfinished version")
    folder = store.join(root, previous)
    record = store.read(store.join(folder, RERUN_RECORD))
    if record is None:
        raise _NotApplicable("the previous version has no rerun record")
    record = json.loads(record)
    key = run_key(list(launch.args), launch.convert)
    if record.get("format") != RECORD_FORMAT or not key or record.get("run_key") != key:
        raise _NotApplicable("other options or software")
    digest = listing_digest(list_lines(patterns))
    if digest is None or digest != record.get("listing"):
        raise _NotApplicable("the input changed")
    info = _check_previous(store, folder)
    facts = _facts(store, folder)
    if any(f["status"] == "rejected" and "split" in f for f in facts.values()):
        raise _NotApplicable("a file was rejected while its shard was written")
    return {
        "previous": previous,
        "names": names,
        "unfinished": unfinished,
        "key": key,
        "digest": digest,
        "info": info,
        "facts": facts,
    }


def _make_version(store, argv: list[str], root: str, plan: dict, started: float) -> dict:
    """Claim a new version and fill it from the previous one, up to (not including) LATEST.

    A failure removes the claimed folder again and is raised.
    """
    previous, info = plan["previous"], plan["info"]
    now = datetime.datetime.fromtimestamp(started, datetime.UTC)
    effective = redact_argv(argv)
    name = store.claim(
        root, versions.next_version_name([*plan["names"], previous], now), {"argv": effective}
    )
    out = store.join(root, name)
    try:
        copied = _build(store, root, previous, name, info)
        provenance = dict(info.get("provenance", {}))
        finished = datetime.datetime.now(datetime.UTC).isoformat()
        provenance.update(argv=effective, started=now.isoformat(), finished=finished)
        new_info = {**info, "provenance": provenance}
        store.write(
            store.join(out, schema.DATASET_INFO),
            json.dumps(new_info, indent=2, sort_keys=False).encode("utf-8"),
        )
        facts = plan["facts"]  # the new version's files are the previous version's
        change = changes.compute_changes(facts, facts, version=name, previous_version=previous)
        store.write(
            store.join(out, versions.CHANGES),
            json.dumps(change, indent=1, sort_keys=False).encode("utf-8"),
        )
        store.write(store.join(out, RERUN_RECORD), record_bytes(plan["key"], plan["digest"]))
    except BaseException:
        store.remove_tree(out)
        raise
    return {
        "name": name,
        "out": out,
        "copied": copied,
        "info": new_info,
        "change": change,
        "old_finished": info.get("provenance", {}).get("finished", "?"),
        "finished": finished,
    }


def _publish(
    store,
    root: str,
    plan: dict,
    made: dict,
    keeping: tuple[int, float],
    no_report: bool,
    started: float,
) -> None:
    """Move LATEST, prune (keeping: --keep_versions, --keep_for seconds), print what the
    pipeline's run prints, write the report."""
    name, out, previous = made["name"], made["out"], plan["previous"]
    note = f"imgrec: writing new version {name} of {root}"
    if plan["unfinished"]:
        note += f" ({plan['unfinished'][-1]} is unfinished; pass --resume to continue it instead)"
    print(f"{note}; nothing changed since {previous}: copying it (--full: convert from scratch)")
    keep, keep_for_s = keeping
    published, latest = store.publish(root, name)
    if published and keep:  # never a version a reader holds or --keep_for keeps
        store.prune(root, keep, name, keep_for_s)
    info = made["info"]
    print(format_summary(info, out, time.time() - started))
    head = f"{made['change']['headline']} (against {previous})"
    if published:
        print(f"  published   {name} is LATEST of {root}; changes: {head}")
    else:
        print(f"  NOT published: LATEST of {root} names {latest}, not {name}; changes: {head}")
    reused = info["num_written"] + info["num_duplicates"]
    print(
        f"  reused      {reused:>7}   unchanged files not read again, {made['copied']} shards "
        f"copied (from {previous}; nothing changed: the pipeline did not run)"
    )
    if published and keep:
        names = store.versions(root)
        listing = (names, name, store.finished(root, [n for n in names if n < name]))
        kept = retention.retention_line(root, keep, keep_for_s, listing)
        if kept:  # versions --keep_versions let go that a reader or --keep_for still holds
            print(kept)
    if not no_report:
        _write_report(
            store, store.join(root, previous), out, made["old_finished"], made["finished"]
        )


def _write_report(store, previous: str, out: str, old_finished: str, finished: str) -> None:
    """report.html of the new version: the previous one rebased, or built anew."""
    path = store.join(out, "report.html")
    text = store.read(store.join(previous, "report.html"))
    rebased = None
    if text is not None:
        rebased = _rebase_report(text.decode("utf-8"), (previous, old_finished), (out, finished))
    if rebased is None:
        try:
            from pipeline.report.page import write_report

            write_report(out)
        except Exception as e:  # noqa: BLE001 - the dataset is written; the report is a view
            print(
                f"imgrec: report not written ({type(e).__name__}: {str(e)[:200]}); "
                f"retry with `imgrec preview {out}`",
                file=sys.stderr,
            )
            return
    else:
        store.write(path, rebased.encode("utf-8"))
    print(f"  report      {path}")
