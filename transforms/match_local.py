"""Match a local glob pattern by walking the folders it names, reporting what cannot be listed.

Beam's local match (`os.walk`, then a regex) drops, without a word, a dangling symlink (its size
lookup fails), a folder it cannot open (os.walk ignores the error), a folder whose name matches
the pattern (`x.jpg/`) and every file below a symlinked folder. This walker lists the same files
and says what happened to the rest, so the listing accounts for everything the pattern matched.

Beam-free (bucket listings import FileSystems when called): the listing DoFn in
transforms/list_images.py and the no-change rerun (pipeline/versions/rerun_stores.py) call it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Iterator

from core.names import from_local

__all__ = ["LocalEntry", "match_bucket", "match_local", "translate_glob", "has_glob"]

_GLOB_CHARS = "*?["
# On POSIX a backslash is an ordinary character of a name; only Windows separates with it.
_SEPS = "/\\" if os.sep == "\\" else "/"
_NOT_SEP = "[^" + re.escape(_SEPS) + "]"


@dataclasses.dataclass(frozen=True)
class LocalEntry:
    """One thing the pattern matched: a file (`reason` None) or a listing reject.

    `stamp` identifies the file's version without reading it (modification and change times in
    ns and inode): --resume reuses earlier inspection results only while it is unchanged.
    """

    path: str
    size: int = -1
    stamp: str | None = None
    reason: str | None = None
    detail: str = ""


def has_glob(pattern: str) -> bool:
    return any(c in pattern for c in _GLOB_CHARS)


def translate_glob(pattern: str) -> str:
    """A glob -> a regex for whole paths: `**` any characters, `*` any within one name, `?` one
    character of a name, `[...]` a set. Beam's syntax, except that on POSIX `*` and `?` also
    match a backslash (Beam's stop at both separators)."""
    i, n, out = 0, len(pattern), []
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out.append(".*")
                i += 1
            else:
                out.append(_NOT_SEP + "*")
        elif c == "?":
            out.append(_NOT_SEP)
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(r"\[")
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                out.append(f"[{stuff}]")
        else:
            out.append(re.escape(c))
    return r"(?ms)" + "".join(out) + r"\Z"


def _split(path: str) -> list[str]:
    return re.split("[" + re.escape(_SEPS) + "]", path)


def _join(directory: str, name: str) -> str:
    return directory + name if directory.endswith(tuple(_SEPS)) else directory + os.sep + name


def _stamp(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def _classify(path: str, is_link: bool) -> LocalEntry | None:
    """A matched name that is not a folder -> its entry; None if it vanished meanwhile."""
    try:
        st = os.stat(path)
    except OSError as e:
        if is_link:
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return LocalEntry(
                path,
                reason="broken_link",
                detail=f"a symbolic link to {target!r}, which does not resolve "
                f"({e.strerror or type(e).__name__})",
            )
        if isinstance(e, FileNotFoundError):
            return None  # Deleted between the listing and now: no longer part of the input.
        return LocalEntry(path)  # The read names the error (reject `unreadable`).
    if stat.S_ISREG(st.st_mode):
        return LocalEntry(path, size=st.st_size, stamp=_stamp(st))
    kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (FIFO, socket, device)"
    return LocalEntry(path, reason="not_a_file", detail=f"the pattern matched {kind}, not a file")


def match_local(pattern: str) -> Iterator[LocalEntry]:
    """Every file an absolute local `pattern` matches, as _match_local finds them, each path in
    the form it travels in (core/names.py: a name that is not UTF-8 as an escaped
    `file://` URI)."""
    for entry in _match_local(pattern):
        path = from_local(entry.path)
        yield entry if path is entry.path else dataclasses.replace(entry, path=path)


def _match_local(pattern: str) -> Iterator[LocalEntry]:
    """Every file an absolute local `pattern` matches, in name order, and a reject for each
    dangling symlink (`broken_link`), folder that cannot be opened (`unreadable_dir`) and
    folder or special file (`not_a_file`) the pattern matches.

    Only folders that can hold matches are walked; symlinked folders are followed (a link back
    to one of its own parents is not walked twice). A folder is reported as `not_a_file` only
    when the pattern's last name is more than wildcards (`*.jpg`, not `*` or `**`), so `dir/**`
    lists files without reporting every folder.
    """
    cut = min((i for i, c in enumerate(pattern) if c in _GLOB_CHARS), default=len(pattern))
    if cut == len(pattern):  # One named path.
        if os.path.lexists(pattern):
            entry = _classify(pattern, os.path.islink(pattern))
            if entry is not None:
                yield entry
        return
    head = pattern[:cut]
    last_sep = max(head.rfind(s) for s in _SEPS)
    root = head[: last_sep + 1] or "."
    if not os.path.isdir(root):
        return
    base = root if root.endswith(tuple(_SEPS)) else root + os.sep
    yield from _Walk(pattern, pattern[last_sep + 1 :]).walk(base, [], frozenset())


class _Walk:
    """The walk of one pattern's folders below its root; `tail` is the pattern past the root."""

    def __init__(self, pattern: str, tail: str):
        self._segments = _split(tail)
        self._full = re.compile(translate_glob(pattern))
        self._report_dirs = bool(self._segments[-1].replace("*", ""))
        self._deep = next(
            (i for i, s in enumerate(self._segments) if "**" in s), len(self._segments)
        )
        self._seg_res = [re.compile(translate_glob(s)) for s in self._segments[: self._deep]]

    def _may_hold_matches(self, parts: list[str]) -> bool:
        known = min(len(parts), self._deep)
        if any(not self._seg_res[i].match(parts[i]) for i in range(known)):
            return False
        return self._deep < len(self._segments) or len(parts) < len(self._segments)

    def walk(self, directory: str, parts: list[str], ancestors: frozenset) -> Iterator[LocalEntry]:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
            here = os.stat(directory)
        except OSError as e:
            yield LocalEntry(
                directory.rstrip(_SEPS) or directory,
                reason="unreadable_dir",
                detail=f"cannot list this folder ({type(e).__name__}: {e.strerror or e}); "
                "files the pattern would match inside it are not converted; fix its "
                "permissions (it needs r and x) or leave it out of --input",
            )
            return
        ancestors = ancestors | {(here.st_dev, here.st_ino)}
        for entry in entries:
            path = _join(directory, entry.name)
            sub = [*parts, entry.name]
            is_link = entry.is_symlink()
            try:
                is_dir = entry.is_dir()  # Follows symlinks.
            except OSError:
                is_dir = False
            if is_dir:
                if self._report_dirs and self._full.match(path):
                    yield LocalEntry(
                        path,
                        reason="not_a_file",
                        detail="the pattern matched a folder, not a file",
                    )
                if self._may_hold_matches(sub):
                    try:
                        st = entry.stat()
                    except OSError:
                        continue  # Vanished meanwhile.
                    if (st.st_dev, st.st_ino) not in ancestors:
                        yield from self.walk(path, sub, ancestors)
            elif self._full.match(path):
                found = _classify(path, is_link)
                if found is not None:
                    yield found


def match_bucket(pattern: str) -> list:
    """FileSystems.match of a bucket `pattern`, with match_local's reading of `*` and `?`.

    Beam's `*` and `?` do not match a backslash, on buckets too, where it is an ordinary
    character of an object name: `gs://b/p/*/*` silently left out `cat/back\\slash.jpg`. Beam
    lists every object under the pattern's literal prefix and filters them with its regex; this
    lists the same objects (the prefix + `**`, whose `.*` matches anything) and filters with
    match_local.translate_glob.
    """
    from apache_beam.io.filesystems import FileSystems  # Bucket listings only.

    if not has_glob(pattern):
        return FileSystems.match([pattern])[0].metadata_list
    cut = min(i for i, c in enumerate(pattern) if c in _GLOB_CHARS)
    wanted = re.compile(translate_glob(pattern))
    listed = FileSystems.match([pattern[:cut] + "**"])[0].metadata_list
    return [m for m in listed if wanted.match(m.path)]
