"""The prefix cache on today's families (LLaVA-OneVision, Qwen2.5-VL, Qwen3-VL), on tiny random models of the real
classes loaded by folder: a clip's prefix reused across questions gives the logits, kept sets and answers of a full
prefill (the pipeline with the cache off), batch 1 and a left-padded batch mixing clips, with history; on M-RoPE the
question's (t, h, w) positions continue from the prefix's as the model's get_rope_index gave them, and Qwen3-VL's
deepstack features are added inside the prefix. Another clip file, R or method never gets a stale prefix."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers.clipgen import write_clip
from test_prefix_cache import run as run_at

from videoqa.model import load_model
from videoqa.models.families import FAMILIES, make_tiny
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.pruning.registry import REGISTRY

pytestmark = pytest.mark.slow  # three families' models, each method twice

QUESTIONS = ["What colour is the square?", "Which way does it move?", "Is there a circle in the video at all?"]
HISTORY = [("What is it?", "A red square.")]
FRAMES = 8


class Family:
    """One family's tiny model behind two pipelines (with and without the prefix cache) and two clips of other
    sizes, lengths and frame rates (so other M-RoPE time steps)."""

    def __init__(self, name: str, folder):
        model_dir = make_tiny(name, folder / "model")
        loaded = load_model(str(model_dir))
        self.cached = VideoQA(loaded, max_new_tokens=6)
        self.plain = VideoQA(loaded, max_new_tokens=6, prefix_cache_bytes=0)
        self.clips = (write_clip(folder / "a.mp4", n_frames=30, size=(112, 112), fps=10),
                      write_clip(folder / "b.mp4", n_frames=40, size=(96, 128), fps=8))


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    return Family(request.param, tmp_path_factory.mktemp(request.param))


def run(qa: VideoQA, items, cfg: PruneConfig, history=None):
    """`items` [(clip, question)] as one batch at FRAMES frames: (logits, kept sets, answers, prefix hits)."""
    return run_at(qa, items, cfg, history, frames=FRAMES)


def check_same(family: Family, items, cfg: PruneConfig, history=None) -> None:
    """`items` asked with the cache (every prefix found) and without: the same logits, kept sets and answers."""
    logits, kept, answers, hits = run(family.cached, items, cfg, history)
    ref_logits, ref_kept, ref_answers, ref_hits = run(family.plain, items, cfg, history)
    assert hits == [True] * len(items) and ref_hits == []
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert kept == ref_kept
    assert answers == ref_answers


def configs() -> list[PruneConfig]:
    return [PruneConfig(method=m.name, **({"r": 0.5} if m.uses_r else {})) for m in REGISTRY]


@pytest.mark.parametrize("cfg", configs(), ids=lambda c: c.method)
def test_every_method_batch_1_and_2_same_as_a_full_prefill(family, cfg):
    """Each clip's first question fills its prefix; then one question, and a batch of two on both clips with
    question lengths apart (prefixes and suffixes padded apart), reuse them."""
    a, b = family.clips
    run(family.cached, [(a, "Anything here?"), (b, "Anything here?")], cfg)
    check_same(family, [(a, QUESTIONS[0])], cfg)
    check_same(family, [(b, QUESTIONS[2]), (a, QUESTIONS[1])], cfg)


@pytest.mark.parametrize("cfg", configs(), ids=lambda c: c.method)
def test_one_clips_questions_batched_on_its_one_prefix_same_as_a_full_prefill(family, cfg):
    """Three questions of other lengths on one clip: a method selecting before the LLM runs them as one sequence after
    the clip's one prefix (llm/shared_prefix.py; M-RoPE positions and deepstack additions as the model gave them);
    the logits, kept sets and answers of the full prefill."""
    from test_prefix_cache import ask_one_batch

    a, _ = family.clips
    items = [(a, q) for q in QUESTIONS]
    run(family.cached, [(a, "Anything here?")], cfg)
    check_same(family, items, cfg)
    state, _, answers = ask_one_batch(family.cached, items, cfg, FRAMES)
    assert state.prefix_hits == [True] * 3 and answers == run(family.plain, items, cfg)[2]
    assert (state.shared is None) == (state.plan is not None)


@pytest.mark.parametrize("method", ["none", "vispruner", "fastv"])
def test_a_chat_reuses_the_clip_and_then_the_conversation_so_far(family, method):
    """Turn 2 starts from the clip's prefix, turn 3 from turn 2's whole prompt; each the full prefill's."""
    cfg = PruneConfig(method=method, **({"r": 0.5} if method != "none" else {}))
    family.cached.prefix_cache.clear()
    history: list[tuple[str, str]] = []
    reused = []
    for i, question in enumerate(QUESTIONS):
        before = family.cached.prefix_cache.reused_tokens
        logits, kept, answers, hits = run(family.cached, [(family.clips[0], question)], cfg, history)
        ref = run(family.plain, [(family.clips[0], question)], cfg, history)
        assert hits == [i > 0]
        torch.testing.assert_close(logits, ref[0], rtol=1e-4, atol=1e-4)
        assert (kept, answers) == (ref[1], ref[2])
        reused.append(family.cached.prefix_cache.reused_tokens - before)
        history.append((question, answers[0] or "A red square."))
    assert reused[0] == 0 and 0 < reused[1] < reused[2]


