"""Bucket -> bucket conversions with DEFAULT options (analysis on) on GCS and S3, and the preflight.

tensorflow-transform writes its export through TensorFlow's file layer, which has no s3:// and
ignores the GCS emulator (it would call the real Google host). The converter therefore lets TFT
write to a local scratch folder and publishes `transform_fn/` and `transformed_metadata/` through
Beam's FileSystems. These tests run the real command line against the local servers of
tests/servers.py, download the published export and load it with `tft.TFTransformOutput`.
The no-analysis conversions stay in tests/e2e/test_cloud.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core import schema
from pipeline import launcher
from pipeline.demo import build_corpus
from tests.e2e.test_cloud import (
    RUN_TIMEOUT_S,
    _bucket_reader,
    _local_reader,
    _ok,
    _records,
    check_dataset,
)
from tests.runs import ROOT, in_process
from tests.servers import put_corpus

# test_cloud_e2e's corpus options without --no_analyze: analysis runs as it does by default.
ANALYZE_ARGS = [
    "--splits", "train=0.6,validation=0.4",
    "--target_shard_mb", "0.02",
    "--max_bad_fraction", "0.5",
]  # fmt: skip
NUM_IMAGES = 15
EXPORT_DIRS = ("transform_fn", "transformed_metadata")


def run_cli(*args: str, workers: int = 1) -> subprocess.CompletedProcess:
    """`python -m pipeline convert ARGS` (analysis on) in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "convert", *args, *ANALYZE_ARGS,
         "--workers", str(workers)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, int]:
    d = tmp_path_factory.mktemp("corpus")
    summary = build_corpus(str(d), num_images=NUM_IMAGES, seed=3, long_side=(48, 80))
    return d, summary["images"] + len(summary["broken"]) + 2  # + png-as-jpg + duplicate


@pytest.fixture(scope="module")
def local_reference(corpus, tmp_path_factory) -> tuple[Path, dict, dict]:
    """A local -> local conversion with analysis: (output dir, dataset_info, placement). In this
    process: it is what the bucket runs are compared with, not what is under test."""
    src, listed = corpus
    out = tmp_path_factory.mktemp("reference") / "ds"
    in_process(
        "convert", "--input", f"{src}/*/*.jpg", "--output", str(out), *ANALYZE_ARGS,
        "--workers", "1",
    )  # fmt: skip
    placement = check_dataset(*_local_reader(out), input_root=f"{src}/", expected_listed=listed)
    info = json.loads((out / schema.DATASET_INFO).read_text())
    return out, info, placement


def _export_files(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.split("/", 1)[0] in EXPORT_DIRS)


def _assert_statistics_equal(got: dict, want: dict) -> None:
    """Exact for counts and names; float sums may differ in the last bits between bundlings."""
    assert set(got) == set(want)
    for key, value in want.items():
        if key in ("pixel_mean", "pixel_std", "class_weights"):
            assert got[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert got[key] == value, key


def _check_transform_on_one_example(export: Path, info: dict, get) -> None:
    """The downloaded export loads with TFT and normalises one stored example as described."""
    import tensorflow as tf
    import tensorflow_transform as tft

    stats = info["statistics"]
    shard = info["splits"]["train"]["shards"][0]["file"]
    record = _records(get(shard))[0]
    feature = tf.train.Example.FromString(record).features.feature
    encoded = feature[schema.ENCODED].bytes_list.value[0]
    label = feature[schema.LABEL_TEXT].bytes_list.value[0].decode()
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)

    layer = tft.TFTransformOutput(str(export)).transform_features_layer()
    out = layer({"image": image[None], "label": tf.constant([label])})
    normalised = out["image"].to_tensor().numpy()[0]
    want = (image.numpy().astype(np.float64) - stats["pixel_mean"]) / stats["pixel_std"]
    np.testing.assert_allclose(normalised, want, rtol=1e-4, atol=1e-4)
    assert int(out["label"].numpy()[0]) == stats["transform"]["label_names"].index(label)


