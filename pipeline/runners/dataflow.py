"""Dataflow helpers: a runner that builds the Dataflow job, reports it, and never submits it.

`./run_dataflow.sh --dry_run ...` runs `python -m pipeline convert` with
`--runner pipeline.runners.dataflow.DryRunDataflowRunner --dry_run=true`. That is Beam's own
DataflowRunner dry run (TestOptions.dry_run): the pipeline is translated exactly as for a real
submission (Runner v2 proto, worker environment, the `--setup_file` sdist built by Beam's
stager), then returned before any Dataflow API call or upload. Beam prints nothing about the job
it built; this runner prints a summary and, given Beam's `--dataflow_job_file PATH` (local),
writes the description as JSON there.
"""

from __future__ import annotations

import json
import os

from apache_beam.options.pipeline_options import (
    DebugOptions,
    GoogleCloudOptions,
    PipelineOptions,
    SetupOptions,
    TestOptions,
    WorkerOptions,
)
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

__all__ = ["DryRunDataflowRunner", "describe_job", "format_job"]

# Beam only runs its Dataflow option checks (gs:// temp_location, project and job name format)
# when the runner's class is *named* DataflowRunner; this runner repeats them against one.
_VALIDATE_AS = DataflowRunner


def _artifacts(proto_pipeline: beam_runner_api_pb2.Pipeline) -> list[dict]:
    """Files the workers would receive: staged name and the local file Beam built or found."""
    found = {}
    for env in proto_pipeline.components.environments.values():
        for dep in env.dependencies:
            entry = {"staged_name": None, "local_path": None}
            if dep.role_urn == common_urns.artifact_roles.STAGING_TO.urn:
                role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload)
                entry["staged_name"] = role.staged_name
            if dep.type_urn == common_urns.artifact_types.FILE.urn:
                payload = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload)
                entry["local_path"] = payload.path
            found[entry["staged_name"] or entry["local_path"]] = entry
    return sorted(found.values(), key=lambda e: str(e["staged_name"]))


def _container_images(proto_pipeline: beam_runner_api_pb2.Pipeline) -> list[str]:
    images = set()
    for env in proto_pipeline.components.environments.values():
        if env.urn == common_urns.environments.DOCKER.urn:
            images.add(beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image)
    return sorted(images)


def describe_job(
    job, proto_pipeline: beam_runner_api_pb2.Pipeline, options: PipelineOptions
) -> dict:
    """What a Dataflow job built by DataflowRunner would run, as a JSON-ready dict.

    Args:
        job: the `apiclient.Job` DataflowRunner built (its `proto` and options).
        proto_pipeline: the runner's translated Runner API pipeline.
        options: the pipeline options after the runner filled in its defaults.

    Returns:
        {"job": Dataflow's job message, "project", "region", "job_name", "temp_location",
        "staging_location", "workers": {...}, "experiments", "setup_file",
        "container_images", "artifacts": [{"staged_name", "local_path"}],
        "transforms": top-level transform names in pipeline order,
        "all_transforms": every transform's full name}.
    """
    gcp = options.view_as(GoogleCloudOptions)
    worker = options.view_as(WorkerOptions)
    transforms = proto_pipeline.components.transforms
    top_level, skip = [], set()
    for root_id in proto_pipeline.root_transform_ids:
        root = transforms[root_id]
        # Beam wraps the whole pipeline in one synthetic composite whose parts' names do not
        # start with its own; those parts are the steps the builder applied.
        parts = [transforms[t].unique_name for t in root.subtransforms]
        wrapper = bool(parts) and not all(n.startswith(root.unique_name + "/") for n in parts)
        top_level += parts if wrapper else [root.unique_name]
        if wrapper:
            skip.add(root.unique_name)
    return {
        "job": json.loads(job.json()),
        "project": gcp.project,
        "region": gcp.region,
        "job_name": gcp.job_name,
        "temp_location": gcp.temp_location,
        "staging_location": gcp.staging_location,
        "service_account_email": gcp.service_account_email,
        "workers": {
            "num_workers": worker.num_workers,
            "max_num_workers": worker.max_num_workers,
            "machine_type": worker.machine_type,
            "sdk_container_image": worker.sdk_container_image,
        },
        "experiments": sorted(options.view_as(DebugOptions).experiments or []),
        "setup_file": options.view_as(SetupOptions).setup_file,
        "container_images": _container_images(proto_pipeline),
        "artifacts": _artifacts(proto_pipeline),
        "transforms": top_level,
        "all_transforms": sorted(
            t.unique_name
            for t in transforms.values()
            if t.unique_name and t.unique_name not in skip
        ),
    }


def format_job(description: dict) -> str:
    """The few lines `--dry_run` prints about the job it built."""
    w = description["workers"]
    staged = ", ".join(a["staged_name"] or a["local_path"] for a in description["artifacts"])
    return "\n".join(
        [
            f"imgrec: dry run: built Dataflow job {description['job_name']} "
            f"({len(description['all_transforms'])} transforms); not submitted",
            f"  project {description['project']}, region {description['region']}, "
            f"workers <= {w['max_num_workers'] or 'Dataflow default'} x "
            f"{w['machine_type'] or 'Dataflow default machine type'}",
            f"  temp {description['temp_location']}, staging {description['staging_location']}",
            f"  container {', '.join(description['container_images']) or '-'}",
            f"  staged files {staged or '-'}",
            f"  steps {' -> '.join(description['transforms'])}",
        ]
    )


class DryRunDataflowRunner(DataflowRunner):
    """Beam's DataflowRunner in dry-run mode, printing the job it built instead of submitting it."""

    def run_pipeline(self, pipeline, options, pipeline_proto=None):
        # Whatever --dry_run said: never submit. Set first: Beam's checks skip network calls
        # (the bucket soft-delete lookup) in a dry run.
        options.view_as(TestOptions).dry_run = True
        gcp = options.view_as(GoogleCloudOptions)
        if not gcp.temp_location:
            raise ValueError("--temp_location gs://BUCKET/tmp is required on Dataflow")
        for name in ("temp_location", "staging_location"):
            value = getattr(gcp, name)
            # Beam would try to create a default bucket (a network call) for a non-gs:// pair.
            if value and not value.startswith("gs://"):
                raise ValueError(f"--{name} {value}: Dataflow needs a gs://BUCKET/PATH location")
        errors = PipelineOptionsValidator(options, _VALIDATE_AS()).validate()
        if errors:
            raise ValueError("invalid Dataflow options: " + "; ".join(errors))
        result = super().run_pipeline(pipeline, options, pipeline_proto)
        description = describe_job(self.job, self.proto_pipeline, options)
        job_file = options.view_as(DebugOptions).dataflow_job_file
        if job_file:
            parent = os.path.dirname(os.path.abspath(job_file))
            os.makedirs(parent, exist_ok=True)
            with open(job_file, "w", encoding="utf-8") as f:
                json.dump(description, f, indent=2, sort_keys=True)
        print(format_job(description), flush=True)
        return result
