"""The `imgrec` command: convert, verify, inspect, preview, versions."""

from __future__ import annotations

import sys

from pipeline import quiet

__all__ = ["main"]

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
    import json

    from core import schema, storage
    from core.versions import VersionError, resolve_dataset_dir
    from pipeline.report.summary import format_summary

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
    from pipeline.report.scan import class_histogram_lines

    print("\n".join(class_histogram_lines(info, data_dir)))
    return 0


def _preview(argv: list[str]) -> int:
    import argparse

    from pipeline.report.page import write_report

    parser = argparse.ArgumentParser(
        prog="imgrec preview",
        description="Write a self-contained HTML report of a converted dataset (local or bucket).",
    )
    parser.add_argument("dir", help="the converted dataset (its dataset_info.json)")
    parser.add_argument("--out", help="where to write the HTML (default: DIR/report.html)")
    args = parser.parse_args(argv)
    from core.schema import DatasetInfoError
    from core.versions import VersionError, resolve_dataset_dir

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
    import json

    from core import storage, versions

    try:
        _, name = versions.split_version_dir(data_dir)
    except versions.VersionError:
        return  # an unversioned dataset
    path = storage.join(data_dir, versions.CHANGES)
    head = json.loads(storage.read_bytes(path))["headline"] if storage.exists(path) else "?"
    print(f"  version     {name}: {head}")


# TensorFlow Transform works only with Keras 2 (the tf_keras package): `import
# tensorflow_transform` sets this variable itself, but only after TensorFlow's own import has
# eagerly loaded Keras 3 as well (TensorFlow's __init__ loads `keras.src.optimizers` for the
# SavedModel registry, and with it all of Keras 3 and matplotlib.pyplot). Set before that import,
# TensorFlow loads Keras 2 only: `import tensorflow` takes ~0.45 s less CPU (4.13 -> 3.66 s). The
# DirectRunner worker processes inherit it, also in runs where the launcher never imports TFT
# (--no_analyze). bench/ablations/startup.py, whole process, medians of 7: default convert 1.06x, convert
# --no_analyze --workers 2 1.09x, verify 1.07x (noisy: 1.00x-1.15x over four runs of the
# default). imgrec itself never uses Keras; a value the user set is kept.
KERAS_ENV = "TF_USE_LEGACY_KERAS"


def use_keras_2() -> None:
    """Ask TensorFlow for Keras 2 only, as TFT needs, unless the user chose (KERAS_ENV above)."""
    import os

    os.environ.setdefault(KERAS_ENV, "1")


_as_program = False  # set by run(): this process is the `imgrec` program


def start_program() -> None:
    """How a program of imgrec's starts, before anything imports TensorFlow: Keras 2 only (above)
    for TFT, TensorFlow's import without Keras, Beam's without the clients of integrations
    imgrec does not use, and the start-up imports without the garbage collector until the
    command's work starts (core/startup.py). `run()` and the Flex
    Template's launcher call it."""
    from core import startup

    use_keras_2()
    startup.defer_keras()
    startup.defer_beam_extras()
    startup.begin()


def run() -> None:
    """The `imgrec` program: `main()`, then exit without the interpreter's slow teardown.

    Once the command has finished (its files closed and renamed, its summary printed), the
    interpreter would still spend ~0.9 s tearing down TensorFlow and Beam's threads (measured on
    the demo: the summary at 6.7 s, exit at 9.0 s with the report in between). Registered exit
    handlers (the decoder worker pool) and logging still run first.
    """
    import atexit
    import logging
    import os

    from core import startup

    global _as_program
    start_program()
    _as_program = True
    status = startup.on_a_roomy_stack(main)  # its frames in one chunk (core/startup.py)
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status if isinstance(status, int) else 1)


