"""The accelerator check: correctness, memory model and speed at Video-LLaVA-7B shapes, in one run.

`scripts/gpu_check.sh` (or `python -m videoqa.gpucheck`) builds Video-LLaVA-7B's architecture with random weights
directly on the GPU, runs every check and writes a markdown and a JSON report. `--cpu` runs the same code at tiny
shapes in seconds (part of the test suite, so the script cannot rot).
"""
