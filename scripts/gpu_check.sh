#!/usr/bin/env bash
# The accelerator check, in one go: correctness, the memory model and speed of videoqa at Video-LLaVA-7B shapes
# (random weights built on the GPU: no download), bf16, SDPA. Meant to fit one 15-minute GPU loan; it has never
# run on a GPU, so its duration there is unknown (--no-compile drops the longest part).
#
#   scripts/gpu_check.sh [OUT]            report to OUT/gpu_check.{md,json} (default: $OUT, else artifacts/gpu_check)
#   scripts/gpu_check.sh --cpu [OUT]      dry run of the same code at tiny shapes on the CPU (seconds; in the tests)
#   scripts/gpu_check.sh --fetch-wheels   download the PyAV wheel into .whl/ (here, before a device run)
#
# On a machine without PyAV (the device machines have torch, transformers and torchvision only), wheels in .whl/
# are installed into a temporary folder first: carry .whl with the run (about 35 MB). Exit status: 0 all checks
# passed, 1 some check FAILed (the report says which), 2 no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--fetch-wheels" ]]; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "av>=12,<19"
  exit 0
fi

if [[ -n "${PYTHON:-}" ]]; then py=$PYTHON
elif [[ -x .venv/bin/python ]]; then py=.venv/bin/python
else py=python3; fi

if ! "$py" -c "import av" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  site=$(mktemp -d)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # videoqa from this checkout, installed or not
export PYTHONUNBUFFERED=1
exec "$py" -m videoqa.gpucheck "$@"
