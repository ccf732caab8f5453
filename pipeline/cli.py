"""The `imgrec` command: convert, verify, inspect, preview."""

from __future__ import annotations

import sys

__all__ = ["main"]

_USAGE = """usage: imgrec COMMAND [ARGS]

commands:
  convert   convert image files into sharded TFRecords (imgrec convert --help)
  verify    re-read a converted dataset and check every record (imgrec verify DIR)
"""


def main(argv: list[str] | None = None) -> int:
    """Dispatch `imgrec COMMAND ARGS`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command.startswith("--"):  # `imgrec --input ...` means convert.
        command, rest = "convert", argv
    if command == "convert":
        from pipeline.launcher import run_convert

        return run_convert(rest)
    if command == "verify":
        from pipeline.verify import main as verify_main

        return verify_main(rest)
    print(f"imgrec: unknown command {command!r}\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
