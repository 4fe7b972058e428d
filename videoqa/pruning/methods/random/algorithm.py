"""Random pruning before the LLM (FastV's K=0 baseline): keep a uniform, seeded sample of visual tokens."""

from __future__ import annotations

import torch


def select_random(n_visual: int, keep: int, seed: int) -> list[int]:
    """`keep` distinct visual-span indices drawn uniformly without replacement, sorted.

    Uses its own torch.Generator, so the result depends only on (n_visual, keep, seed) — never on the
    global RNG state — and the same seed gives the same tokens on every machine.
    """
    if n_visual < 0 or not 0 <= keep <= n_visual:
        raise ValueError(f"need 0 <= keep <= n_visual, got keep={keep}, n_visual={n_visual}")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    # The first `keep` entries of a uniform random permutation are a uniform sample without replacement.
    chosen = torch.randperm(n_visual, generator=generator)[:keep]
    return sorted(chosen.tolist())
