"""Names nobody thinks of (not UTF-8, newlines, control characters, `-x`, HTML, NAME_MAX, a
symlink loop) as files, folders (labels) and manifest rows: every file listed once and written,
JSON lines valid, `image/filename` the name's bytes, the report and `inspect` escaping each name.
Plus a fuzz of the listing with random byte names (tests/odd_names.py builds the corpus)."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re
import time

import pytest

from core import names, schema
from pipeline.report.scan import parse_example, read_records
from tests import odd_names
from tests.runs import cli, fuzz_seed, in_process

# Anything a terminal or an HTML line must not get raw from a name (the report's own markup
# has newlines, which are left out of this check).
_RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]")
# Random names per fuzz run: a few hundred keep the run at ~4-10 s on 2 busy cores (measured).
_FUZZ_NAMES = 300
_FUZZ_CI_SEED = 20261202


def _info(out) -> dict:
    with open(os.path.join(out, schema.DATASET_INFO), encoding="utf-8") as f:
        return json.load(f)


def _jsonl(out, name: str) -> list[dict]:
    with open(os.path.join(out, name), "rb") as f:
        return [json.loads(line.decode("utf-8")) for line in f.read().splitlines() if line]


def _written(out, info: dict) -> dict[bytes, bytes]:
    """image/filename -> image/class/text of every record (TF-free parsing)."""
    found = {}
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for record in read_records(os.path.join(out, shard["file"])):
                fields = parse_example(record, {schema.FILENAME, schema.LABEL_TEXT})
                assert fields[schema.FILENAME] not in found, fields[schema.FILENAME]
                found[fields[schema.FILENAME]] = fields[schema.LABEL_TEXT]
    return found


def _as_bytes(path: str) -> bytes:
    """A path from rejected.jsonl/duplicates.jsonl back to the bytes of the file it names."""
    return os.fsencode(names.local_path(path))


def _check_all_written(out, paths: list[bytes]) -> dict:
    info = _info(out)
    assert (info["num_listed"], info["num_written"]) == (len(paths), len(paths)), info
    assert _jsonl(out, schema.REJECTED) == [] and _jsonl(out, schema.DUPLICATES) == []
    written = _written(out, info)
    assert sorted(written) == sorted(paths)
    for path, label in written.items():
        folder = os.path.basename(os.path.dirname(path))
        assert label == names.escape_text(os.fsdecode(folder)).encode("utf-8"), path
    want = sorted(names.escape_text(os.fsdecode(f)) for f in odd_names.FOLDERS)
    assert sorted(info["label_names"]) == want
    return info


def _check_report(out) -> None:
    with open(os.path.join(out, "report.html"), "rb") as f:
        html = f.read()
    html.decode("utf-8")
    assert not _RAW_CONTROL.search(html), _RAW_CONTROL.search(html)
    assert b"<script>&amp;" not in html and b"&lt;script&gt;&amp;amp;.jpg" in html
    assert b"ctl\\x1b[31m" in html  # the label, escaped
    assert b"caf%E9" in html


# --- the escaped form -------------------------------------------------------------------------


def test_escaped_form_round_trips_the_bytes_and_leaves_utf8_paths_alone():
    raw = b"/d/caf\xe9/x%y \xff\n.jpg"
    uri = names.from_local(os.fsdecode(raw))
    assert uri == "file:///d/caf%E9/x%25y %FF\n.jpg"
    uri.encode("utf-8")
    assert names.local_path(uri) == os.fsdecode(raw) and names.filename_bytes(uri) == raw
    for plain in ("/d/caf\u00e9/x%E9.jpg", "gs://b/a\nb.jpg", "s3://b/-x.jpg"):
        assert names.from_local(plain) is plain and names.local_path(plain) is plain
        assert names.filename_bytes(plain) == plain.encode("utf-8")
    assert names.printable(b"/d/a\n\x1b[2J\xe9") == "file:///d/a\\n\\x1b[2J%E9"
    assert names.printable("x\u2028\x9b\x7f\u00e9") == "x\\u2028\\x9b\\x7f\u00e9"
    assert names.escape_text(os.fsdecode(b"caf\xe9 100%")) == "caf%E9 100%25"
    assert names.escape_text("100%") == "100%"


def test_reject_rows_are_utf8_json_whatever_the_name():
    from core.rejects import make_reject

    row = make_reject(os.fsdecode(b"/d/\xe9.jpg"), "unreadable", os.fsdecode(b"link to \xe9"))
    assert json.loads(json.dumps(row, ensure_ascii=False).encode("utf-8")) == {
        "path": "file:///d/%E9.jpg",
        "reason": "unreadable",
        "detail": "link to \\udce9",
    }


# --- conversions ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[str, list[bytes]]:
    root = str(tmp_path_factory.mktemp("odd"))
    return root, odd_names.build_local(root)


@pytest.mark.parametrize("pattern", ["*/*", "**"])
def test_every_odd_name_is_written_with_default_options(corpus, tmp_path, pattern):
    """Default options (TFT statistics included), in process; `**` walks into every folder's
    `loop` -> `..` link once and no further, so each file is listed once."""
    root, paths = corpus
    out = str(tmp_path / "out")
    proc = in_process("convert", "--input", f"{root}/{pattern}", "--output", out)
    assert "written          84" in proc.stdout, proc.stdout
    _check_all_written(out, paths)
    _check_report(out)
    shown = in_process("inspect", out).stdout
    assert "ctl\\x1b[31m" in shown and "new\\nline" in shown and "\x1b" not in shown
    assert in_process("verify", out).returncode == 0


def test_manifests_carry_the_same_bytes(corpus, tmp_path):
    """A CSV manifest holding the names' raw bytes (absolute, quoted newlines) and a JSONL one
    holding the escaped `file://` form rejected.jsonl uses both list the same files (relative
    rows: the test below)."""
    _, paths = corpus
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(["path", "label"])
    for path in paths:
        folder = os.path.basename(os.path.dirname(path))
        writer.writerow([os.fsdecode(path), names.escape_text(os.fsdecode(folder))])
    manifest = str(tmp_path / "manifest.csv")
    with open(manifest, "wb") as f:
        f.write(text.getvalue().encode("utf-8", "surrogateescape"))
    jsonl = str(tmp_path / "manifest.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for p in paths:
            f.write(json.dumps({"path": names.from_local(os.fsdecode(p))}) + "\n")

    common = ("--no_analyze", "--workers", "1")
    out_csv, out_jsonl = str(tmp_path / "csv"), str(tmp_path / "jsonl")
    in_process("convert", "--manifest", manifest, "--label_from", "manifest", "--output", out_csv,
               *common)  # fmt: skip
    in_process("convert", "--manifest", jsonl, "--label_from", "parent", "--output", out_jsonl,
               *common)  # fmt: skip
    assert _check_all_written(out_csv, paths)["num_listed"] == len(paths)
    _check_all_written(out_jsonl, paths)


@pytest.mark.e2e  # the real command line in a fresh process, default options
def test_odd_names_through_the_command_line(corpus, tmp_path):
    root, paths = corpus
    out = str(tmp_path / "out")
    proc = cli("convert", "--input", f"{root}/*/*", "--output", out)
    assert not _RAW_CONTROL.search(proc.stdout.encode()), proc.stdout
    _check_all_written(out, paths)
    _check_report(out)
    # Two worker processes: the listed names cross process boundaries through Beam's coders.
    two = str(tmp_path / "two")
    cli("convert", "--input", f"{root}/**", "--output", two, "--workers", "2", "--no_analyze")
    _check_all_written(two, paths)


# --- the same names on both bucket servers ----------------------------------------------------


@pytest.mark.e2e  # conversions on the storage servers
def test_odd_names_on_buckets(store, tmp_path):
    """Object names are UTF-8: every corpus name the bucket can hold (newlines, ESC, `-x`, HTML,
    a 255-byte name), bucket -> bucket, default options; the written names are the objects'
    URIs, the report escapes them."""
    keys = odd_names.object_names(store.scheme)
    src, dst = store.new_bucket("src"), store.new_bucket("dst")
    for i, key in enumerate(keys):
        store.put(store.uri(src, "p/" + key.decode("utf-8")), odd_names.jpeg(i))
    out = store.uri(dst, "ds")
    in_process("convert", "--input", store.uri(src, "p/*/*"), "--output", out, *store.beam_args)
    info = json.loads(store.get(store.uri(dst, "ds/" + schema.DATASET_INFO)))
    assert (info["num_listed"], info["num_written"]) == (len(keys), len(keys)), info
    local = tmp_path / "copy"
    for key in store.keys(dst, "ds/"):
        target = local / key[len("ds/") :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.get(store.uri(dst, key)))
    written = _written(str(local), info)
    assert sorted(written) == sorted(store.uri(src, "p/").encode() + k for k in keys)
    html = (local / "report.html").read_bytes()
    assert not _RAW_CONTROL.search(html), _RAW_CONTROL.search(html)


# --- fuzz: random byte names ------------------------------------------------------------------


def _random_name(rng: random.Random) -> bytes:
    alphabet = [b for b in range(1, 256) if b != ord("/")]
    kind = rng.random()
    if kind < 0.3:  # short, mostly control characters and bytes >= 0x80
        n = rng.randint(1, 8)
    elif kind < 0.9:
        n = rng.randint(1, 64)
    else:  # near NAME_MAX
        n = rng.randint(240, 255)
    name = bytes(rng.choice(alphabet) for _ in range(n))
    return name if name not in (b".", b"..") else name + b"_"


def test_fuzz_random_byte_names_are_all_accounted_for(tmp_path):
    """A few hundred random names (any byte but `/` and NUL) in two folders, a third of them
    small images, the rest random bytes or copies: the job finishes, and every name comes out
    exactly once, as a record, a reject or a duplicate."""
    seed = fuzz_seed(_FUZZ_CI_SEED)
    rng = random.Random(seed)
    root = tmp_path / "fuzz"
    made: set[bytes] = set()
    start = time.monotonic()
    while len(made) < _FUZZ_NAMES:
        folder = os.fsencode(root) + b"/" + rng.choice([b"a", b"b\xe9\n"])
        path = folder + b"/" + _random_name(rng)
        if path in made:
            continue
        os.makedirs(folder, exist_ok=True)
        kind = rng.random()
        data = (
            odd_names.jpeg(rng.randrange(1 << 30), side=24)
            if kind < 0.35
            else b"\xff\xd8\xff" + rng.randbytes(rng.randint(0, 64))
            if kind < 0.9
            else odd_names.jpeg(7, side=24)  # duplicates of each other
        )
        with open(path, "wb") as f:
            f.write(data)
        made.add(path)
    out = str(tmp_path / "out")
    proc = in_process("convert", "--input", f"{root}/*/*", "--output", out, "--no_analyze",
                      "--max_bad_fraction", "1", "--workers", "1", check=False)  # fmt: skip
    why = f"seed {seed} (IMGREC_FUZZ_SEED={seed} replays it), {time.monotonic() - start:.0f} s"
    assert proc.returncode == 0, (why, proc.stdout[-2000:], proc.stderr[-2000:])
    info = _info(out)
    assert info["num_listed"] == len(made), why
    outcomes = list(_written(out, info))
    outcomes += [_as_bytes(r["path"]) for r in _jsonl(out, schema.REJECTED)]
    outcomes += [_as_bytes(r["path"]) for r in _jsonl(out, schema.DUPLICATES)]
    assert sorted(outcomes) == sorted(made), why
    assert info["num_written"] > 0 and info["num_rejected"] > 0 and info["num_duplicates"] > 0


def test_pattern_manifest_rejects_and_duplicates_under_a_folder_not_utf8(tmp_path):
    """The --input pattern itself names a Latin-1 folder; a broken file, a dangling link and a
    copy in it end in rejected.jsonl / duplicates.jsonl in the escaped form, and a manifest in
    that folder with a relative row holding `%` lists the same file. An --output that is not
    UTF-8 is refused by name (exit 2), not by a traceback."""
    base = os.fsencode(tmp_path) + b"/caf\xe9 100%"
    for label in (b"cat", b"d\xe9g"):
        os.makedirs(base + b"/" + label)
        for i in range(4):
            with open(base + b"/" + label + b"/%d\xe9.jpg" % i, "wb") as f:
                f.write(odd_names.jpeg(i + (10 if label == b"cat" else 20)))
    with open(base + b"/cat/broken\xe9.jpg", "wb") as f:
        f.write(b"\xff\xd8\xff not a JPEG")
    with open(base + b"/cat/copy\xe9.jpg", "wb") as f:
        f.write(odd_names.jpeg(20))
    os.symlink(b"nowhere\xe9", base + b"/cat/dangling\xe9.jpg")
    escaped = f"file://{names.escape_text(os.fsdecode(base))}"
    assert escaped.endswith("/caf%E9 100%25")

    out = str(tmp_path / "out")
    pattern = os.fsdecode(base + b"/*/*.jpg")
    in_process("convert", "--input", pattern, "--output", out, "--no_analyze",
               "--max_bad_fraction", "0.5")  # fmt: skip
    info = _info(out)
    assert (info["num_listed"], info["num_written"]) == (11, 8), info
    assert sorted(info["label_names"]) == ["cat", "d%E9g"]
    assert info["provenance"]["argv"][1] == escaped + "/*/*.jpg"
    assert {r["path"]: r["reason"] for r in _jsonl(out, schema.REJECTED)} == {
        escaped + "/cat/broken%E9.jpg": "truncated",
        escaped + "/cat/dangling%E9.jpg": "broken_link",
    }
    (dup,) = _jsonl(out, schema.DUPLICATES)
    assert {dup["path"], dup["duplicate_of"]} == {
        escaped + "/cat/copy%E9.jpg",
        escaped + "/d%E9g/0%E9.jpg",
    }
    assert base + b"/cat/0\xe9.jpg" in _written(out, info)

    manifest = base + b"/list\xe9.csv"
    with open(manifest, "wb") as f:
        f.write(b"path,label\ncat/1\xe9.jpg,one\n")
    with open(base + b"/cat/100%.jpg", "wb") as f:
        f.write(odd_names.jpeg(99))
    with open(manifest, "ab") as f:
        f.write(b"cat/100%.jpg,two\n")
    out2 = str(tmp_path / "manifest")
    in_process("convert", "--manifest", os.fsdecode(manifest), "--output", out2, "--no_analyze")
    assert sorted(_written(out2, _info(out2))) == [
        base + b"/cat/100%.jpg",
        base + b"/cat/1\xe9.jpg",
    ]

    refused = in_process("convert", "--input", pattern, "--output", os.fsdecode(base + b"/o\xe9"),
                         check=False)  # fmt: skip
    assert refused.returncode == 2
    assert "/o%E9: not valid UTF-8; only --input and --manifest" in refused.stderr, refused.stderr

    with open(os.path.join(out, "report.html"), "rb") as f:
        html = f.read()
    assert not _RAW_CONTROL.search(html)
    assert (escaped + "/cat/broken%E9.jpg").encode() in html  # the rejected file, escaped

    # A versioned rerun lists the same names without Beam (pipeline/versions/fast_rerun.py): no change.
    args = ("convert", "--input", pattern, "--output", str(tmp_path / "versions"), "--versioned",
            "--no_analyze", "--max_bad_fraction", "0.5")  # fmt: skip
    assert "(first version)" in in_process(*args).stdout
    assert "changes: no change" in in_process(*args).stdout
