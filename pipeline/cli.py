"""The `imgrec` command: convert, verify, inspect, preview, versions."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import traceback

from core import schema, versions
from core.errors import ERROR_PREFIX
from core.schema import DatasetInfoError
from core.versions import VersionError, resolve_dataset_dir
from pipeline import quiet
from pipeline.launch.plan import LaunchPlan, PlanError, read_plan
from pipeline.launch.services import local_services
from pipeline.report.summary import format_summary, stored_forms
from pipeline.versions.fast_rerun import try_fast_rerun

__all__ = ["main", "run_command"]

_USAGE = """usage: imgrec COMMAND [ARGS]

commands:
  convert   convert image files into sharded TFRecords (imgrec convert --help)
  verify    re-read a converted dataset and check every record (imgrec verify DIR)
  inspect   print a converted dataset's summary and class histogram (imgrec inspect DIR)
  preview   write the dataset's visual report.html (imgrec preview DIR [--out FILE])
  versions  list a --versioned root's versions: LATEST, sizes, readers holding them (ROOT)

  -v, --verbose   also show other libraries' logs (TensorFlow, Beam, libjpeg); without it they
                  go to a log file, named when a command fails

exit status: 0 done, 1 failed (one imgrec: line says why), 2 bad usage, option, input or output,
  3 more than --max_bad_fraction of the files were rejected, 130 interrupted
"""


def _inspect(argv: list[str]) -> int:
    from core import storage  # Beam's import: the no-change rerun runs without it

    if len(argv) != 1:
        print("usage: imgrec inspect DIR", file=sys.stderr)
        return 2
    try:
        data_dir = resolve_dataset_dir(argv[0], fs="beam")  # a versioned root: LATEST's version
    except VersionError as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 1
    path = storage.join(data_dir, schema.DATASET_INFO)
    if not storage.exists(path):
        print(f"imgrec: {path} not found; is {argv[0]} a converted dataset?", file=sys.stderr)
        return 1
    info = json.loads(storage.read_bytes(path))
    elapsed = info.get("provenance", {})
    print(format_summary(info, data_dir, 0.0).split("\n", 1)[1])
    formats, layouts = stored_forms(info)
    if formats:
        print(f"  formats     {formats}")
    if layouts:
        print(f"  layouts     {layouts}   (records per dtype x channels)")
    print(
        f"  converted   {elapsed.get('finished', '?')} by imgrec "
        f"{elapsed.get('versions', {}).get('imgrec', '?')}"
    )
    _print_version(data_dir)
    from pipeline.report.objects import object_count_lines
    from pipeline.report.scan import class_histogram_lines

    # An annotated dataset's objects follow its images' classes ([] for the others).
    print("\n".join(class_histogram_lines(info, data_dir) + object_count_lines(info)))
    return 0


def _preview(argv: list[str]) -> int:
    from pipeline.report.page import write_report  # Beam's import

    parser = argparse.ArgumentParser(
        prog="imgrec preview",
        description="Write a self-contained HTML report of a converted dataset (local or bucket).",
    )
    parser.add_argument("dir", help="the converted dataset (its dataset_info.json)")
    parser.add_argument("--out", help="where to write the HTML (default: DIR/report.html)")
    args = parser.parse_args(argv)
    try:
        # A versioned root: the version LATEST names.
        path = write_report(resolve_dataset_dir(args.dir, fs="beam"), args.out)
    except (DatasetInfoError, VersionError) as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 1
    print(f"imgrec: report {path}")
    return 0


def _print_version(data_dir: str) -> None:
    """For a version of a versioned root: its name and its changes headline."""
    from core import storage  # Beam's import

    try:
        _, name = versions.split_version_dir(data_dir)
    except versions.VersionError:
        return  # an unversioned dataset
    path = storage.join(data_dir, versions.CHANGES)
    head = json.loads(storage.read_bytes(path))["headline"] if storage.exists(path) else "?"
    print(f"  version     {name}: {head}")


def main(argv: list[str]) -> int:
    """`imgrec ARGV` for a library caller or a test: returns the exit status. Other libraries'
    output is left on the streams; the program itself is pipeline/launch/program.py."""
    try:
        plan = read_plan(argv)
    except PlanError as e:
        print(f"imgrec: {e}", file=sys.stderr)
        return 2
    return run_command(plan)


def run_command(plan: LaunchPlan) -> int:
    """Run the command `plan` names; returns the exit status.

    In the `imgrec` program without -v, other libraries' output goes to a log file
    (pipeline/quiet.py), and a failure is one line that names it.
    """
    if not plan.as_program or plan.verbose or plan.command == "help":
        return _dispatch(plan)
    log_dir = plan.switches.log_dir
    with quiet.Capture(verbose=False, command=plan.command, log_dir=log_dir) as capture:
        plan = dataclasses.replace(plan, log_path=capture.log_path)
        status, named = _dispatch_quietly(plan, capture)
        if status not in (0, 2) and not named and capture.has_other_output():
            print(
                f"imgrec: full log: {capture.log_path} (-v prints it on the terminal)",
                file=sys.stderr,
            )
    if status == 130 and capture.log_path:
        # Beam's threads that watch worker processes may still report them while the
        # interpreter exits: into the log, not onto the terminal after our one line.
        threading.excepthook = quiet.log_thread_error(capture.log_path)
    return status


def _dispatch_quietly(plan: LaunchPlan, capture) -> tuple[int, bool]:
    """(exit status, whether a line naming the log was printed already)."""
    named = plan.command == "convert"  # convert's own failure line names the log
    try:
        return _dispatch(plan), named
    except KeyboardInterrupt:
        return 130, named
    except SystemExit as e:  # argparse's usage errors
        return (e.code if isinstance(e.code, int) else 2), named
    except Exception as e:  # noqa: BLE001 - one line on the terminal, the traceback in the log
        traceback.print_exc(file=capture.log_file)
        what = f"{type(e).__name__}: {str(e)[:300]}"
        print(
            f"imgrec: {plan.command} failed: {what}{quiet.log_hint(plan.log_path)}",
            file=sys.stderr,
        )
        return 1, True


def _dispatch(plan: LaunchPlan) -> int:
    if plan.command == "help":
        print(_USAGE)
        return 0 if plan.args else 2
    if plan.command == "convert":
        return _convert(plan)
    if plan.command in ("verify", "inspect", "preview", "versions"):
        with local_services(plan):  # the program's start-up ends here
            return _read_command(plan.command, list(plan.args))
    print(f"imgrec: unknown command {plan.command!r}\n{_USAGE}", file=sys.stderr)
    return 2


def _convert(plan: LaunchPlan) -> int:
    # A versioned rerun whose input, options and software are unchanged is made from the
    # previous version without Beam or TensorFlow.
    status = try_fast_rerun(plan)
    if status is not None:
        return status
    from pipeline.launcher import convert  # Beam's import: only for a run of the pipeline

    return convert(plan)


def _read_command(command: str, args: list[str]) -> int:
    """verify, inspect, preview or versions; a store outage is one line, like convert's."""
    from core import storage  # Beam's import, as the commands' modules below

    if command == "versions":
        from pipeline.versions.show import main as versions_main

        return versions_main(args)
    try:
        if command == "verify":
            from pipeline.verify import main as verify_main

            return verify_main(args)
        if command == "preview":
            return _preview(args)
        return _inspect(args)
    except storage.StoreOutageError as e:
        print(f"imgrec: {str(e).removeprefix(ERROR_PREFIX)}", file=sys.stderr)
        return 1
