"""DirectRunner's worker processes forked from a process that has everything imported already.

Beam starts each DirectRunner worker process (`--workers 2`, and the default for large inputs,
pipeline/launch/choose.py) as a fresh interpreter, `python -m
apache_beam.runners.worker.sdk_worker_main`, which imports Beam, TensorFlow and the stages'
modules again, seconds of CPU per worker paid while the launcher waits for its workers.

`imgrec convert` instead forks a *zygote* (`Zygote.start`) at the point where it forks the analysis
process: Beam, TensorFlow and the stages are imported and TensorFlow has run nothing. Beam still
starts its worker command (`command()`, given to `pipeline.runners.direct.DirectRunner`), but that command
is `fork_client.py`, a bare interpreter that hands the zygote its environment and its standard
streams over a Unix socket; the zygote forks a worker that runs Beam's own
`sdk_worker_main.main` with them, and reports the worker's exit status back, which the client
exits with. So Beam sees the worker process it expects (its command, environment, streams, exit
status; killing the client kills the worker), and the worker starts in milliseconds. A zygote
that is killed takes its workers with it (PR_SET_PDEATHSIG).

Only the `imgrec` program starts one (pipeline/launch/services.py). Where there is no zygote (a
library caller, a test, not Linux, a remote runner, `IMGREC_FORKED_WORKERS=0` for A/B runs) Beam's
own command runs. A client that finds no zygote runs Beam's worker itself.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import logging
import os
import select
import shlex
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import traceback

from pipeline.launch import startup

__all__ = ["STARTED", "Zygote", "end_child"]

_CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fork_client.py")
# linux/prctl.h: the signal this process gets when its parent thread exits.
_PR_SET_PDEATHSIG = 1
_PREFIX = "imgrec-workers-"
# The client's working directory travels in its environment message under this name.
_CWD_KEY = "\0cwd"
# One message: the client's environment (PIPELINE_OPTIONS is its largest variable, ~10 KB).
_MAX_MESSAGE = 1 << 22
# How often the idle zygote checks that the command still runs (it exits once it has gone).
_PARENT_CHECK_S = 1.0
# The zygote's first message to a client: its worker is forked (then the exit status, "!i").
# A client that gets none starts Beam's own worker (fork_client.py).
STARTED = b"S"


class Zygote:
    """The forked zygote and its socket's folder; `command()` is the worker command for Beam."""

    def __init__(self, pid: int, folder: str):
        self.pid = pid
        self.folder = folder

    @classmethod
    def start(cls) -> Zygote | None:
        """Fork the zygote; None where it cannot be. Call only where the analysis process could
        be forked: Beam and TensorFlow imported by this process itself, TensorFlow having run
        nothing (its thread pools would not exist in the forked workers)."""
        if sys.platform != "linux" or not _pidfds_work():
            return None
        import pipeline.builder  # noqa: F401 - every stage module the workers unpickle DoFns from

        listener, folder = _listen()
        if listener is None:
            return None
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError:  # no process to spare: Beam's own workers
            listener.close()
            shutil.rmtree(folder, ignore_errors=True)
            return None
        if pid == 0:  # the zygote: never returns into the command's code
            status = 1
            try:
                _zygote(listener, parent)
                status = 0
            finally:
                shutil.rmtree(folder, ignore_errors=True)  # also when the command was killed
                os._exit(status)
        listener.close()
        zygote = cls(pid, folder)
        atexit.register(zygote.stop)
        return zygote

    def command(self) -> str:
        """The worker command for Beam's SubprocessSDKEnvironment."""
        socket_path = os.path.join(self.folder, "s")
        return " ".join(shlex.quote(a) for a in (sys.executable, "-I", "-S", _CLIENT, socket_path))

    def stop(self) -> None:
        """End the zygote (its workers end with the job) and remove its socket."""
        if self.pid:
            end_child(self.pid, signal.SIGTERM, self.folder)  # SIGTERM: it ends its workers first
            self.pid = 0


def _pidfds_work() -> bool:
    """The zygote waits on its workers through pidfds (Linux 5.3; a sandbox may refuse)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def _listen() -> tuple[socket.socket | None, str]:
    """(a listening socket in a fresh folder, the folder); (None, "") where there can be none:
    no usable temp dir (the preflight names it), no SEQPACKET sockets, a temp path too long."""
    try:
        folder = tempfile.mkdtemp(prefix=_PREFIX)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:
        return None, ""
    try:
        listener.bind(os.path.join(folder, "s"))
        listener.listen(16)
    except OSError:
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)
        return None, ""
    return listener, folder


def end_child(pid: int, sig: int, folder: str) -> None:
    """Send a child the command forked `sig` (it may have ended already), reap it, and remove
    the folder it worked in (the analysis process's hand-off, the zygote's socket)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- the zygote
