"""Flex Template entry point: the template launcher runs this file with the job's parameters.

The launcher passes every parameter as `--name=value`. imgrec's on/off flags take no value
(`--versioned`), so `--versioned=true` becomes `--versioned` and `--versioned=false` is
dropped; everything else goes to `imgrec convert` as given. The job runs on Dataflow.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["flex_argv", "main"]

# Flex Template values that mean "on" for a flag parameter.
_TRUE = ("true", "1", "yes", "on")


def flex_argv(argv: list[str]) -> list[str]:
    """The launcher's `--name=value` arguments -> `imgrec convert` arguments."""
    from pipeline.options import ConvertOptions

    parser = argparse.ArgumentParser(add_help=False)
    ConvertOptions._add_argparse_args(parser)
    flags = {
        s
        for a in parser._actions
        if isinstance(a, argparse._StoreTrueAction)
        for s in a.option_strings
    }
    out = []
    for arg in argv:
        name, sep, value = arg.partition("=")
        if sep and name in flags:
            if value.strip().lower() in _TRUE:
                out.append(name)
            continue
        out.append(arg)
    if not any(a == "--runner" or a.startswith("--runner=") for a in out):
        out.append("--runner=DataflowRunner")
    return out


def main(argv: list[str] | None = None) -> int:
    from pipeline.launcher import run_convert

    return run_convert(flex_argv(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    from pipeline.launch import patches, startup
    from pipeline.launch.switches import read_switches

    # As `imgrec` starts: Keras 2 only, the job's modules imported without the collector.
    switches = read_switches()
    startup.use_keras_2()
    startup.defer_keras(switches)
    with startup.without_gc(switches):
        import pipeline.builder  # noqa: F401
    patches.install(switches)
    sys.exit(main())
