"""The decoder process: what runs in each subprocess decoder_pool.py starts, and which decoder
serves each request (Pillow's restricted plugins, the array formats' modules, a TIFF's window).

It sits on top of the decoders it runs; nothing in the converter imports it (decoder_pool starts
it as `python -m transforms.images.decode_worker`). A request is (op, data, formats, abort
marker), framed as decoder_pool.py describes; the reply is ("ok", value), ("rejected", reason,
detail) or ("error", text) for any other exception, so one file's bug never kills the worker.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys

from core import names
from core.rejects import Rejected
from transforms.images import pillow_probe, tiff
from transforms.images.arrays import ARRAY_FORMATS
from transforms.images.decoder_pool import LENGTH_BYTES

__all__: list[str] = []  # a program (python -m), never imported for its names

# Longest exception text kept in a decoder_error detail.
_MAX_DETAIL = 300


def _serve(op: str, data: bytes, formats: tuple[str, ...], abort_marker: str | None):
    if abort_marker and abort_marker.encode() in data:
        os.abort()
    if op == "arrays":
        fmt, request = formats
        return importlib.import_module(ARRAY_FORMATS[fmt]).decode_arrays(data, request)
    if op == "window":  # `data`: a local TIFF's path; only the window's tiles are read
        return _window(data.decode(), *formats)
    im = pillow_probe.pillow_open(data, formats)
    if im is None:
        return None
    if op == "probe":
        return pillow_probe.pil_header(im, im.format or formats[0])
    image, icc = pillow_probe.pil_pixels(im)
    return image.mode, image.size, image.tobytes(), icc


def _window(path: str, y: int, x: int, height: int, width: int, request):
    """tiff.decode_window of the local file at `path` (its travelling form), opened here."""
    with open(names.local_path(path), "rb") as f:
        return tiff.decode_window(f, y, x, height, width, request)


def _main() -> None:
    # Replies go to a private copy of stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    while True:
        head = stdin.read(LENGTH_BYTES)
        if len(head) < LENGTH_BYTES:
            return  # the converter closed the pipe (or exited): so do we
        request = pickle.loads(stdin.read(int.from_bytes(head, "big")))
        try:
            reply = ("ok", _serve(*request))
        except Rejected as e:
            reply = ("rejected", e.reason, e.detail)
        except Exception as e:  # noqa: BLE001  (the per-file boundary, on the worker's side)
            reply = ("error", f"{type(e).__name__}: {e}"[:_MAX_DETAIL])
        payload = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(payload).to_bytes(LENGTH_BYTES, "big") + payload)
        out.flush()


if __name__ == "__main__":
    _main()