def test_bucket_to_bucket_with_default_options_publishes_a_loadable_transform(
    store, corpus, local_reference, tmp_path
):
    """Two DirectRunner workers, analysis on: the publish step runs in a worker process and must
    reach the store through Beam's FileSystems; TensorFlow never touches the bucket."""
    src, listed = corpus
    ref_out, ref_info, ref_placement = local_reference
    source, dest = store.new_bucket("src"), store.new_bucket("dst")
    put_corpus(store, source, src, "photos/")
    proc = _ok(
        run_cli(
            "--input", store.uri(source, "photos/*/*.jpg"),
            "--output", store.uri(dest, "ds"),
            *store.beam_args,
            workers=2,
        )
    )  # fmt: skip
    get, names = _bucket_reader(store, dest, "ds/")
    placement = check_dataset(get, names, store.uri(source, "photos/"), listed)
    assert placement == ref_placement
    assert not [n for n in names if "transform_tmp" in n or ".tmp-" in n], names
    # The same export files as TFT's own WriteTransformFn gives a local output.
    _, ref_names = _local_reader(ref_out)
    assert _export_files(names) == _export_files(ref_names)
    assert "transform_fn/saved_model.pb" in names

    info = json.loads(get(schema.DATASET_INFO))
    _assert_statistics_equal(info["statistics"], ref_info["statistics"])
    export = tmp_path / "downloaded"
    for name in _export_files(names):
        (export / name).parent.mkdir(parents=True, exist_ok=True)
        (export / name).write_bytes(get(name))
    _check_transform_on_one_example(export, info, get)
    assert "imgrec: converted" in proc.stdout
    if store.scheme == "s3":
        assert store.multipart_uploads(dest) == []


def test_local_output_keeps_tfts_layout(local_reference):
    """A local output holds exactly TFT's layout (folders included) and no scratch or probe."""
    import tensorflow_transform as tft

    out, info, _ = local_reference
    assert [p for p in out.rglob(".tmp-*")] == []  # no probe, no unrenamed copy
    tree = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_dir())
    assert "transform_fn/variables" in tree and "transform_fn/assets" in tree, tree
    assert "transform_tmp" not in tree
    output = tft.TFTransformOutput(str(out))
    assert sorted(output.transformed_feature_spec())[:2] == ["image", "label"]
    assert info["statistics"]["num_images"] == info["splits"]["train"]["num_examples"]


# ---------------------------------------------------------------------------------------------
# Preflight: a job that cannot finish fails before it starts
# ---------------------------------------------------------------------------------------------


def _convert_in_process(capsys, *args: str) -> tuple[int, str]:
    code = launcher.run_convert([*args, *ANALYZE_ARGS])
    err = capsys.readouterr().err
    print(err)  # shown with pytest -rP: the line a user sees
    return code, err


def test_missing_output_bucket_fails_before_the_job_starts(store, corpus):
    """The real command line: one line on stderr (the clients' own error logs muted), exit 2."""
    src, _ = corpus
    output = store.uri(f"no-such-bucket-{store.scheme}-imgrec", "ds")
    proc = run_cli("--input", f"{src}/*/*.jpg", "--output", output, *store.beam_args)
    err = proc.stderr
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    # Listing the missing bucket (is there an earlier dataset?) already fails, before the probe.
    assert lines[0].startswith(f"imgrec: --output {output}: cannot "), err
    assert "check that the bucket exists" in lines[0]
    assert len(lines[0]) < 1000
    if store.scheme == "s3":
        assert "--s3_endpoint_url" in lines[0]


def test_unwritable_local_output_fails_before_the_job_starts(corpus, tmp_path, capsys):
    src, _ = corpus
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    output = str(blocker / "ds")
    code, err = _convert_in_process(capsys, "--input", f"{src}/*/*.jpg", "--output", output)
    assert code == 2, err
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith(f"imgrec: --output {output}: cannot write there ("), err
    assert "choose another --output" in err
    assert blocker.read_text() == "not a folder"


def test_unwritable_tft_scratch_fails_before_the_job_starts(corpus, tmp_path, capsys):
    src, _ = corpus
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = tmp_path / "ds"
    code, err = _convert_in_process(
        capsys, "--input", f"{src}/*/*.jpg", "--output", str(out),
        "--temp_location", str(blocker / "tmp"),
    )  # fmt: skip
    assert code == 2, err
    assert err.startswith("imgrec: tensorflow-transform's scratch folder"), err
    assert "--no_analyze" in err
    assert not out.exists()  # the output probe cleaned up the folder it made


def test_write_probe_leaves_nothing_behind(store, beam_filesystems, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipeline.options import ConvertConfig

    bucket = store.new_bucket("probe")
    nested = tmp_path / "new" / "nested" / "ds"
    for output in (store.uri(bucket, "ds"), str(nested)):
        options = PipelineOptions(["--input", "x/*.jpg", "--output", output, *beam_filesystems])
        launcher.check_writable(ConvertConfig.from_options(options), options)
    assert store.keys(bucket) == []
    assert not (tmp_path / "new").exists()
