"""A quiet terminal: other libraries' output (every process, every fd) goes to a log file.

Without `-v` the `imgrec` command points file descriptors 1 and 2 at a log file before
TensorFlow or Beam is imported. Everything written below Python (absl's C++ logging, oneDNN and
CUDA notices, libjpeg's "Premature end of JPEG data") and everything written by child processes
(DirectRunner's multi-process SDK workers inherit the descriptors, see Beam's
`SubprocessSdkWorker`) lands in the log. Python's logging (Beam's "Discarding unparseable args",
the workers' log records relayed by the job service, TensorFlow's logger) and `warnings` go to
the same file through a root handler installed first, so no library adds its own stderr handler.
`sys.stdout`/`sys.stderr` are re-opened on copies of the terminal's descriptors: imgrec's own
`print` calls reach the terminal unchanged (and are copied into the log, so it tells the whole
story).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import io
import logging
import os
import sys
import tempfile
import threading
import traceback

__all__ = [
    "Capture",
    "log_dir",
    "log_hint",
    "log_thread_error",
]

# Logs older than this are deleted when a new run starts: a week keeps a failed run's log around
# long enough to read it, without letting a busy machine fill <tmp>.
_KEEP_LOGS_S = 7 * 24 * 3600


def log_hint(log_path: str | None) -> str:
    """' (full log: PATH)' for a quiet run's log file, else ''."""
    return f" (full log: {log_path})" if log_path else ""


def log_dir(configured: str | None = None) -> str:
    """`configured` (IMGREC_LOG_DIR), else <tmp>/imgrec-logs-<uid>: one folder per user, since on
    a shared machine the first user's <tmp>/imgrec-logs (mode 755) refused everyone else's log
    files, and their runs stopped with a PermissionError traceback before doing anything."""
    if configured:
        return configured
    return os.path.join(tempfile.gettempdir(), f"imgrec-logs-{os.getuid()}")


def _open_log(command: str, configured_dir: str | None) -> tuple[int, str]:
    """(descriptor, path) of a new log file in log_dir(), or, if that folder cannot take one
    (not writable, not a folder, a read-only disk), in a fresh private temp folder.

    Raises:
        OSError: not even a temp folder can be made.
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    prefix, suffix = f"imgrec-{command}-{stamp}-", ".log"
    directory = log_dir(configured_dir)
    try:
        os.makedirs(directory, exist_ok=True)
        _prune(directory)
        return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    except OSError:
        return tempfile.mkstemp(
            prefix=prefix, suffix=suffix, dir=tempfile.mkdtemp(prefix="imgrec-")
        )


def _prune(directory: str) -> None:
    now = datetime.datetime.now().timestamp()
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        try:
            if name.endswith(".log") and now - os.path.getmtime(path) > _KEEP_LOGS_S:
                os.unlink(path)
        except OSError:
            pass  # Another run pruned it first.


class _Tee(io.TextIOBase):
    """imgrec's own output: to the terminal, and a copy into the log."""

    def __init__(self, terminal: io.TextIOWrapper, log, counter: list[int]):
        self._terminal = terminal
        self._log = log
        self._counter = counter  # bytes copied into the log, shared by stdout's and stderr's
        self.terminal = terminal  # for redrawn lines (progress) that the log should not keep

    def write(self, text: str) -> int:
        self._terminal.write(text)
        self._terminal.flush()
        try:
            self._log.write(text)
            self._log.flush()
            self._counter[0] += len(text.encode("utf-8", "replace"))
        except (OSError, ValueError):
            pass  # The log is a copy; a full disk must not stop the run's own output.
        return len(text)

    def flush(self) -> None:
        self._terminal.flush()

    def isatty(self) -> bool:
        return self._terminal.isatty()

    def fileno(self) -> int:
        return self._terminal.fileno()

    @property
    def encoding(self):
        return self._terminal.encoding


def log_thread_error(log_path: str):
    """A `threading.excepthook` that appends the thread's traceback to the log file."""

    def to_log(args) -> None:
        with contextlib.suppress(OSError), open(log_path, "a", encoding="utf-8") as f:
            f.write(f"Exception in thread {getattr(args.thread, 'name', '?')}:\n")
            traceback.print_exception(args.exc_type, args.exc_value, args.exc_traceback, file=f)

    return to_log


class Capture:
    """Context manager: send other libraries' output to a log file unless `verbose`.

    Attributes:
        log_path: the log file (None when verbose: everything is on the terminal).
    """

    def __init__(self, verbose: bool, command: str = "run", log_dir: str | None = None):
        self.verbose = verbose
        self.command = command
        self._log_dir = log_dir  # IMGREC_LOG_DIR
        self.log_path: str | None = None
        self.log_file = None  # the open log (None when verbose)
        self._saved: list = []

    def __enter__(self) -> Capture:
        if self.verbose:
            return self
        try:
            fd, self.log_path = _open_log(self.command, self._log_dir)
        except OSError as e:  # no writable temp folder at all: everything stays on the terminal
            print(f"imgrec: no log file ({e}); other libraries' output is shown", file=sys.stderr)
            self.verbose = True
            return self
        # O_APPEND: the worker processes inheriting the descriptor never write over each other.
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        log = os.fdopen(fd, "a", buffering=1, encoding="utf-8", errors="replace")
        self.log_file = log
        sys.stdout.flush()
        sys.stderr.flush()
        terminal_out, terminal_err = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        self._saved = [sys.stdout, sys.stderr, terminal_out, terminal_err, log]
        self._teed = [0]
        sys.stdout = _Tee(open(terminal_out, "w", closefd=False, encoding="utf-8"), log, self._teed)
        sys.stderr = _Tee(open(terminal_err, "w", closefd=False, encoding="utf-8"), log, self._teed)
        root = logging.getLogger()
        self._handler = logging.StreamHandler(log)
        self._handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        )
        self._old_handlers = root.handlers[:]
        self._old_level = root.level
        root.handlers = [self._handler]
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        # Tracebacks of other libraries' threads (Beam's worker watchers, gRPC's servers when a
        # run is interrupted) go through sys.stderr, which shows our own lines: log them only.
        self._old_excepthook = threading.excepthook
        threading.excepthook = log_thread_error(self.log_path)
        return self

    def has_other_output(self) -> bool:
        """Whether the log holds more than imgrec's own lines (then it is worth naming)."""
        try:
            return os.path.getsize(self.log_path) > self._teed[0]
        except (OSError, TypeError):
            return False

    def __exit__(self, *exc) -> None:
        if self.verbose or not self._saved:
            return
        old_out, old_err, terminal_out, terminal_err, log = self._saved
        sys.stdout.flush()
        sys.stderr.flush()
        logging.captureWarnings(False)
        threading.excepthook = self._old_excepthook
        root = logging.getLogger()
        root.handlers = self._old_handlers
        root.setLevel(self._old_level)
        os.dup2(terminal_out, 1)
        os.dup2(terminal_err, 2)
        os.close(terminal_out)
        os.close(terminal_err)
        sys.stdout, sys.stderr = old_out, old_err
        log.close()
        self._saved = []
