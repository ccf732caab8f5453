"""A generated hostile corpus (200+ files of mixed faults) through the CLI: no crash, every file
accounted for with the expected outcome, and `imgrec verify` passes on the result."""

from __future__ import annotations

import json
import os

import pytest

from core import schema
from tests.hostile import make_hostile_corpus
from tests.runs import cli as run_cli
from tests.runs import in_process, read_records


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    src = str(tmp_path_factory.mktemp("hostile"))
    expected = make_hostile_corpus(src, n=220, seed=7)
    out = str(tmp_path_factory.mktemp("hostile_out") / "ds")
    proc = run_cli(
        "convert",
        "--input",
        f"{src}/**",
        "--output",
        out,
        "--no_analyze",
        "--max_bad_fraction",
        "1.0",
        "--splits",
        "train=0.8,validation=0.2",
    )
    return src, expected, out, proc


def test_every_hostile_file_is_accounted_for_as_expected(hostile):
    import tensorflow as tf

    src, expected, out, _ = hostile
    assert len(expected) >= 200
    info = json.load(open(os.path.join(out, schema.DATASET_INFO)))
    assert info["num_listed"] == len(expected)
    assert info["num_listed"] == info["num_written"] + info["num_rejected"] + info["num_duplicates"]

    rejected = {
        json.loads(line)["path"]: json.loads(line)
        for line in open(os.path.join(out, schema.REJECTED))
    }
    duplicates = {json.loads(line)["path"] for line in open(os.path.join(out, schema.DUPLICATES))}
    written = {}
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for rec in read_records(os.path.join(out, shard["file"])):
                ex = tf.io.parse_single_example(rec, schema.feature_spec())
                written[ex[schema.FILENAME].numpy().decode()] = {
                    "format": ex[schema.FORMAT].numpy().decode(),
                    "transcode": ex[schema.TRANSCODE_REASON].numpy().decode(),
                    "from": ex[schema.TRANSCODED_FROM].numpy().decode(),
                }
    mismatches = []
    for path, exp in expected.items():
        path = os.path.abspath(path)
        if exp.outcome == "written":
            if path in duplicates:
                continue  # Same bytes as another healthy file: kept once.
            got = written.get(path)
            if got is None:
                mismatches.append(f"{exp.case}: expected written, got {rejected.get(path)}")
            elif got["format"] != exp.format or got["transcode"] != exp.transcode:
                mismatches.append(f"{exp.case}: expected {exp.format}/{exp.transcode!r}, got {got}")
        else:
            got = rejected.get(path)
            if got is None or got["reason"] != exp.outcome:
                mismatches.append(
                    f"{exp.case}: expected reject {exp.outcome}, got "
                    f"{got or ('written' if path in written else 'nothing')}"
                )
            elif not got["detail"]:
                mismatches.append(f"{exp.case}: reject without detail")
    assert not mismatches, "\n".join(mismatches)
    assert set(written) | set(rejected) | duplicates == {os.path.abspath(p) for p in expected}


def test_verify_passes_on_the_hostile_result(hostile):
    _, _, out, _ = hostile
    proc = in_process("verify", out)  # (the command line's verify: tests/e2e/test_cli.py)
    assert "OK" in proc.stdout
