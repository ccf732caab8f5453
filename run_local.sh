#!/usr/bin/env bash
# Run imgrec on this machine (DirectRunner), setting up .venv first. No arguments: the demo.
#   ./run_local.sh                                        # demo: real photos + broken files
#   ./run_local.sh --input 'data/*/*.jpg' --output out/   # your own data (imgrec convert ARGS)
#   ./run_local.sh COMMAND ARGS                           # any imgrec command (imgrec help)
set -euo pipefail
cd "$(dirname "$0")"
source scripts/bootstrap.sh
first=""  # the first argument that is not -v: imgrec takes -v anywhere
for a in "$@"; do
  case "$a" in -v|--verbose) ;; *) first="$a"; break ;; esac
done
case "$first" in
  convert|verify|inspect|preview|versions|help) exec python -m pipeline "$@" ;;
  "") ;;  # the demo, below
  *) exec python -m pipeline convert "$@" ;;  # flags (or a mistyped command: convert names it)
esac
DEMO_IN="${IMGREC_DEMO_DIR:-demo_data/photos}"
DEMO_OUT="${IMGREC_DEMO_OUT:-out/demo}"
if [ ! -d "$DEMO_IN" ]; then
  python -m pipeline.demo "$DEMO_IN" --num_images 300
fi
echo "imgrec: converting the demo corpus $DEMO_IN -> $DEMO_OUT"
python -m pipeline convert "$@" --input "$DEMO_IN/*/*.jpg" --output "$DEMO_OUT" --overwrite \
  --splits train=0.8,validation=0.1,test=0.1
