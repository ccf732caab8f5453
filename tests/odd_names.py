"""A corpus of file and folder names nobody thinks of: not UTF-8, newlines, control characters,
option look-alikes, HTML, names at NAME_MAX, a symlink loop (tests/integration/test_odd_names.py)."""

from __future__ import annotations

import io
import os
import random

__all__ = ["FOLDERS", "FILES", "jpeg", "build_local", "object_names"]

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


def _is_utf8(name: bytes) -> bool:
    try:
        name.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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


def object_names(store: str = "") -> list[bytes]:
    """Every `folder/file` name of the corpus (bytes), in a fixed order; with `store` ("gs" or
    "s3") only those that store can hold and its local test server serves."""
    names = []
    for folder in FOLDERS:
        for name in FILES:
            full = folder + b"/" + name
            if store and not _is_utf8(full):
                continue  # object names are UTF-8
            if store and (b"\n" in full or b"\r" in full):
                # GCS object names cannot contain CR or LF (its naming rules); S3 keys can, but
                # moto's server answers 404 to a PUT of one (its URL routing).
                continue
            if store == "gs" and (b"%" in full or b";" in full):
                # gcp-storage-emulator puts the name unquoted in an object's mediaLink (real
                # GCS quotes it), so it cannot serve `%E9` or `&amp;` names it stores.
                continue
            names.append(full)
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
