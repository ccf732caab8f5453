"""Folders whose names hold pattern characters: "photos [2024]", "out [v1] ?".

Beam's FileSystems.match reads `[2024]` as one character of 2, 0, 4, and Beam's local and GCS
deletes match their path the same way; imgrec builds its own patterns from folder names
(core/storage.py `glob_escape`, `match_under`, `delete`). Before that, an --output with
"[" failed its writability probe, and the listings of shards, inspection records and versions
under such a folder came back empty.
"""

from __future__ import annotations

import os

from core import schema, storage, versions
from pipeline.demo import build_corpus
from tests.integration import test_resume
from tests.integration.test_resume import convert, interrupt
from tests.runs import in_process

COMMON = ("--no_analyze", "--target_shard_mb", "0.02", "--workers", "1")


def snapshot(out: str) -> dict[str, str]:
    found = test_resume.snapshot(out)  # which globs the folder escaped
    assert len([n for n in found if n.endswith(".tfrecord")]) >= 2, sorted(found)
    return found


def test_glob_escape_makes_every_pattern_character_literal():
    assert storage.glob_escape("gs://b/runs [1]/a?b*c") == "gs://b/runs [[]1]/a[?]b[*]c"
    assert storage.glob_escape("/plain/path") == "/plain/path"


def test_conversion_resume_and_versions_in_folders_named_with_brackets(tmp_path):
    src = tmp_path / "photos [2024]"
    build_corpus(str(src), num_images=16, seed=3, long_side=(32, 48), broken=False)
    (tmp_path / "photos 2").mkdir()  # what "photos [2024]" matches as a pattern: nothing here

    # Unescaped, the pattern matches nothing; the message shows the escaped one.
    proc = in_process("convert", "--input", f"{src}/*/*.jpg", "--output", str(tmp_path / "x"),
                      check=False)  # fmt: skip
    assert proc.returncode == 2
    assert f"--input '{tmp_path}/photos [[]2024]/*/*.jpg'" in proc.stderr, proc.stderr

    pattern = f"{storage.glob_escape(str(src))}/*/*.jpg"
    out = str(tmp_path / "out [v1] ?")
    first = convert("--input", pattern, "--output", out, *COMMON)
    assert first["written"] > 0
    fresh = str(tmp_path / "fresh [v1] ?")
    convert("--input", pattern, "--output", fresh, *COMMON)
    want = snapshot(fresh)
    assert snapshot(out) == want
    assert in_process("verify", out).returncode == 0

    # A resume finds the inspection records under the bracketed folder and reads no file.
    interrupt(out)
    # Leftovers of a failed attempt and of another plan: the resumed run deletes them.
    leftovers = [os.path.join(out, "train", n)
                 for n in (".tmp-train-00000-of-00002.tfrecord-0a1b", "train-00000-of-00009.tfrecord")]  # fmt: skip
    for path in leftovers:
        with open(path, "wb") as f:
            f.write(b"stale")
    resumed = convert("--input", pattern, "--output", out, *COMMON, "--resume")
    assert resumed.get("inspected_ok", 0) == 0 and resumed["inspections_reused"] > 0
    assert snapshot(out) == want
    assert not [p for p in leftovers if os.path.exists(p)]

    # Versions under a bracketed root are listed, published and pruned.
    root = str(tmp_path / "root [a]")
    args = ["convert", "--input", pattern, "--output", root, "--versioned", *COMMON]
    in_process(*args, "--keep_versions", "1", "--keep_for", "0")
    v1 = versions.read_latest(root)
    in_process(*args, "--keep_versions", "1", "--keep_for", "0", "--full")
    v2 = versions.read_latest(root)
    assert v2 != v1 and versions.list_versions(root) == [v2]
    assert os.path.exists(os.path.join(root, v2, schema.DATASET_INFO))
    assert not os.path.exists(os.path.join(root, v1))
