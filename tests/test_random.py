"""Random pruning: seeded, reproducible, uniform without replacement."""

import pytest
import torch

from videoqa.pruning.methods.random.algorithm import select_random


def test_sorted_unique_in_range_and_exact_count():
    for n, keep in [(2056, 1028), (65, 1), (10, 10), (10, 0)]:
        kept = select_random(n, keep, seed=3)
        assert len(kept) == keep
        assert kept == sorted(set(kept))
        assert all(0 <= i < n for i in kept)


def test_reproducible_and_independent_of_global_rng():
    torch.manual_seed(1)
    a = select_random(520, 260, seed=7)
    torch.manual_seed(2)
    torch.rand(100)
    b = select_random(520, 260, seed=7)
    assert a == b
    assert select_random(520, 260, seed=8) != a


def test_uniform_marginals():
    # Each index must be kept with probability keep/n: over many seeds the counts follow a binomial.
    n, keep, trials = 20, 5, 4000
    counts = torch.zeros(n)
    for seed in range(trials):
        counts[select_random(n, keep, seed)] += 1
    p = keep / n
    expected, std = trials * p, (trials * p * (1 - p)) ** 0.5
    assert ((counts - expected).abs() < 5 * std).all()
    # and not degenerate: the spread is that of a binomial, not zero
    assert counts.std() > 0.3 * std


@pytest.mark.parametrize(("n", "keep"), [(10, 11), (10, -1)])
def test_bad_arguments(n, keep):
    with pytest.raises(ValueError):
        select_random(n, keep, seed=0)
