"""The converter's side of the decoder processes: rarer formats (Pillow's TIFF, PSD, ICO, ...;
DICOM) decoded in subprocesses that may die, started and asked from here.

A native crash (segfault, abort) or a hang in such a plugin kills or stalls only its decoder
process: the file becomes a `decoder_error` reject and the job goes on. JPEG/PNG/GIF (TensorFlow)
and BMP/WebP (Pillow, in process) never come here, so the common path pays nothing.

Each subprocess runs decode_worker.py, which imports the decoders; this module imports none of
them, so the modules that ask for an isolated decode (pillow_probe, transcode, arrays) sit above
it and the worker above them. Protocol on the worker's stdin/stdout: LENGTH_BYTES big-endian
length + pickle, one request at a time per worker. A worker serves one caller at a time, so a
worker that dies names its file.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import subprocess
import sys
import threading

from core.rejects import Rejected

__all__ = [
    "arrays",
    "probe",
    "pixels",
    "window",
    "DECODE_TIMEOUT_S",
    "LENGTH_BYTES",
    "test_abort_marker",
]

# One decode of an allowed format at --max_pixels (89.5 Mpx) takes a few seconds; a worker that
# has not answered after this long is stuck in a loop on a crafted file and is killed.
DECODE_TIMEOUT_S = 120.0

# Test-only hook: while a test sets this (monkeypatch), a worker whose file bytes contain it
# calls os.abort() (proves that a decoder crash costs one file, not the job). None in real runs.
test_abort_marker: str | None = None

# Bytes of the big-endian length before each pickled request and reply: messages up to 4 GiB,
# shared with the worker's side (decode_worker.py).
LENGTH_BYTES = 4
# The repository root, put on the worker's PYTHONPATH so that `-m` finds decode_worker.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Worker:
    """One decoder subprocess."""

    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (_ROOT, env.get("PYTHONPATH"))))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "transforms.images.decode_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
        )

    def call(self, request: tuple):
        """Send one request; the worker's reply. Raises _Died if the worker died or hung."""
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(len(payload).to_bytes(LENGTH_BYTES, "big") + payload)
            self.proc.stdin.flush()
            size = int.from_bytes(self._read(LENGTH_BYTES), "big")
            return pickle.loads(self._read(size))
        except (BrokenPipeError, EOFError, TimeoutError) as e:
            raise _Died(self._death(e)) from e

    def _read(self, n: int) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, left = [], n
        while left:
            ready, _, _ = select.select([fd], [], [], DECODE_TIMEOUT_S)
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _death(self, error: BaseException) -> str:
        if isinstance(error, TimeoutError):
            self.close(kill=True)
            return f"decoder process did not answer within {DECODE_TIMEOUT_S:g} s (killed)"
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.close(kill=True)
            return "decoder process stopped answering (killed)"
        if code < 0:
            return f"decoder process died (signal {-code})"
        return f"decoder process exited with status {code}"

    def close(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class _Died(Exception):
    pass


class _Pool:
    """Idle workers, started on demand: as many as callers at once (one per decode thread)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._pid = os.getpid()

    def call(self, request: tuple):
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's pipes are not ours
                self._idle, self._pid = [], os.getpid()
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker()
        try:
            reply = worker.call(request)
        except _Died:
            worker.close()
            raise
        with self._lock:
            self._idle.append(worker)
        return reply

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_POOL = _Pool()
atexit.register(_POOL.close)


def _ask(op: str, data: bytes, formats, decoder: str = ""):
    """The worker's answer to (op, data, formats), or Rejected (its own, or decoder_error)."""
    decoder = decoder or f"Pillow ({'/'.join(formats)})"
    try:
        # The test hook travels with each request: a worker started earlier obeys it too.
        reply = _POOL.call((op, data, formats, test_abort_marker))
    except _Died as e:
        raise Rejected("decoder_error", f"{decoder}: {e}") from None
    kind = reply[0]
    if kind == "ok":
        return reply[1]
    if kind == "rejected":
        raise Rejected(reply[1], reply[2])
    raise Rejected("decoder_error", f"{decoder}: {reply[1]}")


def probe(data: bytes, formats: tuple[str, ...]):
    """The headers.Header of `data` opened with Pillow's `formats` plugins in a decoder
    process, or None if none opens it.

    Raises:
        Rejected: the plugin found damage, or the decoder process failed (decoder_error).
    """
    return _ask("probe", data, tuple(formats))


def pixels(data: bytes, formats: tuple[str, ...]):
    """(mode, (width, height), raw pixels, ICC profile) of the first frame, normalised to
    L/LA/RGB/RGBA, decoded in a decoder process; None if no plugin opens `data`.

    Raises:
        Rejected: as for probe.
    """
    return _ask("pixels", data, tuple(formats))


def arrays(fmt: str, data: bytes, request):
    """The array_contract.ArrayImage that `fmt`'s module (arrays.ARRAY_FORMATS) decodes
    from `data` under `request`, decoded in a decoder process.

    Raises:
        Rejected: the module's own reasons, or decoder_error (the process failed).
    """
    return _ask("arrays", data, (fmt, request), decoder=fmt.upper())


def window(path: str, y: int, x: int, height: int, width: int, request):
    """tiff.decode_window (a tiff.TiffWindow) of one window of the local TIFF at `path`, which
    the decoder process opens and reads only the tiles or strips of (--tile chips).

    Raises:
        Rejected: tiff.py's reasons, or decoder_error (the process failed).
    """
    return _ask("window", path.encode(), (y, x, height, width, request), decoder="TIFF")
