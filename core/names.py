"""File names that are not UTF-8: the escaped `file://` form they travel and print in, and back.

A local file name is bytes. Python hands a name that is not valid UTF-8 (a Latin-1 `été` is
the bytes `e9 74 e9`) over as a str with surrogate escapes (`os.fsdecode`), which Beam's coders,
JSON lines and protobuf strings cannot carry (`UnicodeEncodeError: ... surrogates not allowed`).
Such a path travels the pipeline, and is written to rejected.jsonl, duplicates.jsonl, the
version's files.jsonl.gz and the report, as a `file://` URI (RFC 8089) whose undecodable bytes
and `%` are percent-escaped, everything else as is: `file:///data/cat/latin1_%E9t%E9.jpg`.
`urllib.parse.unquote_to_bytes(uri[len("file://"):])` gives the name's exact bytes back, and
`image/filename` holds those bytes. Every other path (all of them on GCS and S3, whose object
names are UTF-8) is left exactly as it was. docs/rejects.md "File names" has the rules.
"""

from __future__ import annotations

import os
import re
import urllib.parse

__all__ = [
    "ESCAPED_PREFIX",
    "absolute_escaped",
    "escape_text",
    "filename_bytes",
    "from_local",
    "is_utf8",
    "local_path",
    "printable",
]

# Local paths are absolute ('/...'), so a listed path starting with this prefix can only be an
# escaped one; Beam registers no `file` scheme, so nothing else reads it by accident.
ESCAPED_PREFIX = "file://"

# A lone surrogate from os.fsdecode stands for one undecodable byte: U+DC80..U+DCFF.
_SURROGATE = re.compile("[\udc80-\udcff%]")
# What a terminal or a one-line report cell must not get raw: C0 and C1 controls, DEL, and the
# line/paragraph separators some viewers break lines at.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def is_utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (no surrogate escapes from os.fsdecode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escape_text(text: str) -> str:
    """`text` itself when it is valid UTF-8; else its undecodable bytes and `%` as `%XX`.

    For keys and labels cut from a path (folder names), which must be strings every coder and
    JSON writer takes.
    """
    if is_utf8(text):
        return text
    return _SURROGATE.sub(
        lambda m: "%25" if m.group() == "%" else f"%{ord(m.group()) - 0xDC00:02X}", text
    )


def from_local(path: str) -> str:
    """The form a local `path` travels in: itself, or the escaped `file://` URI when its name is
    not valid UTF-8 (the str holds surrogate escapes). Already escaped URIs and URIs of other
    stores are returned unchanged."""
    if is_utf8(path):
        return path
    if "://" in path:  # A bucket object cannot have this name: reading it says so, named.
        return escape_text(path)
    return ESCAPED_PREFIX + escape_text(os.fsdecode(os.fsencode(path)))


def local_path(path: str) -> str:
    """The path the OS opens for a travelling `path`: an escaped `file://` URI decoded back to
    the name's bytes (as a surrogate-escaped str); any other path unchanged."""
    if not path.startswith(ESCAPED_PREFIX):
        return path
    return os.fsdecode(urllib.parse.unquote_to_bytes(path[len(ESCAPED_PREFIX) :]))


def filename_bytes(path: str) -> bytes:
    """What `image/filename` holds for a travelling `path`: the exact bytes of a local name that
    is not UTF-8, else the path's UTF-8 (as before, byte for byte)."""
    if path.startswith(ESCAPED_PREFIX):
        return os.fsencode(local_path(path))
    return path.encode("utf-8")


def printable(name: str | bytes) -> str:
    """`name` for one line of a terminal or report: not-UTF-8 bytes as from_local escapes them,
    control characters (newline, ESC, ...) as `\\n`, `\\x1b`, `\\u2028`; the rest as is."""
    if isinstance(name, bytes):
        name = from_local(os.fsdecode(name))
    elif not is_utf8(name):
        name = from_local(name)

    def one(m: re.Match) -> str:
        text = repr(m.group())[1:-1]
        return text if text.startswith("\\") else f"\\x{ord(m.group()):02x}"

    return _UNPRINTABLE.sub(one, name)


def absolute_escaped(path: str) -> str:
    """A local path made absolute, then escaped (`from_local`); a URI only escaped."""
    if "://" not in path:
        path = os.path.abspath(os.path.expanduser(path))
    return from_local(path)
