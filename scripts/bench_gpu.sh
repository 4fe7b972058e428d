#!/usr/bin/env bash
# The `videoqa bench` tables at full Video-LLaVA-7B language-model shapes (random weights: no download),
# bf16, SDPA, on one CUDA GPU. About 3 minutes on an H100-class GPU. Prints markdown tables; also writes
# them to ${OUT:-artifacts}/bench_7b.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-artifacts}
mkdir -p "$out"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
videoqa bench llm frames --preset 7b --device cuda --dtype bfloat16 --repeats 5 --decode-tokens 32 \
  --out "$out/bench_7b.md" "$@"
