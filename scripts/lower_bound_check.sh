#!/usr/bin/env bash
# The oldest transformers videoqa supports, 5.17 (what the GPU machines have), checked in an overlay of the
# project's venv (.venv-lower: its own transformers, huggingface_hub and tokenizers; everything else from .venv):
# the accelerator check's dry run (engine, FastV, batches, static decode, pipeline stages, model building) and the
# pipeline-vs-transformers generate test (from_pretrained, processor). Run by CI after `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
LOWER=(transformers==5.17.0 huggingface_hub==1.33.0 tokenizers==0.23.2)
overlay=${LOWER_VENV:-.venv-lower}
base=$(.venv/bin/python -c "import site; print(site.getsitepackages()[0])")
if [[ ! -x "$overlay/bin/python" ]]; then
  .venv/bin/python -m venv --without-pip "$overlay"
fi
site=$("$overlay/bin/python" -c "import site; print(site.getsitepackages()[0])")
echo "import site; site.addsitedir('$base')" > "$site/_base.pth"
if ! "$overlay/bin/python" -c "import transformers as t; assert t.__version__ == '5.17.0'" 2>/dev/null; then
  .venv/bin/python -m pip install -q --no-deps --upgrade --target "$site" "${LOWER[@]}"
fi
"$overlay/bin/python" -c "import transformers, videoqa; print('lower bound: transformers', transformers.__version__)"
PYTHON="$overlay/bin/python" OUT= scripts/gpu_check.sh --cpu "${TMPDIR:-/tmp}/videoqa-gpu-check-lower" >/dev/null
"$overlay/bin/python" -m pytest -q -p no:cacheprovider "tests/test_pipeline.py::test_answer_equals_direct_generate"
echo "lower bound: transformers 5.17 passed"