def _zygote(listener: socket.socket, parent: int) -> None:
    """Fork a worker for each client; send each client its worker's exit status."""
    atexit._clear()  # the command's exit handlers (the analysis process's stop) are not ours
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold none of the command's streams (a pipe's reader waits for EOF)
        os.dup2(devnull, fd)
    os.close(devnull)
    os.closerange(3, listener.fileno())
    os.closerange(listener.fileno() + 1, 1 << 16)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Ctrl-C reaches the whole process group: the workers stop as Beam's would, the zygote
    # reports their statuses, and the command's stop() (or its exit) ends the zygote.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    workers: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the client's socket)
    clients: dict[int, int] = {}  # client socket fd -> its worker's pidfd
    try:
        while True:
            poller = select.poll()  # not select(): no limit of 1,024 descriptors
            for fd in (listener.fileno(), *clients, *workers):
                poller.register(fd, select.POLLIN)
            ready = [fd for fd, _ in poller.poll(_PARENT_CHECK_S * 1000)]
            if not ready and os.getppid() != parent:
                return  # the command has gone
            for fd in ready:
                if fd == listener.fileno():
                    pidfd, conn = _fork_worker(listener, workers)
                    if pidfd is not None:
                        clients[conn.fileno()] = pidfd
                elif fd in workers:  # a worker ended: its status to its client
                    pid, conn = workers.pop(fd)
                    os.close(fd)
                    _, status = os.waitpid(pid, 0)
                    clients.pop(conn.fileno(), None)
                    with contextlib.suppress(OSError):
                        conn.send(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                    conn.close()
                elif fd in clients:  # the client ended (Beam killed it): so does its worker
                    with contextlib.suppress(OSError, ProcessLookupError):
                        os.kill(workers[clients.pop(fd)][0], signal.SIGKILL)
    finally:
        for pid, _ in workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _fork_worker(listener: socket.socket, workers: dict) -> tuple[int | None, socket.socket]:
    """Accept one client and fork its worker; returns (the worker's pidfd, the client's socket)."""
    conn, _ = listener.accept()
    zygote = os.getpid()
    try:
        message, fds, _, _ = socket.recv_fds(conn, _MAX_MESSAGE, 3)
        environment = json.loads(message)
    except (OSError, ValueError):
        conn.close()
        return None, conn
    try:
        pid = os.fork()
    except OSError:  # no process to spare: the client starts Beam's own worker instead
        pid = None
    if pid == 0:
        _die_with(zygote)
        listener.close()
        conn.close()
        for _, other in workers.values():
            other.close()
        _worker(environment, fds)  # never returns
    for fd in fds:
        os.close(fd)
    if pid is None:
        conn.close()
        return None, conn
    pidfd = os.pidfd_open(pid)
    workers[pidfd] = (pid, conn)
    with contextlib.suppress(OSError):
        conn.send(STARTED)
    return pidfd, conn


def _die_with(zygote: int) -> None:
    """Have the kernel SIGKILL this worker when the zygote dies (PR_SET_PDEATHSIG).

    The zygote kills its workers when it exits by itself; killed (the OOM killer, a SIGKILL), it
    cannot, and a worker whose client has failed the job would run on, re-parented, until its
    runner's channel closed. Where prctl is unavailable nothing changes.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != zygote:  # it died before prctl took effect
        os._exit(1)


def _worker(environment: dict, fds: list[int]) -> None:
    """Become the worker process Beam asked for: its environment and streams (the client's),
    logging and exit handlers as a fresh process has them, then Beam's `sdk_worker_main`."""
    status = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # not the command's tees
        os.chdir(environment.pop(_CWD_KEY))
        os.environ.clear()
        os.environ.update(environment)
        root = logging.getLogger()
        root.handlers = []  # sdk_worker_main sends the worker's logs to the runner
        root.setLevel(logging.WARNING)
        logging.captureWarnings(False)
        threading.excepthook = threading.__excepthook__
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        startup.finish()  # the collector back on, the inherited imports frozen
        from apache_beam.runners.worker import sdk_worker_main

        sys.argv = [sdk_worker_main.__file__]  # not the command's: Beam parses it for options
        sdk_worker_main.main(sys.argv)
        status = 0
    except SystemExit as e:  # as the interpreter exits: None is 0, a message is printed
        if e.code is None or isinstance(e.code, int):
            status = e.code or 0
        else:
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback, status 1
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # the worker's own (its decoder processes)
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)
