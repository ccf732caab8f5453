"""The Flex Template's entry point as the template launcher runs it, offline.

The launcher runs templates/flex/main.py with `--name=value` parameters and a
`--template_location` where Beam writes the job instead of submitting it. Against the GCS
emulator of tests/e2e/test_dataflow_dry_run.py: the job is built with the versioned steps, the
version is claimed, nothing is published, and the launcher exits 0 (no job id to print).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.test_dataflow_dry_run import PROJECT, ROOT, RUN_TIMEOUT_S, env, gcs  # noqa: F401


@pytest.mark.parametrize("in_launcher_image", [True, False])
def test_template_launch_builds_the_versioned_job_and_publishes_nothing(
    gcs, env, tmp_path, in_launcher_image
):
    """In the template's image (FLEX_TEMPLATE_PYTHON_PY_FILE set) the launcher returns right
    after submitting; elsewhere it finds no job to wait for and returns too."""
    if in_launcher_image:
        env = {**env, "FLEX_TEMPLATE_PYTHON_PY_FILE": "main.py"}
    template = tmp_path / "job-spec.json"
    proc = subprocess.run(
        [
            sys.executable, str(ROOT / "templates" / "flex" / "main.py"),
            "--input=gs://imgrec-in/photos/*/*.jpg",
            "--output=gs://imgrec-out/flex",
            "--versioned=true", "--resume=false", "--keep_versions=2", "--no_analyze=true",
            f"--project={PROJECT}", "--region=us-central1",
            "--temp_location=gs://imgrec-tmp/tmp", "--staging_location=gs://imgrec-tmp/staging",
            f"--template_location={template}",
        ],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "imgrec: writing new version v" in proc.stdout
    options = json.loads(template.read_text())["environment"]["sdkPipelineOptions"]["options"]
    assert options["versioned"] is True and options["runner"] == "DataflowRunner"
    # Runner v2 stages the pipeline's graph next to the job: the versioned steps are in it.
    graphs = [k for k in gcs.keys("imgrec-tmp") if k.endswith("pipeline.pb")]
    assert graphs, gcs.keys("imgrec-tmp")
    graph = gcs.client.bucket("imgrec-tmp").blob(graphs[-1]).download_as_bytes()
    for step in (b"PublishVersion", b"IndexFiles", b"Describe"):
        assert step in graph, step
    keys = gcs.keys("imgrec-out")
    claimed = [k for k in keys if k.startswith("flex/v") and k.endswith("/version.json")]
    assert claimed, keys
    assert "flex/LATEST" not in keys, "a launch must not publish: the job does, at its end"
