"""`videoqa bench laptop`'s table, on a tiny LLaVA-OneVision instead of the 0.5B shapes: three rows per frame count
(unpruned, FastV K=2 R=0.5, adaptive), each with the FLOPs ratio of its kept tokens."""

from __future__ import annotations

import pytest
import torch

from videoqa.bench.families import run_laptop
from videoqa.models import llava_onevision as ov
from videoqa.models.tiny_chatml import OV_MEDIA, chatml_tokenizer
from videoqa.pruning import ModelDims, keep_count
from videoqa.pruning.flops import estimate_flops


@pytest.mark.slow
def test_laptop_table_rows_and_flops_ratios():
    torch.set_num_threads(1)
    config = ov.tiny_config(ov.TinyOneVisionSpec(), chatml_tokenizer(400, OV_MEDIA))
    table = run_laptop((2, 4), config=config)
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ") and "frames" not in line]
    assert [(r[0].strip(), r[2].strip()[:8]) for r in rows] == [
        (f, name) for f in ("2", "4") for name in ("unpruned", "fastv K=", "adaptive")]
    t = config.text_config
    dims = ModelDims.from_text_config(t, 0)
    assert all(int(r[1]) == 2 * 16 + 1 for r in rows[:3])  # 2 frames: 2 x 16 pooled tokens + the newline
    unpruned, fastv = float(rows[0][6]), float(rows[1][6])
    assert unpruned == 1.0 and 0 < fastv < 1
    # the FastV row's ratio is K*f(n) + (T-K)*f(n_hat) over T*f(n) for some prompt length: check it is the
    # formula's value for the table's visual tokens at the prompt length that reproduces it within rounding
    assert any(abs(estimate_flops(dims, n, 33, keep_count(33, 0.5), 2).ratio - fastv) < 5e-4 for n in range(10, 80))