def main(argv: list[str] | None = None) -> int:
    """Dispatch `imgrec COMMAND ARGS`; returns the exit status.

    Run as a program (argv None), other libraries' output goes to a log file unless -v is given
    (pipeline/quiet.py); called with an explicit argv (tests, scripts), the streams are left alone.
    """
    as_program = argv is None
    argv, verbose = quiet.pop_verbose(list(sys.argv[1:] if argv is None else argv))
    if not as_program or verbose or not argv or argv[0] in ("-h", "--help", "help"):
        return _dispatch(argv)
    command = "convert" if argv[0].startswith("--") else argv[0]
    named = command == "convert"  # convert's own failure line names the log
    with quiet.Capture(verbose=False, command=command) as capture:
        try:
            status = _dispatch(argv)
        except KeyboardInterrupt:
            status = 130
        except SystemExit as e:  # argparse's usage errors
            status = e.code if isinstance(e.code, int) else 2
        except Exception as e:  # noqa: BLE001 - one line on the terminal, the traceback in the log
            import traceback

            traceback.print_exc(file=capture.log_file)
            print(
                f"imgrec: {argv[0]} failed: {type(e).__name__}: {str(e)[:300]}{quiet.log_hint()}",
                file=sys.stderr,
            )
            status, named = 1, True
        if status not in (0, 2) and not named and capture.has_other_output():
            print(
                f"imgrec: full log: {capture.log_path} (-v prints it on the terminal)",
                file=sys.stderr,
            )
    if status == 130 and capture.log_path:
        _thread_errors_to(capture.log_path)
    return status


def _thread_errors_to(log_path: str) -> None:
    """After Ctrl-C, Beam's threads that watch the worker processes (--workers 2) may still
    report their interrupted workers while the interpreter exits: into the log, as during the
    run (pipeline/quiet.py), not onto the terminal after our one line."""
    import threading

    threading.excepthook = quiet.log_thread_error(log_path)


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command.startswith("--"):  # `imgrec --input ...` means convert.
        command, rest = "convert", argv
    if command == "convert":
        from pipeline.versions.fast_rerun import try_fast_rerun

        # A versioned rerun whose input, options and software are unchanged is made from the
        # previous version without Beam or TensorFlow (pipeline/versions/fast_rerun.py).
        status = try_fast_rerun(rest)
        if status is not None:
            return status
        from pipeline import analysis_process
        from pipeline.launcher import check_options
        from pipeline.runners import forked_workers

        # --help, a bad option and a local path mistake answer before TensorFlow's import and
        # the forks below.
        status = check_options(rest)
        if status is not None:
            return status
        # Forks are safe in the program only (a library caller's threads and handlers are its
        # own), and only before TensorFlow has run anything.
        fresh = _as_program and "tensorflow" not in sys.modules
        # TFT's import, tracing and analysis in a process of their own, started before the
        # launcher imports Beam (pipeline/analysis_process.py); stopped when the command ends.
        if analysis_process.wanted(rest):
            analysis_process.start()
        # DirectRunner's worker processes forked with everything imported, not fresh
        # interpreters (pipeline/runners/forked_workers.py).
        idle = analysis_process.runs_nothing_here([a for a in rest if a != "--no_analyze"])
        if fresh and forked_workers.local_runner(rest) and not idle:
            import tensorflow  # noqa: F401 - imported once for the command and its workers

            forked_workers.start()
        try:
            from pipeline.launcher import run_convert

            return run_convert(rest)
        finally:
            analysis_process.stop()
            forked_workers.stop()
    if command == "versions":
        from core import startup
        from pipeline.versions.show import main as versions_main

        startup.finish()
        return versions_main(rest)
    if command in ("verify", "inspect", "preview"):
        from core import startup, storage
        from core.errors import ERROR_PREFIX

        try:
            if command == "verify":
                from pipeline.verify import main as verify_main

                return verify_main(rest)
            startup.finish()  # inspect and preview import nothing heavy first
            if command == "preview":
                return _preview(rest)
            return _inspect(rest)
        except storage.StoreOutageError as e:  # one line, like convert's
            print(f"imgrec: {str(e).removeprefix(ERROR_PREFIX)}", file=sys.stderr)
            return 1
    print(f"imgrec: unknown command {command!r}\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
