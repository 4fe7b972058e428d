# Two commands do all set-up:  `make demo` (answer a question about a sample clip)  and  `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch/torchvision pair: transformers' Video-LLaVA video processor needs torchvision. A torch you
# installed yourself into $(VENV) (e.g. for your CUDA version) is kept if it imports with torchvision.
TORCH ?= torch==2.14.1 torchvision==0.29.1

.PHONY: setup demo test test-fast test-lower lint bench serve gpu-check

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c "import torch, torchvision" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

demo: setup
	$(VENV)/bin/videoqa ask samples/clips/orange_circle_right.mp4 "Which direction does the orange circle move?"
	$(VENV)/bin/videoqa ask samples/clips/green_square_up.mp4 "What colour is the shape?" --prune fastv --k 2 --r 0.5

# Two workers (pytest-xdist), one torch thread each (tests/conftest.py); a file's tests stay on one worker, so a
# module's tiny models, servers and browser are built once.
test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=20

# The developers' loop, about 3 minutes on 2 cores: the suite without the tests marked slow (tests/conftest.py).
test-fast: setup
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

# transformers 5.17, the oldest supported (see scripts/lower_bound_check.sh); CI runs it after `test`.
test-lower: setup
	scripts/lower_bound_check.sh

# The accelerator check at Video-LLaVA-7B shapes (needs a CUDA GPU; report in artifacts/gpu_check or $$OUT).
gpu-check:
	scripts/gpu_check.sh

lint: setup
	$(VENV)/bin/ruff check videoqa ui tests samples scripts

bench: setup
	$(VENV)/bin/videoqa bench llm frames

serve: setup
	$(VENV)/bin/videoqa serve --model demo
