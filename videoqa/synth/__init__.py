"""Synthetic clips the demo models were trained on and the benchmarks measure with.

`short`: one coloured shape crossing a textured background (the `demo` model's world; `bench accuracy`).
`long`: 4-60 s clips of that scene plus one brief event (the `demo-long` model's world; `bench long`).
The training scripts (scripts/train_demo.py, scripts/train_long_frozen_tower.py) import them from here.
"""
