"""Decoders of rarer formats (Pillow's TIFF, PSD, ICO, ...; DICOM) in subprocesses that may die.

A native crash (segfault, abort) or a hang in such a plugin kills or stalls only its decoder
process: the file becomes a `decoder_error` reject and the job goes on. JPEG/PNG/GIF (TensorFlow)
and BMP/WebP (Pillow, in process) never come here, so the common path pays nothing.

Protocol on the worker's stdin/stdout: 4-byte big-endian length + pickle, one request at a time
per worker. A worker serves one caller at a time, so a worker that dies names its file.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import subprocess
import sys
import threading

__all__ = ["arrays", "probe", "pixels", "DECODE_TIMEOUT_S", "TEST_ABORT_ENV"]

# One decode of an allowed format at --max_pixels (89.5 Mpx) takes a few seconds; a worker that
# has not answered after this long is stuck in a loop on a crafted file and is killed.
DECODE_TIMEOUT_S = 120.0

# Test-only hook: while this variable is set in the converter's process, a worker whose file
# bytes contain its value calls os.abort() (proves that a decoder crash costs one file, not the
# job). Unset in real runs.
TEST_ABORT_ENV = "IMGREC_TEST_ABORT_ON"

# Longest exception text kept in a decoder_error detail.
_MAX_DETAIL = 300

_LEN = 4
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
            self.proc.stdin.write(len(payload).to_bytes(_LEN, "big") + payload)
            self.proc.stdin.flush()
            size = int.from_bytes(self._read(_LEN), "big")
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
    from core.rejects import Rejected

    decoder = decoder or f"Pillow ({'/'.join(formats)})"
    try:
        # The test hook travels with each request: a worker started earlier obeys it too.
        reply = _POOL.call((op, data, formats, os.environ.get(TEST_ABORT_ENV)))
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
    """The transforms.images.arrays.ArrayImage that `fmt`'s module (arrays.ARRAY_FORMATS) decodes
    from `data` under `request`, decoded in a decoder process.

    Raises:
        Rejected: the module's own reasons, or decoder_error (the process failed).
    """
    return _ask("arrays", data, (fmt, request), decoder=fmt.upper())


# ----------------------------------------------------------------------------- worker side
def _serve(op: str, data: bytes, formats: tuple[str, ...], abort_marker: str | None):
    from transforms.images import pillow_probe

    if abort_marker and abort_marker.encode() in data:
        os.abort()
    if op == "arrays":
        import importlib

        from transforms.images.arrays import ARRAY_FORMATS

        fmt, request = formats
        return importlib.import_module(ARRAY_FORMATS[fmt]).decode_arrays(data, request)
    im = pillow_probe.pillow_open(data, formats)
    if im is None:
        return None
    if op == "probe":
        return pillow_probe.pil_header(im, im.format or formats[0])
    image, icc = pillow_probe.pil_pixels(im)
    return image.mode, image.size, image.tobytes(), icc


def _main() -> None:
    from core.rejects import Rejected

    # Replies go to a private copy of stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    while True:
        head = stdin.read(_LEN)
        if len(head) < _LEN:
            return  # the converter closed the pipe (or exited): so do we
        request = pickle.loads(stdin.read(int.from_bytes(head, "big")))
        try:
            reply = ("ok", _serve(*request))
        except Rejected as e:
            reply = ("rejected", e.reason, e.detail)
        except Exception as e:  # noqa: BLE001  (the per-file boundary, on the worker's side)
            reply = ("error", f"{type(e).__name__}: {e}"[:_MAX_DETAIL])
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(payload).to_bytes(_LEN, "big") + payload)
        out.flush()


if __name__ == "__main__":
    _main()