def test_the_key_holds_the_positions_the_model_gives_the_whole_prompt(family):
    """The kept prefix's key: its ids and each token's position as the model's own computation gives them for the
    whole prompt fed by the family's own processor (Qwen: get_rope_index's (t, h, w) triples, so the question after
    it continues from the video's rope delta, not from the prefix's length; LLaVA-OneVision: 0, 1, 2, ...)."""
    from videoqa.models import qwen_vl

    qa = family.cached
    qa.prefix_cache.clear()
    run(qa, [(family.clips[0], QUESTIONS[0])], PruneConfig(method="none"))
    (key,) = qa.prefix_cache._entries
    if qa.family.name == "llava-onevision":
        assert key.positions == tuple(range(len(key.ids)))
        return
    sampled, _ = qa.sample(family.clips[0], FRAMES)
    inputs = qwen_vl.processor_inputs(qa.processor, sampled.frames, QUESTIONS[0], sampled.info.fps, sampled.indices)
    ref = qwen_vl.rope_positions(qa.model, inputs)[:, 0]
    n = len(key.ids)
    assert list(key.ids) == inputs["input_ids"][0, :n].tolist()
    assert key.positions == tuple(zip(*ref[:, :n].tolist(), strict=True))
    assert int(ref[0, n]) < n  # the rest goes on from the rope delta: merged tokens share positions


def stale_case(family: Family, first: tuple, second: tuple, between=lambda: None) -> None:
    """Ask `first` (clip, cfg) with the cache, call `between`, then ask `second`: a miss, and the uncached answer."""
    run(family.cached, [(first[0], QUESTIONS[0])], first[1])
    between()
    misses = family.cached.prefix_cache.misses
    logits, kept, answers, hits = run(family.cached, [(second[0], QUESTIONS[1])], second[1])
    ref = run(family.plain, [(second[0], QUESTIONS[1])], second[1])
    assert hits == [False] and family.cached.prefix_cache.misses == misses + 1
    torch.testing.assert_close(logits, ref[0], rtol=1e-4, atol=1e-4)
    assert (kept, answers) == (ref[1], ref[2])


def test_a_changed_file_another_r_or_method_is_not_served_a_stale_prefix(family, tmp_path):
    path = write_clip(tmp_path / "c.mp4", n_frames=30, size=(112, 112), fps=10)
    vispruner = PruneConfig(method="vispruner", r=0.5)
    # same name, same size, frame count and rate (so the same ids and positions), other content
    for cfg, turn in ((PruneConfig(method="none"), 180), (vispruner, 0)):
        stale_case(family, (path, cfg), (path, cfg),
                   between=lambda turn=turn: write_clip(path, n_frames=30, size=(112, 112), fps=10, turn=turn))
    if family.cached.family.name == "qwen2.5-vl":  # the same frames at half the rate: only M-RoPE's time axis moves
        clip, _ = family.cached.sample(path, FRAMES)
        slow = replace(clip, info=replace(clip.info, fps=clip.info.fps / 2))
        stale_case(family, (clip, PruneConfig(method="none")), (slow, PruneConfig(method="none")))
    stale_case(family, (path, vispruner), (path, PruneConfig(method="vispruner", r=0.75)))
    stale_case(family, (path, vispruner), (path, PruneConfig(method="random", r=0.5)))  # same length
    stale_case(family, (path, PruneConfig(method="fastv", k=2, r=0.5)), (path, PruneConfig(method="fastv", k=3,
                                                                                           r=0.5)))
