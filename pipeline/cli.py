"""The `imgrec` command: convert, verify, inspect, preview."""

from __future__ import annotations

import sys

__all__ = ["main"]

_USAGE = """usage: imgrec COMMAND [ARGS]

commands:
  convert   convert image files into sharded TFRecords (imgrec convert --help)
  verify    re-read a converted dataset and check every record (imgrec verify DIR)
  inspect   print a converted dataset's summary from its dataset_info.json (imgrec inspect DIR)
"""


def _inspect(argv: list[str]) -> int:
    import json

    from pipeline import schema, storage
    from pipeline.launcher import format_summary
    from pipeline.versions import VersionError, resolve_dataset_dir

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
    print(
        f"  converted   {elapsed.get('finished', '?')} by imgrec "
        f"{elapsed.get('versions', {}).get('imgrec', '?')}"
    )
    _print_version(data_dir)
    return 0


def _print_version(data_dir: str) -> None:
    """For a version of a versioned root: its name and its changes headline."""
    import json

    from pipeline import storage, versions

    try:
        _, name = versions.split_version_dir(data_dir)
    except versions.VersionError:
        return  # an unversioned dataset
    path = storage.join(data_dir, versions.CHANGES)
    head = json.loads(storage.read_bytes(path))["headline"] if storage.exists(path) else "?"
    print(f"  version     {name}: {head}")


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
    if command in ("verify", "inspect"):
        from pipeline import storage
        from pipeline.errors import ERROR_PREFIX

        try:
            if command == "verify":
                from pipeline.verify import main as verify_main

                return verify_main(rest)
            return _inspect(rest)
        except storage.StoreOutageError as e:  # one line, like convert's
            print(f"imgrec: {str(e).removeprefix(ERROR_PREFIX)}", file=sys.stderr)
            return 1
    print(f"imgrec: unknown command {command!r}\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
