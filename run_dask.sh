#!/usr/bin/env bash
# Convert on a local Dask cluster: a dask scheduler and N worker processes on 127.0.0.1, started
# here and stopped when the conversion ends (docs/runners.md). No arguments: the built-in demo.
#   ./run_dask.sh                                          # demo corpus, 2 workers
#   DASK_WORKERS=4 ./run_dask.sh --input 'data/*/*.jpg' --output out/   # imgrec convert ARGS
# For a cluster you already run, skip this script:
#   imgrec convert ... --runner DaskRunner --dask_client_address tcp://HOST:8786
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
WORKERS="${DASK_WORKERS:-2}"
PORT="${DASK_PORT:-$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
LOGS="$(mktemp -d -t imgrec-dask-XXXXXX)"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # Workers import imgrec's transforms.
PIDS=()
stop() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop EXIT
# --preload pipeline.launch.dask_preload: the scheduler imports the stages (and TensorFlow) at start-up,
# while the workers start, not when it unpickles the job's task graph (pipeline/launch/dask_preload.py).
dask scheduler --host 127.0.0.1 --port "$PORT" --no-dashboard --preload pipeline.launch.dask_preload \
  >"$LOGS/scheduler.log" 2>&1 &
PIDS+=($!)
for i in $(seq 1 "$WORKERS"); do
  # --preload: each worker process imports TensorFlow and the stages at start-up, without the
  # garbage collector; its nanny does not (pipeline/launch/dask_preload.py; docs/runners.md).
  dask worker "tcp://127.0.0.1:$PORT" --nthreads 1 --no-dashboard --name "w$i" \
    --preload pipeline.launch.dask_preload \
    >"$LOGS/worker-$i.log" 2>&1 &
  PIDS+=($!)
done
python - "$PORT" "$WORKERS" <<'PY'
import sys
from dask.distributed import Client
with Client(f"tcp://127.0.0.1:{sys.argv[1]}", timeout=60) as c:
    c.wait_for_workers(int(sys.argv[2]), timeout=120)
PY
echo "imgrec: Dask scheduler tcp://127.0.0.1:$PORT, $WORKERS workers (logs: $LOGS)"
DASK=(--runner DaskRunner --dask_client_address "tcp://127.0.0.1:$PORT")
if [ "$#" -gt 0 ]; then
  python -m pipeline convert "$@" "${DASK[@]}"
  exit $?
fi
DEMO_IN="${IMGREC_DEMO_DIR:-demo_data/photos}"
DEMO_OUT="${IMGREC_DEMO_OUT:-out/demo-dask}"
if [ ! -d "$DEMO_IN" ]; then
  python -m pipeline.demo "$DEMO_IN" --num_images 300
fi
echo "imgrec: converting the demo corpus $DEMO_IN -> $DEMO_OUT on Dask"
python -m pipeline convert --input "$DEMO_IN/*/*.jpg" --output "$DEMO_OUT" --overwrite \
  --splits train=0.8,validation=0.1,test=0.1 "${DASK[@]}"
