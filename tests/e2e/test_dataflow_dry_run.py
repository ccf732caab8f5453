"""./run_dataflow.sh --dry_run: the Dataflow job is built offline against a GCS emulator, never sent.

The launcher's preflight lists `--input` and checks `--output` through Beam's GCS filesystem, so a
gcp-storage-emulator on 127.0.0.1 (STORAGE_EMULATOR_HOST) serves the buckets. DataflowRunner's dry
run then makes no network call. The statistics phase is built too: in a dry run the builder gives
tensorflow-transform a local scratch folder instead of one under `--temp_location`.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.runs import ROOT

HOST = "127.0.0.1"
PROJECT = "imgrec-dry-run"
# The emulator starts in 1-3 s; 60 s leaves room for a loaded 2-core machine.
EMULATOR_START_TIMEOUT_S = 60
# A dry run takes ~3 s (TensorFlow import, sdist build). Five minutes means it waits on a network.
RUN_TIMEOUT_S = 300
IMAGES = {f"photos/{label}/{i}.jpg": (label, i) for label in ("cat", "dog") for i in range(3)}
# An `authorized_user` credential whose token google-auth takes as valid until 2099: Beam's GCS
# client then never asks Google for one (the emulator ignores the Authorization header).
_FAKE_ADC = {
    "type": "authorized_user",
    "client_id": "imgrec-test",
    "client_secret": "imgrec-test",
    "refresh_token": "imgrec-test",
    "token": "imgrec-test-token",
    "expiry": "2099-01-01T00:00:00Z",
    "quota_project_id": PROJECT,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _jpeg(shade: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 12), (shade, 128, 255 - shade)).save(buf, "JPEG")
    return buf.getvalue()


class _Gcs:
    """A gcp-storage-emulator process on 127.0.0.1 and a client talking to it."""

    def __init__(self, url: str):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        self.url = url
        self.client = storage.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": url},
        )

    def keys(self, bucket: str) -> list[str]:
        return sorted(b.name for b in self.client.list_blobs(bucket))


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    port = _free_port()
    url = f"http://{HOST}:{port}"
    log = (tmp_path_factory.mktemp("gcs") / "emulator.log").open("w")
    exe = Path(sys.executable).with_name("gcp-storage-emulator")
    proc = subprocess.Popen(
        [str(exe), "start", "--host", HOST, "--port", str(port), "--in-memory", "--quiet"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + EMULATOR_START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b?project={PROJECT}", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"gcp-storage-emulator did not start on {url}; see {log.name}")
                time.sleep(0.2)
        server = _Gcs(url)
        images = server.client.create_bucket("imgrec-in")
        for bucket in ("imgrec-out", "imgrec-tmp"):
            server.client.create_bucket(bucket)
        for name, (_, i) in IMAGES.items():
            images.blob(name).upload_from_string(_jpeg(40 * i), content_type="image/jpeg")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture()
def env(gcs, tmp_path) -> dict:
    """Environment of a run_dataflow.sh that can only reach the emulator."""
    adc = tmp_path / "fake_adc.json"
    adc.write_text(json.dumps(_FAKE_ADC))
    scratch = tmp_path / "scratch"  # Beam's stager leaves its sdist folder in TMPDIR.
    scratch.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "CLOUDSDK_", "STORAGE_EMULATOR"))
    }
    env.update(
        {
            "STORAGE_EMULATOR_HOST": gcs.url,
            "GOOGLE_APPLICATION_CREDENTIALS": str(adc),
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "NO_PROXY": HOST,
            "no_proxy": HOST,
            "IMGREC_SKIP_BOOTSTRAP": "1",  # This interpreter's environment, as is.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "PYTHONPATH": str(ROOT),
            "TMPDIR": str(scratch),
            "TF_CPP_MIN_LOG_LEVEL": "3",
        }
    )
    return env


def _run_dataflow(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "run_dataflow.sh"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )


REQUIRED = [
    "--project",
    PROJECT,
    "--region",
    "us-central1",
    "--temp_location",
    "gs://imgrec-tmp/tmp",
]


def test_dry_run_builds_the_job_offline_and_submits_nothing(gcs, env, tmp_path):
    job_file = tmp_path / "job.json"
    proc = _run_dataflow(
        [
            *REQUIRED,
            "--input",
            "gs://imgrec-in/photos/*/*.jpg",
            "--output",
            "gs://imgrec-out/ds",
            "--max_num_workers",
            "3",
            "--machine_type",
            "n2-standard-8",
            "--job_name",
            "imgrec-dry-run-test",
            "--dry_run",
            "--dataflow_job_file",
            str(job_file),
        ],
        env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("imgrec: dry run: built Dataflow job imgrec-dry-run-test ("), (
        proc.stdout
    )
    assert "workers <= 3 x n2-standard-8" in proc.stdout
    assert "steps List -> " in proc.stdout

    job = json.loads(job_file.read_text())
    assert job["job"]["name"] == "imgrec-dry-run-test"
    assert job["job"]["type"] == "JOB_TYPE_BATCH"
    assert (job["project"], job["region"]) == (PROJECT, "us-central1")
    assert job["temp_location"].startswith("gs://imgrec-tmp/tmp/imgrec-dry-run-test.")
    assert job["workers"]["max_num_workers"] == 3
    assert job["workers"]["machine_type"] == "n2-standard-8"
    assert job["setup_file"] == "./setup.py"
    assert "use_runner_v2" in job["experiments"]
    assert job["container_images"] == ["gcr.io/cloud-dataflow/v1beta3/beam_python3.11_sdk:2.77.0"]
    # The builder's stages, top level, in the order they were applied.
    steps = [
        s
        for s in job["transforms"]
        if s in ("List", "Inspect", "Dedupe", "Plan", "Write", "Describe")
    ]
    assert steps == ["List", "Inspect", "Dedupe", "Plan", "Write", "Describe"]
    assert "Analyze" in job["transforms"]  # TFT builds offline: its scratch stays local.
    assert {
        "Inspect/ReadHashDecode/ParDo(_InspectFn)",
        "Write/WriteShard/ParDo(_WriteShardFn)",
    } <= set(job["all_transforms"])

    # Beam's stager built setup.py's sdist for the workers: our code and pins are in it.
    (staged,) = [a for a in job["artifacts"] if a["staged_name"] == "workflow.tar.gz"]
    with tarfile.open(staged["local_path"]) as tar:
        names = {n.split("/", 1)[-1] for n in tar.getnames()}
    assert {
        "setup.py",
        "requirements.txt",
        "pipeline/launcher.py",
        "pipeline/builder.py",
        "transforms/write_shards.py",
        "configs/example.yaml",
    } <= names

    # Nothing staged, nothing written: the dry run only read the listing.
    assert gcs.keys("imgrec-tmp") == []
    assert gcs.keys("imgrec-out") == []
    assert gcs.keys("imgrec-in") == sorted(IMAGES)


def test_dry_run_preflight_lists_the_bucket(env):
    proc = _run_dataflow(
        [
            *REQUIRED,
            "--input",
            "gs://imgrec-in/nothing/*.jpg",
            "--output",
            "gs://imgrec-out/ds2",
            "--no_analyze",
            "--dry_run",
        ],
        env,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "imgrec: --input gs://imgrec-in/nothing/*.jpg: matched no files; check the path, and "
        "quote glob patterns (--input 'data/*/*.jpg'); use '**' to match across folders"
    )
    assert proc.stdout == ""


def test_dry_run_checks_dataflow_options_like_a_submission(env):
    proc = _run_dataflow(
        [
            "--project",
            "123456789",
            "--region",
            "us-central1",
            "--temp_location",
            "gs://imgrec-tmp/tmp",
            "--input",
            "gs://imgrec-in/photos/*/*.jpg",
            "--output",
            "gs://imgrec-out/ds3",
            "--no_analyze",
            "--dry_run",
        ],
        env,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "imgrec: conversion failed: ValueError: invalid Dataflow options: "
        "Invalid Project ID (123456789)"
    ), last


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "--project PROJECT_ID is required (the Google Cloud project that runs the job)"),
        (
            ["--project", PROJECT],
            "--region REGION is required (the Dataflow region, e.g. us-central1)",
        ),
        (
            ["--project", PROJECT, "--region", "us-central1"],
            "--temp_location gs://BUCKET/tmp is required (Dataflow's scratch space)",
        ),
        (
            ["--project", PROJECT, "--region", "us-central1", "--temp_location", "/tmp/x"],
            "--temp_location /tmp/x: must be a gs://BUCKET/PATH",
        ),
        (
            [*REQUIRED, "--staging_location", "staging"],
            "--staging_location staging: must be a gs://BUCKET/PATH",
        ),
        (
            [*REQUIRED, "--input", "data/*/*.jpg"],
            "--input data/*/*.jpg: Dataflow workers cannot reach local files; use a gs:// (or s3://) path",
        ),
        (
            [*REQUIRED, "--output=out/ds"],
            "--output out/ds: Dataflow workers cannot reach local files; use a gs:// (or s3://) path",
        ),
        (
            [*REQUIRED, "--runner", "DirectRunner"],
            "--runner is set by this script (DataflowRunner); for other runners use ./run_local.sh --runner ...",
        ),
        ([*REQUIRED, "--max_num_workers", "0"], "--max_num_workers 0: expected a positive integer"),
        ([*REQUIRED, "--region"], "--region needs a value"),
    ],
)
def test_bad_flags_stop_with_one_line(args, message, tmp_path):
    env = {**os.environ, "IMGREC_SKIP_BOOTSTRAP": "1"}
    proc = subprocess.run(
        [str(ROOT / "run_dataflow.sh"), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stderr == f"run_dataflow.sh: {message}\n"
    assert proc.stdout == ""


def test_help_names_the_required_flags():
    proc = subprocess.run(
        [str(ROOT / "run_dataflow.sh"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith(
        "usage: ./run_dataflow.sh --project PROJECT --region REGION --temp_location gs://BUCKET/tmp"
    )
