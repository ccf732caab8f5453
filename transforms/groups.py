"""--group_by and --label_from dicom:TAG: the specs checked, a file's group value and its tags."""

from __future__ import annotations

import re

from apache_beam.io.filesystems import FileSystems

from core import names
from transforms.images import dicom

__all__ = [
    "check_group_by",
    "check_label_from",
    "dicom_keywords",
    "file_group",
    "path_pattern",
    "read_dicom_tags",
]


def check_label_from(label_from: str) -> None:
    """--label_from: parent, none, manifest or dicom:TAG (never a patient-identifying tag)."""
    if label_from in ("parent", "none", "manifest"):
        return
    kind, _, keyword = label_from.partition(":")
    if kind != "dicom" or not keyword:
        raise ValueError(
            f"--label_from must be auto, parent, none, manifest or dicom:TAG, got {label_from!r}"
        )
    _check_keyword("--label_from", keyword)
    if keyword in dicom.IDENTIFYING_KEYWORDS:
        raise ValueError(
            f"--label_from dicom:{keyword} would write a patient-identifying value into every "
            "record; use --group_by dicom:" + keyword + " (records hold only a salted hash)"
        )


def _check_keyword(option: str, keyword: str) -> None:
    if not dicom.valid_keyword(keyword):
        raise ValueError(
            f"{option} dicom:{keyword}: not a DICOM keyword; use the dictionary's name, e.g. "
            "PatientID, StudyInstanceUID, BodyPartExamined"
        )


def check_group_by(group_by: str, manifest: str | None, split_from: str) -> None:
    """--group_by: "", dicom:TAG, path:REGEX (one capture group at least) or manifest."""
    if not group_by:
        return
    if split_from != "hash":
        raise ValueError(
            f"--group_by with --split_from {split_from}: the splits come from the "
            f"{split_from}, so there is nothing to group; drop one of them"
        )
    kind, _, arg = group_by.partition(":")
    if kind == "manifest" and not arg:
        if not manifest:
            raise ValueError("--group_by manifest needs --manifest FILE with a group column")
        return
    if kind == "dicom" and arg:
        _check_keyword("--group_by", arg)
        return
    if kind == "path" and arg:
        try:
            groups = re.compile(arg).groups
        except re.error as e:
            raise ValueError(f"--group_by path:{arg}: not a regular expression ({e})") from e
        if groups < 1:
            raise ValueError(
                f"--group_by path:{arg} has no capture group; e.g. path:^([^/]+)/ groups by "
                "the first folder under the input root"
            )
        return
    raise ValueError(f"--group_by must be dicom:TAG, path:REGEX or manifest, got {group_by!r}")


def dicom_keywords(label_from: str, group_by: str) -> tuple[str, ...]:
    """The DICOM tags the listing reads for these options (none without a dicom: spec)."""
    return tuple(s.split(":", 1)[1] for s in (label_from, group_by) if s.startswith("dicom:"))


def path_pattern(group_by: str) -> re.Pattern | None:
    return re.compile(group_by.split(":", 1)[1]) if group_by.startswith("path:") else None


def file_group(
    group_by: str, pattern: re.Pattern | None, key: str, manifest_group: str, tags: dict
) -> str | None:
    """The value of a file's --group_by group, or None (the file is a group of its own)."""
    if pattern is not None:
        found = pattern.search(key)
        return found.group(1) if found and found.group(1) else None
    if group_by == "manifest":
        return manifest_group or None
    if group_by.startswith("dicom:"):
        return tags.get(group_by.split(":", 1)[1])
    return None


def read_dicom_tags(path: str, keywords: tuple[str, ...]) -> dict[str, str]:
    """The DICOM tags `keywords` of the file at `path` (header only), {} when it has none or
    cannot be read (inspection then reports what is wrong with it)."""
    try:
        with FileSystems.open(names.local_path(path), compression_type="uncompressed") as f:
            return dicom.read_tags(f, keywords)
    except (OSError, ValueError):
        return {}
