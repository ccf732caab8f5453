#!/usr/bin/env bash
# Convert images to TFRecords on this machine (DirectRunner). No arguments: the built-in demo.
#   ./run_local.sh                                        # demo: real photos + broken files
#   ./run_local.sh --input 'data/*/*.jpg' --output out/   # your own data (imgrec convert ARGS)
#   ./run_local.sh inspect|verify|preview DIR             # the other imgrec commands
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
case "${1:-}" in
  convert|inspect|verify|preview|help) exec python -m pipeline "$@" ;;
esac
verbose=()
for a in "$@"; do
  case "$a" in -v|--verbose) verbose+=("$a") ;; *) other=1 ;; esac
done
if [ -n "${other:-}" ]; then
  exec python -m pipeline convert "$@"
fi
DEMO_IN="${IMGREC_DEMO_DIR:-demo_data/photos}"
DEMO_OUT="${IMGREC_DEMO_OUT:-out/demo}"
if [ ! -d "$DEMO_IN" ]; then
  python -m pipeline.demo "$DEMO_IN" --num_images 300
fi
echo "imgrec: converting the demo corpus $DEMO_IN -> $DEMO_OUT"
python -m pipeline convert ${verbose[@]+"${verbose[@]}"} --input "$DEMO_IN/*/*.jpg" --output "$DEMO_OUT" --overwrite \
  --splits train=0.8,validation=0.1,test=0.1
