"""The command line, read once and Beam-free, into the plan every later step of a launch is handed.

The plan says what the process will do before anything heavy is imported: which command, with
which switches (pipeline/launch/switches.py), whether a no-change rerun may serve it (that
rerun runs without Beam, so its few options are read here, Beam-free). Convert's options are
parsed, once, into its request (pipeline/launcher.py `read_request`); the plan keeps them,
escaped, as `args`.
"""

from __future__ import annotations

import argparse
import dataclasses

from core import names
from core.runners import is_local_runner
from pipeline.launch.switches import Switches, read_switches

__all__ = ["COMMANDS", "ConvertPlan", "LaunchPlan", "PlanError", "read_plan"]

COMMANDS = ("convert", "verify", "inspect", "preview", "versions", "help")
# Options whose values may name files that are not UTF-8 (escaped: Beam's options are protobuf
# strings, which refuse surrogate escapes).
_FILE_OPTIONS = ("--input", "--manifest")
# Options that make a versioned run something the no-change rerun does not serve.
# Runs the no-change rerun never serves; annotated ones among them: it lists images only, and an
# annotation file may change alone.
_NOT_FAST = (
    "full",
    "dry_run",
    "config",
    "manifest",
    "overwrite",
    "help",
    "annotations",
    "masks",
)


class PlanError(ValueError):
    """The command line cannot be read; the message names the argument and the fix."""


@dataclasses.dataclass(frozen=True)
class ConvertPlan:
    """What `imgrec convert` will do, from its command line alone."""

    runner: str | None = None
    local: bool = True  # runs on this machine's DirectRunner (or another local runner)
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    workers: int | None = None
    versioned: bool = False
    resume: bool = False
    no_analyze: bool = False
    no_report: bool = False
    dry_run: bool = False
    help: bool = False
    keep_versions: str | None = None
    keep_for: str | None = None
    fast_rerun: bool = False  # a plain local versioned run the no-change rerun may serve


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """One launch of the `imgrec` program (or of `pipeline.cli.main` from a library)."""

    command: str
    args: tuple[str, ...]
    verbose: bool = False
    as_program: bool = False  # the `imgrec` process itself: it may fork and exit at will
    convert: ConvertPlan = dataclasses.field(default_factory=ConvertPlan)
    switches: Switches = dataclasses.field(default_factory=Switches)
    log_path: str | None = None  # a quiet run's log file, which failure lines name


def read_plan(
    argv: list[str], as_program: bool = False, switches: Switches | None = None
) -> LaunchPlan:
    """`imgrec ARGV` -> its plan; `switches` default to this process's environment's.

    Raises:
        PlanError: an argument that is not UTF-8 where no file name may be.
    """
    switches = read_switches() if switches is None else switches
    rest = [a for a in argv if a not in ("-v", "--verbose")]
    verbose = len(rest) != len(argv) or switches.verbose
    plan = LaunchPlan("help", tuple(rest), verbose, as_program, switches=switches)
    if not rest or rest[0] in ("-h", "--help", "help"):
        return plan
    command, args = rest[0], rest[1:]
    if command.startswith("--"):  # `imgrec --input ...` means convert
        command, args = "convert", rest
    if command != "convert":
        return dataclasses.replace(plan, command=command, args=tuple(args))
    args = _escape_file_names(args)
    convert = _read_convert(args)
    return dataclasses.replace(plan, command=command, args=tuple(args), convert=convert)


def _convert_parser() -> argparse.ArgumentParser:
    """The few convert options the launch looks at; every other argument is left alone."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--runner")
    parser.add_argument("--input", dest="inputs", action="append", default=[])
    parser.add_argument("--output", dest="outputs", action="append", default=[])
    parser.add_argument("--workers")
    parser.add_argument("--keep_versions")
    parser.add_argument("--keep_for")
    for flag in ("versioned", "resume", "no_analyze", "no_report", "dry_run", "full", "overwrite"):
        # Beam's own flags may come as `--dry_run=true`; the real parsers judge the value.
        parser.add_argument(f"--{flag}", nargs="?", const=True, default=False, type=_truthy)
    for option in ("config", "manifest", "annotations", "masks"):
        parser.add_argument(f"--{option}")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("false", "0", "no", "off", "")


def _read_convert(args: list[str]) -> ConvertPlan:
    try:
        known, _ = _convert_parser().parse_known_args(args)
    except argparse.ArgumentError:
        return ConvertPlan()  # a plain in-process run; the real parser reports the mistake
    local = is_local_runner(known.runner)
    fast = known.versioned and local and not any(getattr(known, n) for n in _NOT_FAST)
    return ConvertPlan(
        runner=known.runner,
        local=local,
        inputs=tuple(known.inputs),
        outputs=tuple(known.outputs),
        workers=int(known.workers) if (known.workers or "").isdigit() else None,
        versioned=known.versioned,
        resume=known.resume,
        no_analyze=known.no_analyze,
        no_report=known.no_report,
        dry_run=known.dry_run,
        help=known.help,
        keep_versions=known.keep_versions,
        keep_for=known.keep_for,
        fast_rerun=fast,
    )


def _escape_file_names(args: list[str]) -> list[str]:
    """`args` with each non-UTF-8 value of a file option made absolute and escaped.

    Raises:
        PlanError: another argument is not UTF-8 (nothing else may name such a file).
    """
    out = []
    for i, arg in enumerate(args):
        if names.is_utf8(arg):
            out.append(arg)
            continue
        flag, eq, value = arg.partition("=")
        if eq and flag in _FILE_OPTIONS:
            out.append(f"{flag}={names.absolute_escaped(value)}")
        elif i > 0 and args[i - 1] in _FILE_OPTIONS:
            out.append(names.absolute_escaped(arg))
        else:
            raise PlanError(
                f"{names.printable(arg)}: not valid UTF-8; only {' and '.join(_FILE_OPTIONS)} "
                "may name files whose names are not (rename the folder, e.g. the --output one)"
            )
    return out
