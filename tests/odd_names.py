"""A corpus of file and folder names nobody thinks of: not UTF-8, newlines, control characters,
option look-alikes, HTML, names at NAME_MAX, a symlink loop (tests/unit/test_odd_names.py)."""

from __future__ import annotations

import io
import os
import random

__all__ = ["FOLDERS", "FILES", "LOCAL_ONLY", "jpeg", "build_local", "object_names"]

# Folder names (labels, as bytes): plain, Latin-1 `café`, a newline, an option, an escape
# sequence that would colour a terminal, HTML, and the escaped form of the Latin-1 one (which
# must stay a different label from it only where the bytes differ).
FOLDERS = (
    b"cat",
    b"caf\xe9",
    b"new\nline",
    b"-x",
    b"ctl\x1b[31m",
    b"<b>&amp;",
)
# File names (bytes) in every folder. 255 bytes is NAME_MAX on ext4, tmpfs, xfs.
FILES = (
    b"plain.jpg",
    b"latin1_\xe9t\xe9.jpg",
    b"a\nb.jpg",
    b"bell\x07\x1b[2J\r.jpg",
    b"-x.jpg",
    b"--help.jpg",
    b"%E9t%E9.jpg",
    b"sp ace \"quote\" 'single'.jpg",
    b"back\\slash.jpg",
    b"<script>&amp;.jpg",
    "emoji \U0001f408 \u2028 sep.jpg".encode(),
    b"x" * 251 + b".jpg",
    b"\xff" * 247 + b"\xe9.jpg\xff\xfe\xfd",  # 255 bytes, not UTF-8, no .jpg at the end
    b"\xed\xb2\x80.jpg",  # UTF-8 of a lone surrogate: not valid UTF-8 either
)
# Names an object store cannot hold or that only local disks have (kept out of bucket runs).
LOCAL_ONLY = (b"caf\xe9", b"latin1_\xe9t\xe9.jpg", b"\xed\xb2\x80.jpg")


def jpeg(seed: int, side: int = 40) -> bytes:
    """A small JPEG of random pixels, different for every seed (no duplicates)."""
    from PIL import Image

    rng = random.Random(seed)
    img = Image.frombytes(
        "RGB", (side, side), bytes(rng.randrange(256) for _ in range(side * side * 3))
    )
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def object_names(local_only: bool = True) -> list[bytes]:
    """Every `folder/file` name of the corpus (bytes), in a fixed order."""
    names = []
    for folder in FOLDERS:
        for name in FILES:
            if not local_only and (folder in LOCAL_ONLY or name in LOCAL_ONLY):
                continue
            if not local_only and len(name) > 200:
                continue  # GCS and S3 keys may be 1024 bytes; keep bucket runs short
            names.append(folder + b"/" + name)
    return names


def build_local(root: str) -> list[bytes]:
    """Write the corpus under `root` (plus a symlink loop in every folder: `loop` -> `..`);
    returns the absolute paths of the files, as bytes."""
    base = os.fsencode(root)
    paths = []
    for i, name in enumerate(object_names()):
        path = os.path.join(base, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(jpeg(i))
        paths.append(path)
    for folder in FOLDERS:
        os.symlink(b"..", os.path.join(base, folder, b"loop"))
    return paths
