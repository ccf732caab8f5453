#!/usr/bin/env bash
# Convert images to TFRecords on Google Cloud Dataflow: the same job and options as run_local.sh.
#   ./run_dataflow.sh --project P --region us-central1 --temp_location gs://B/tmp \
#       --input 'gs://B/images/*/*.jpg' --output gs://B/tfrecords/v1
#   ./run_dataflow.sh ... --dry_run       # build the job (and the setup.py sdist), print it, submit nothing
# Setup as run_local.sh (scripts/bootstrap.sh); IMGREC_SKIP_BOOTSTRAP=1 uses the current python as is.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
  cat <<'EOF'
usage: ./run_dataflow.sh --project PROJECT --region REGION --temp_location gs://BUCKET/tmp
                         (--input PATTERN ... | --manifest gs://FILE) --output gs://DIR
                         [--staging_location gs://BUCKET/staging] [--max_num_workers N]
                         [--machine_type TYPE] [--sdk_container_image IMAGE] [--job_name NAME]
                         [--dry_run] [convert options] [Beam options]

Runs `imgrec convert` on DataflowRunner with --setup_file ./setup.py. Inputs, manifest and output
must be gs:// (or s3://) paths the workers can reach. --dry_run builds the Dataflow job and prints
it without submitting (with --dataflow_job_file FILE, also as JSON). Convert options:
./run_local.sh --help. Dataflow setup (IAM, buckets, containers, cost): docs/dataflow.md.
EOF
}

die() { echo "run_dataflow.sh: $*" >&2; exit 2; }

# Defaults, each overridable by its flag.
# A cap, so that a wrong glob cannot autoscale to Dataflow's default of 1000 workers; raise it for
# corpora whose conversion should finish faster (throughput grows ~linearly with workers).
max_num_workers=16
# 4 vCPUs / 16 GB: Dataflow runs one SDK process per vCPU, each holding TensorFlow, TFT and Beam
# (~0.8 GB peak RSS) and up to --read_concurrency images in flight; fewer, larger VMs also amortise
# each VM's start-up (the --setup_file install of TensorFlow happens once per VM).
machine_type=n2-standard-4
job_name="imgrec-convert-$(date -u +%Y%m%d-%H%M%S)"
project="" region="" temp_location="" staging_location="" sdk_container_image=""
dry_run=false overwrite=false
args=()

value_of() {  # value_of FLAG ARG NEXT: prints the value of `--flag=v` or `--flag v`
  if [[ "$2" == *=* ]]; then echo "${2#*=}"; else echo "${3-}"; fi
}

while [ "$#" -gt 0 ]; do
  arg="$1" name="${1%%=*}"
  takes_value=true
  [[ "$arg" == *=* ]] && takes_value=false
  case "$name" in
    -h|--help) usage; exit 0 ;;
    --project|--region|--temp_location|--staging_location|--max_num_workers|--machine_type|\
    --sdk_container_image|--job_name)
      if $takes_value && [ "$#" -lt 2 ]; then die "$name needs a value"; fi
      value="$(value_of "$name" "$arg" "${2-}")"
      [ -n "$value" ] || die "$name needs a value"
      declare "${name#--}=$value"
      if $takes_value; then shift; fi ;;
    --dry_run)
      case "$(value_of "$name" "$arg" "")" in
        ""|true|True|1|yes) dry_run=true ;;
        false|False|0|no) dry_run=false ;;
        *) die "--dry_run takes no value (or =true/=false), got '$arg'" ;;
      esac ;;
    --runner)
      die "--runner is set by this script (DataflowRunner); for other runners use ./run_local.sh --runner ..." ;;
    --input|--output|--manifest)
      if $takes_value && [ "$#" -lt 2 ]; then die "$name needs a value"; fi
      value="$(value_of "$name" "$arg" "${2-}")"
      case "$value" in
        gs://*|s3://*) ;;
        *) die "$name $value: Dataflow workers cannot reach local files; use a gs:// (or s3://) path" ;;
      esac
      args+=("$name=$value")
      if $takes_value; then shift; fi ;;
    --overwrite) overwrite=true; args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
  shift
done

[ -n "$project" ] || die "--project PROJECT_ID is required (the Google Cloud project that runs the job)"
[ -n "$region" ] || die "--region REGION is required (the Dataflow region, e.g. us-central1)"
[ -n "$temp_location" ] || die "--temp_location gs://BUCKET/tmp is required (Dataflow's scratch space)"
[[ "$temp_location" == gs://?* ]] || die "--temp_location $temp_location: must be a gs://BUCKET/PATH"
if [ -n "$staging_location" ] && [[ "$staging_location" != gs://?* ]]; then
  die "--staging_location $staging_location: must be a gs://BUCKET/PATH"
fi
[[ "$max_num_workers" =~ ^[1-9][0-9]*$ ]] || die "--max_num_workers $max_num_workers: expected a positive integer"

beam=(--project="$project" --region="$region" --temp_location="$temp_location"
      --job_name="$job_name" --max_num_workers="$max_num_workers" --machine_type="$machine_type"
      --setup_file=./setup.py)
# Runner v2 (Beam 2.77 adds its experiments itself) runs the SDK from the container image; the
# default image is Beam's own, with imgrec and its pins installed from --setup_file at start-up.
[ -z "$staging_location" ] || beam+=(--staging_location="$staging_location")
[ -z "$sdk_container_image" ] || beam+=(--sdk_container_image="$sdk_container_image")
if $dry_run; then
  # Beam's DataflowRunner dry run (TestOptions.dry_run), reporting the job it built.
  beam+=(--runner=pipeline.runners.dataflow.DryRunDataflowRunner --dry_run=true)
else
  beam+=(--runner=DataflowRunner)
fi

if [ "${IMGREC_SKIP_BOOTSTRAP:-}" != 1 ]; then
  source scripts/bootstrap.sh
fi
exec python -m pipeline convert "${beam[@]}" ${args[@]+"${args[@]}"}
