"""FastV's per-frame floor: every frame keeps its share, the rest go by score; off, it is plain FastV."""

from __future__ import annotations

import pytest
import torch
from transformers import VideoLlavaForConditionalGeneration

from videoqa import llm
from videoqa.cli import main
from videoqa.errors import InputError
from videoqa.models.tiny import TinySpec, make_tiny_model
from videoqa.pruning import PruneConfig, keep_count
from videoqa.pruning.methods.fastv.algorithm import FastVPlan, top_tokens

N, VIS, TPF = 60, slice(6, 46), 10  # 40 visual tokens: 4 "frames" of 10


def independent_floor(scores: list[float], n_keep: int, share: float, tpf: int) -> set[int]:
    """Per frame its top floor(share * n_keep / frames) (ties to the lower index), then the global top of the rest."""
    frames = len(scores) // tpf
    per_frame = int(share * n_keep / frames)
    kept: set[int] = set()
    for f in range(frames):
        idx = sorted(range(f * tpf, (f + 1) * tpf), key=lambda i: (-scores[i], i))
        kept.update(idx[:per_frame])
    rest = sorted((i for i in range(len(scores)) if i not in kept), key=lambda i: (-scores[i], i))
    kept.update(rest[: n_keep - len(kept)])
    return kept


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = make_tiny_model(tmp_path_factory.mktemp("floor"), TinySpec(family="llama"))
    sdpa = VideoLlavaForConditionalGeneration.from_pretrained(path, attn_implementation="sdpa").eval()
    eager = VideoLlavaForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
    return sdpa, eager


def inputs(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 300, (1, N), generator=g)
    vis = torch.zeros(1, N, dtype=torch.bool)
    vis[0, VIS] = True
    embeds = model.get_input_embeddings()(ids).detach().clone()
    # Frame 0's features are large so that plain FastV favours it: the floor must then matter.
    feats = torch.randn(VIS.stop - VIS.start, embeds.shape[-1], generator=g) * 0.05
    feats[:TPF] *= 20
    embeds[vis] = feats
    return embeds, torch.ones(1, N, dtype=torch.long), vis


@torch.no_grad()
@pytest.mark.parametrize("r,share", [(0.5, 0.5), (0.75, 1.0), (0.9, 0.3)])
def test_floor_kept_set_equals_an_independent_computation(models, r, share):
    sdpa, eager = models
    embeds, am, vis = inputs(sdpa, seed=3)
    k = 2
    att = eager(inputs_embeds=embeds, attention_mask=am, output_attentions=True).attentions[k - 1]
    scores = att[0].mean(0)[-1, VIS].tolist()  # the last token's row, mean over heads (FastV's query)
    n_keep = keep_count(len(scores), r)
    out = llm.prefill(sdpa, embeds, am, vis, FastVPlan(k=k, r=r, frame_floor=share, tokens_per_frame=TPF))
    assert set(out.kept[0].tolist()) == independent_floor(scores, n_keep, share, TPF)
    assert len(out.kept[0]) == n_keep
    per_frame = torch.bincount(out.kept[0] // TPF, minlength=4)
    assert int(per_frame.min()) >= int(share * n_keep / 4)
    # Off, the same inputs give FastV's global top-k (tests/test_engine.py covers it in full).
    plain = llm.prefill(sdpa, embeds, am, vis, FastVPlan(k=k, r=r, tokens_per_frame=TPF))
    assert set(plain.kept[0].tolist()) == set(torch.topk(torch.tensor(scores), n_keep).indices.tolist())


@torch.no_grad()
def test_floor_changes_a_starved_frame(models):
    sdpa, _ = models
    embeds, am, vis = inputs(sdpa, seed=3)
    plain = llm.prefill(sdpa, embeds, am, vis, FastVPlan(k=2, r=0.9, tokens_per_frame=TPF)).kept[0]
    floored = llm.prefill(sdpa, embeds, am, vis, FastVPlan(k=2, r=0.9, frame_floor=1.0,
                                                              tokens_per_frame=TPF)).kept[0]
    assert torch.bincount(plain // TPF, minlength=4).min() == 0  # some frame starves without the floor
    assert torch.bincount(floored // TPF, minlength=4).tolist() == [1, 1, 1, 1]


def test_top_tokens_edge_cases():
    s = torch.tensor([0.5, 0.5, 0.1, 0.9, 0.2, 0.2])
    assert top_tokens(s, 3).tolist() == [0, 1, 3]  # ties to the lower index
    assert top_tokens(s, 2, 1.0, 3).tolist() == [0, 3]  # one per frame
    assert top_tokens(s, 6, 1.0, 3).tolist() == list(range(6))
    with pytest.raises(ValueError, match="whole frames"):
        top_tokens(s, 2, 0.5, 4)


def test_config_and_cli_refuse_a_bad_floor(capsys):
    assert PruneConfig(method="fastv", frame_floor=0.5).validate().frame_floor == 0.5
    for bad in (-0.1, 1.5, "x"):
        with pytest.raises(InputError, match="frame floor"):
            PruneConfig(method="fastv", frame_floor=bad).validate()
    with pytest.raises(InputError, match="vispruner does not use it"):
        PruneConfig(method="vispruner", frame_floor=0.5).validate()
    assert main(["ask", "clip.mp4", "q", "--frame-floor", "2"]) == 2
    err = capsys.readouterr().err
    assert "frame floor" in err and len(err.strip().splitlines()) == 1
    assert main(["ask", "clip.mp4", "q", "--prune", "random", "--frame-floor", "0.5"]) == 2
    assert "--frame-floor 0.5: not used by --prune random (it applies to --prune fastv)" in capsys.readouterr().err


def test_pipeline_gives_every_frame_its_floor(tiny_qa):
    from conftest import SAMPLE_CLIPS

    cfg = PruneConfig(method="fastv", k=2, r=0.9, frame_floor=1.0)
    answer = tiny_qa.ask(SAMPLE_CLIPS[0], "What colour is the shape?", prune=cfg, frames=8)
    n_keep = keep_count(8 * 65, 0.9)
    assert answer.kept.n_kept == n_keep and answer.prune.frame_floor == 1.0
    assert min(answer.kept.per_frame()) == n_keep // 8
