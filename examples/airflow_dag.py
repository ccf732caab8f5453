"""Airflow DAGs that regenerate a versioned imgrec dataset every night (docs/scheduling.md).

Two ways, pick one and delete the other:
  * `imgrec_flowers_flex`: launch the Dataflow Flex Template built from templates/flex/
    (no imgrec install on the Airflow workers; the image carries it).
  * `imgrec_flowers_beam`: run `imgrec convert` from the Airflow worker with Beam's operator
    (a clone of imgrec set up there, in IMGREC_HOME: `./run_local.sh help` once makes its
    .venv; the job itself still runs on Dataflow).

Both write a new version under OUTPUT_ROOT and move OUTPUT_ROOT/LATEST only when it is
complete; `max_active_runs=1` keeps two runs from writing the same root at once, and
`retries` reruns a failed attempt with --resume, which continues the unfinished version.

Requires apache-airflow-providers-google and -apache-beam on the Airflow side (not imgrec's).
"""

from __future__ import annotations

import datetime

from airflow import DAG
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.google.cloud.operators.dataflow import (
    DataflowConfiguration,
    DataflowStartFlexTemplateOperator,
)

PROJECT = "my-project"
REGION = "us-central1"
INPUT = "gs://my-bucket/photos/**"
OUTPUT_ROOT = "gs://my-bucket/datasets/flowers"
TEMPLATE = "gs://my-bucket/templates/imgrec-convert.json"
IMAGE = f"{REGION}-docker.pkg.dev/{PROJECT}/imgrec/imgrec-convert:0.1.0"
# The clone the Beam operator runs, and its virtualenv's interpreter: the operator's default,
# `python3` from PATH, has no Beam, and the task would fail at `import apache_beam`.
IMGREC_HOME = "/opt/imgrec"
IMGREC_PYTHON = f"{IMGREC_HOME}/.venv/bin/python"
# Seven nightly versions: a training job that resolved LATEST up to a week ago still finds
# its version (pruning never touches the one LATEST names).
KEEP_VERSIONS = 7

DEFAULT_ARGS = {
    "retries": 2,
    "retry_delay": datetime.timedelta(minutes=10),
}

with DAG(
    dag_id="imgrec_flowers_flex",
    schedule="0 3 * * *",
    start_date=datetime.datetime(2026, 12, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
) as flex_dag:
    DataflowStartFlexTemplateOperator(
        task_id="convert",
        project_id=PROJECT,
        location=REGION,
        wait_until_finished=True,
        body={
            "launchParameter": {
                "jobName": "imgrec-flowers-{{ ds_nodash }}",
                "containerSpecGcsPath": TEMPLATE,
                "parameters": {
                    "input": INPUT,
                    "output": OUTPUT_ROOT,
                    "versioned": "true",
                    "resume": "true",
                    "keep_versions": str(KEEP_VERSIONS),
                },
                "environment": {
                    "sdkContainerImage": IMAGE,
                    "tempLocation": "gs://my-bucket/tmp",
                },
            }
        },
    )

with DAG(
    dag_id="imgrec_flowers_beam",
    schedule="0 3 * * *",
    start_date=datetime.datetime(2026, 12, 1),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
) as beam_dag:
    BeamRunPythonPipelineOperator(
        task_id="convert",
        runner="DataflowRunner",
        # The operator runs `PY_INTERPRETER PY_OPTIONS PY_FILE --option=value ...`: here
        # `.venv/bin/python -m pipeline --runner=DataflowRunner ...`, which is `imgrec convert ...`.
        py_interpreter=IMGREC_PYTHON,
        py_options=["-m"],
        py_file="pipeline",
        pipeline_options={
            "input": INPUT,
            "output": OUTPUT_ROOT,
            "versioned": True,
            "resume": True,
            "keep_versions": KEEP_VERSIONS,
            "temp_location": "gs://my-bucket/tmp",
            "setup_file": f"{IMGREC_HOME}/setup.py",
        },
        dataflow_config=DataflowConfiguration(
            job_name="imgrec-flowers", project_id=PROJECT, location=REGION
        ),
    )
