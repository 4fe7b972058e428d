#!/bin/bash
# The one command that makes samples/demo-model: the run from scratch, then the conversation fine-tune.
#
#   OMP_NUM_THREADS=1 bash scripts/train_demo.sh       # ~60 min on one CPU core; RUNS=dir to move the runs
#
# The first run is scripts/train_demo.py with its defaults, cut at step 2,175 as the shipped one was (its best
# checkpoint, step 1,750, is what it keeps); the second trains it on conversations of 1-30 turns that ask again.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-runs/demo}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
python -m scripts.train_demo --out "$runs/first" --stop-at 2175
python -m scripts.train_demo --init "$runs/first" --out "$runs/conversations" --cache /tmp/demo_cache_mt \
    --train-clips 3000 --steps 300 --lr 1e-4 --warmup 10 --turns 30 --eval-every 50
echo "the model: $runs/conversations (copy it to samples/demo-model)"
