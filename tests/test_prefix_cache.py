"""The prefix cache: a clip's `system + USER: + visual tokens` KV cache reused across its questions gives the answers,
kept tokens and logits of a full prefill, for every method, batched and with history; and a changed clip, another R or
another method never gets a stale prefix."""

from __future__ import annotations

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa.llm.prefix_cache import Prefix, PrefixCache
from videoqa.model import load_model
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.pruning.registry import REGISTRY

QUESTIONS = ["What colour is the square?", "Which way does it move?", "Is there a circle in the video at all?"]
HISTORY = [("What is it?", "A red square.")]


@pytest.fixture(scope="module")
def pipelines(tiny_model_dir):
    """The same loaded model behind two pipelines: one with the prefix cache, one without."""
    loaded = load_model(str(tiny_model_dir))
    return VideoQA(loaded, max_new_tokens=6), VideoQA(loaded, max_new_tokens=6, prefix_cache_bytes=0)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prefix-clips")
    return write_clip(folder / "a.mp4", n_frames=24), write_clip(folder / "b.mp4", n_frames=12, size=(48, 64))


def run(qa: VideoQA, items, cfg: PruneConfig, history=None, frames: int | None = None):
    """Prefill and decode `items` [(clip, question)] as one batch (at `frames` frames; default: the model's):
    (last-position logits, FastV's kept sets or the chosen ones, the answers, whether each prefix came from the
    cache)."""
    cfg = qa._with_model_k(cfg).validate(qa.dims.n_layers)
    requests = [qa.prepare(v, q, history, cfg, frames, 6, share=len(items)) for v, q in items]
    with torch.inference_mode():
        state = qa.prefill(requests, qa.collate(requests))
        logits = state.logits.clone()
        kept = [k.tolist() for k in state.kept] if state.k is not None else [r.kept for r in requests]
        hits = list(state.prefix_hits)
        events = qa.decode(requests, state)
        while True:
            try:
                next(events)
            except StopIteration as done:
                new_ids = done.value
                break
    answers = [qa.processor.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in new_ids]
    return logits, kept, answers, hits


def configs():
    out = []
    for method in REGISTRY:
        r = None if not method.uses_r else 0.5
        out.append(PruneConfig(method=method.name, **({} if r is None else {"r": r})))
    return out


def same_with_the_cache(pipelines, clips, cfg, batch):
    """The second batch on the same clips reuses every prefix (FastV: layers < K); everything the user sees equals
    the full prefill's."""
    cached, plain = pipelines
    items = [(clips[i % 2], QUESTIONS[i]) for i in range(batch)]
    run(cached, [(v, "Anything here?") for v, _ in items], cfg)  # the first question about each clip fills it
    logits, kept, answers, hits = run(cached, items, cfg)
    ref_logits, ref_kept, ref_answers, ref_hits = run(plain, items, cfg)
    assert hits == [True] * batch and ref_hits == []
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert kept == ref_kept
    assert answers == ref_answers


@pytest.mark.parametrize("cfg", configs(), ids=lambda c: c.method)
def test_same_logits_kept_tokens_and_answers_with_the_cache(pipelines, clips, cfg):
    same_with_the_cache(pipelines, clips, cfg, 1)


@pytest.mark.slow
@pytest.mark.parametrize("cfg", configs(), ids=lambda c: c.method)
def test_batched_prefixes_give_the_same_logits_kept_tokens_and_answers(pipelines, clips, cfg):
    """A batch mixing clips and question lengths: prefixes and suffixes are padded apart."""
    same_with_the_cache(pipelines, clips, cfg, 3)


def ask_one_batch(qa: VideoQA, items, cfg: PruneConfig, frames: int | None = None):
    """`items` as one batch through `qa`'s prefill and decoding (at `frames` frames; default: the model's): (the
    prefill's state after decoding, its logits, the answers)."""
    cfg = qa._with_model_k(cfg).validate(qa.dims.n_layers)
    requests = [qa.prepare(v, q, None, cfg, frames, 6, share=len(items)) for v, q in items]
    with torch.inference_mode():
        state = qa.prefill(requests, qa.collate(requests))
        logits = state.logits.clone()
        events = qa.decode(requests, state)
        while True:
            try:
                next(events)
            except StopIteration as done:
                answers = [qa.processor.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in done.value]
                return state, logits, answers


@pytest.mark.parametrize("cfg", configs(), ids=lambda c: c.method)
def test_one_clips_questions_batched_hold_and_read_its_prefix_once(pipelines, clips, cfg):
    """Three questions of other lengths on one clip, batched on its cached prefix: a method that selects before the
    LLM runs them as one sequence after the one prefix (llm/shared_prefix.py), whose cache holds the prefix once
    (not once per question) and each question's own prompt and answer tokens; FastV's batch keeps the batch layout.
    Logits, kept sets and answers are those of the full prefill without the cache."""
    cached, plain = pipelines
    items = [(clips[0], q) for q in QUESTIONS[:3]]
    run(cached, [(clips[0], "Anything here?")], cfg)
    state, logits, answers = ask_one_batch(cached, items, cfg)
    ref_logits, ref_kept, ref_answers, _ = run(plain, items, cfg)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert answers == ref_answers
    assert state.prefix_hits == [True] * 3
    if state.plan is not None:  # a plan inside the LLM (FastV, PruneVid's second stage) keeps the batch layout
        assert state.shared is None
        return
    assert run(cached, items, cfg)[1] == ref_kept
    shared = state.shared
    assert shared is not None
    n_prefix = int((shared.owner == -1).sum())
    for layer in state.cache.layers:
        assert layer.keys.shape[0] == 1 and layer.keys.shape[2] == shared.owner.shape[0] > n_prefix


def test_one_sequence_on_the_prefix_with_eager_attention_and_none_with_flash(tiny_model_dir, clips):
    """Eager attention takes the mask by owner as SDPA does (same answers as without the cache); FlashAttention-2,
    which takes a key padding mask only, keeps the batch layout."""
    from videoqa.llm.shared_prefix import can_share

    loaded = load_model(str(tiny_model_dir), attn_implementation="eager")
    cached, plain = VideoQA(loaded, max_new_tokens=6), VideoQA(loaded, max_new_tokens=6, prefix_cache_bytes=0)
    cfg = PruneConfig(method="vispruner", r=0.5)
    items = [(clips[0], q) for q in QUESTIONS[:3]]
    run(cached, [(clips[0], "Anything here?")], cfg)
    state, logits, answers = ask_one_batch(cached, items, cfg)
    ref_logits, _, ref_answers, _ = run(plain, items, cfg)
    assert state.shared is not None
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert answers == ref_answers
    prefix = object()
    flash = type("LM", (), {"kernel": "flash_attention_2"})()
    assert not can_share(flash, [prefix, prefix], None, 5, False)
    assert can_share(cached.decoder.lm, [prefix, prefix], None, 5, False)


@pytest.mark.parametrize("method", ["none", "vispruner", "fastv"])
def test_a_batch_on_cached_prefixes_decodes_in_the_buffers_its_prefill_wrote(pipelines, clips, method):
    """Questions on two clips batched on their cached prefixes: the prefill leaves room for the answer in its
    buffers and eager decoding writes its tokens there, not into a copy of the batch's whole cache (FastV: layers
    < K); the answers are those without the cache."""
    from videoqa.llm.decode import GrowingCache

    cached, plain = pipelines
    cfg = PruneConfig(method=method, **({"r": 0.5} if method != "none" else {}))
    items = [(clips[i % 2], q) for i, q in enumerate(QUESTIONS[:3])]
    run(cached, [(clips[0], "Anything here?"), (clips[1], "Anything here?")], cfg)
    qa_cfg = cached._with_model_k(cfg).validate(cached.dims.n_layers)
    requests = [cached.prepare(v, q, None, qa_cfg, None, 6, share=len(items)) for v, q in items]
    with torch.inference_mode():
        state = cached.prefill(requests, cached.collate(requests))
        assert state.prefix_hits == [True] * 3 and state.shared is None
        depth = qa_cfg.layer if method == "fastv" else cached.dims.n_layers
        written = [state.cache.layers[i].spare[0].data_ptr() for i in range(depth)]
        assert all(state.cache.layers[i].spare[0].shape[2] >= state.cache.layers[i].keys.shape[2] + 5
                   for i in range(depth))
        events = cached.decode(requests, state)
        texts = []
        while True:
            try:
                next(events)
            except StopIteration as done:
                texts = [cached.processor.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in done.value]
                break
    assert isinstance(state.cache, GrowingCache)
    assert [state.cache.layers[i]._keys.data_ptr() for i in range(depth)] == written
    assert texts == run(plain, items, cfg)[2]


@pytest.mark.parametrize("method", ["none", "vispruner", "fastv"])
def test_follow_ups_with_history_reuse_the_prefix(pipelines, clips, method):
    """The chat's follow-ups: earlier turns come after the video in the prompt, so their prefix is the first
    question's."""
    cached, plain = pipelines
    cfg = PruneConfig(method=method, r=0.5) if method != "none" else PruneConfig(method="none")
    run(cached, [(clips[0], QUESTIONS[0])], cfg)
    logits, kept, answers, hits = run(cached, [(clips[0], QUESTIONS[1])], cfg, history=HISTORY)
    ref = run(plain, [(clips[0], QUESTIONS[1])], cfg, history=HISTORY)
    assert hits == [True]
    torch.testing.assert_close(logits, ref[0], rtol=1e-4, atol=1e-4)
    assert (kept, answers) == (ref[1], ref[2])


def test_fastv_keeps_only_the_layers_below_k(pipelines, clips):
    cached, _ = pipelines
    cached.prefix_cache.clear()
    run(cached, [(clips[0], QUESTIONS[0])], PruneConfig(method="fastv", k=2, r=0.5))
    (prefix,) = cached.prefix_cache._entries.values()
    assert prefix.depth == 2 and prefix.hidden is not None and prefix.hidden.shape[1] == prefix.length
    ids = cached.prompt_ids(QUESTIONS[0])
    assert prefix.length == ids.index(cached.model.config.video_token_id) + 8 * 65  # up to the last visual token


def stale_case(pipelines, first: tuple, second: tuple, between=lambda: None):
    """Ask `first` (clip, cfg) with the cache, call `between`, then ask `second`: it must miss the cache and its
    logits, kept tokens and answer must be the uncached ones."""
    cached, plain = pipelines
    run(cached, [(first[0], QUESTIONS[0])], first[1])
    between()
    misses = cached.prefix_cache.misses
    logits, kept, answers, hits = run(cached, [(second[0], QUESTIONS[1])], second[1])
    ref = run(plain, [(second[0], QUESTIONS[1])], second[1])
    assert hits == [False] and cached.prefix_cache.misses == misses + 1
    torch.testing.assert_close(logits, ref[0], rtol=1e-4, atol=1e-4)
    assert (kept, answers) == (ref[1], ref[2])


def test_a_changed_file_is_not_served_its_old_prefix(pipelines, tmp_path):
    path = write_clip(tmp_path / "c.mp4", n_frames=24)
    for cfg, size in ((PruneConfig(method="none"), (48, 64)), (PruneConfig(method="vispruner", r=0.5), (64, 48))):
        # same name, other frames: the same prompt ids and positions (8 frames at the tower's resolution)
        stale_case(pipelines, (path, cfg), (path, cfg),
                   between=lambda size=size: write_clip(path, n_frames=30, size=size))


def test_another_r_or_method_is_not_served_a_stale_prefix(pipelines, clips):
    vispruner = PruneConfig(method="vispruner", r=0.5)
    stale_case(pipelines, (clips[0], vispruner), (clips[0], PruneConfig(method="vispruner", r=0.75)))
    stale_case(pipelines, (clips[0], vispruner), (clips[0], PruneConfig(method="random", r=0.5)))  # same length
    stale_case(pipelines, (clips[0], vispruner), (clips[0], PruneConfig(method="vispruner", r=0.5,
                                                                         params=(("keep_positions", True),))))
    stale_case(pipelines, (clips[0], PruneConfig(method="fastv", k=2, r=0.5)),
               (clips[0], PruneConfig(method="fastv", k=3, r=0.5)))


def test_the_cache_is_bounded_by_bytes_least_recently_used_out():
    def prefix(n):  # n tokens of one layer: 2 * n * 4 bytes
        t = torch.zeros(1, 1, n, 1)
        return Prefix((t,), (t.clone(),), None)

    cache = PrefixCache(max_bytes=200)
    for key in "abc":
        cache.put(key, prefix(8))  # 64 bytes each
    assert cache.get("a") is not None  # now the most recent
    cache.put("d", prefix(8))  # 256 > 200: the least recent ("b") goes
    assert [k for k in "abcd" if k in cache._entries] == ["a", "c", "d"] and cache.nbytes == 192
    cache.put("e", prefix(40))  # larger than the whole bound: not kept, nothing evicted for it
    assert "e" not in cache._entries and len(cache) == 3
    assert (cache.hits, cache.misses) == (1, 0)


def test_a_method_acting_inside_the_llm_cannot_claim_question_independence():
    from videoqa.pruning.method import Acts, Method

    fastv = REGISTRY.get("fastv")
    assert not fastv.question_independent
    assert all(m.question_independent for m in REGISTRY if m.acts is not Acts.IN_LLM)
    with pytest.raises(ValueError, match="ranks with the question"):
        Method(name="x", help="", acts=Acts.IN_LLM, plan=fastv.plan, layer_option="k", question_independent=True)


@pytest.mark.parametrize("cfg", [PruneConfig(method="none"), PruneConfig(method="vispruner", r=0.5),
                                 PruneConfig(method="fastv", k=2, r=0.5),
                                 PruneConfig(method="fastv", k=2, r=0.5, params=(("rank_by", "text"),))],
                         ids=["none", "vispruner", "fastv", "fastv-text"])
def test_a_three_turn_chat_reuses_the_conversation_so_far(pipelines, clips, cfg):
    """The web chat's follow-ups: the second turn starts from the clip's prefix, the third from the second turn's
    whole prompt (the clip and the first turn); each turn's logits, kept tokens and answer are those of a full
    prefill. (FastV ranking by every text token reads the earlier turns' rows from the kept prefix.)"""
    cached, plain = pipelines
    cached.prefix_cache.clear()
    history: list[tuple[str, str]] = []
    reused, lengths = [], []
    for question in QUESTIONS:
        before = cached.prefix_cache.reused_tokens
        logits, kept, answers, _ = run(cached, [(clips[0], question)], cfg, history=history)
        ref = run(plain, [(clips[0], question)], cfg, history=history)
        torch.testing.assert_close(logits, ref[0], rtol=1e-4, atol=1e-4)
        assert (kept, answers) == (ref[1], ref[2])
        reused.append(cached.prefix_cache.reused_tokens - before)
        c = cached._with_model_k(cfg).validate(cached.dims.n_layers)
        lengths.append(len(cached.prepare(clips[0], question, history, c, None, 6).ids))
        history.append((question, answers[0] or "A red square."))
    clip_prefix = cached.prompt_ids(QUESTIONS[0]).index(cached.model.config.video_token_id) + (
        lengths[0] - len(cached.prompt_ids(QUESTIONS[0])) + 1)  # up to and including the last visual token
    assert reused == [0, clip_prefix, lengths[1]]
    # what stays: the clip's prefix and the latest turn's whole prompt (the second turn's gave way to it)
    assert sorted(len(k.ids) for k in cached.prefix_cache._entries) == [clip_prefix, lengths[2]]


@torch.no_grad()
@pytest.mark.parametrize("rank_by", ["last", "text"])
def test_fastv_on_kept_prefixes_matches_masked_attention_batch_1_and_2(tmp_path, rank_by):
    """At the LM's level, against independent computations: prefixes through layers < K (compute_prefix), then a
    left-padded batch of two prompts with other prefix and question lengths (prefill_after_prefixes); each
    sample's kept set is the top of eager attention's layer K-1 rows, and its logits, prefill and 3 decoded
    tokens, those of the full sequence with the dropped visual keys masked in layers >= K."""
    from test_engine import make_inputs, masked_reference
    from transformers import VideoLlavaForConditionalGeneration

    from videoqa import llm
    from videoqa.llm.prefill import position_ids_from_mask
    from videoqa.llm.prefix_cache import compute_prefix, prefill_after_prefixes
    from videoqa.models.tiny import TinySpec, make_tiny_model
    from videoqa.pruning import keep_count
    from videoqa.pruning.methods.fastv.algorithm import FastVPlan

    path = make_tiny_model(tmp_path / "llama", TinySpec(family="llama"))
    model = VideoLlavaForConditionalGeneration.from_pretrained(path, attn_implementation="sdpa").eval()
    eager = VideoLlavaForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
    k, r = 2, 0.5
    a = make_inputs(model, seed=5)  # 60 tokens, visual 6..45: prefix 46, question 14
    b = tuple(x[:, 3:-9] for x in make_inputs(model, seed=6))  # visual 3..42: prefix 43, question 5
    plan = FastVPlan(k=k, r=r, rank_by=rank_by)
    for samples in ([a], [a, b]):
        n = max(s[0].shape[1] for s in samples)
        pads = [n - s[0].shape[1] for s in samples]  # left padding
        embeds = torch.cat([torch.cat([s[0].new_zeros(1, p, s[0].shape[2]), s[0]], 1)
                            for s, p in zip(samples, pads, strict=True)])
        am = torch.cat([torch.cat([torch.zeros(1, p, dtype=torch.long), s[1]], 1)
                        for s, p in zip(samples, pads, strict=True)])
        vis = torch.cat([torch.cat([torch.zeros(1, p, dtype=torch.bool), s[2]], 1)
                         for s, p in zip(samples, pads, strict=True)])
        pos = position_ids_from_mask(am)
        prefixes = []
        for s in samples:
            length = int(s[2][0].nonzero()[-1]) + 1
            prefixes.append(compute_prefix(model, s[0][:, :length], torch.arange(length)[None], k))
        state = prefill_after_prefixes(model, prefixes, embeds, am, vis, pos, plan)
        step_logits = [state.logits]
        for _ in range(3):
            token = step_logits[-1].argmax(-1)
            step_logits.append(llm.decode_one_token(model, state, model.get_input_embeddings()(token[:, None])))
        for i, (s_embeds, _, s_vis) in enumerate(samples):
            att = eager(inputs_embeds=s_embeds, output_attentions=True).attentions[k - 1][0].mean(0)
            last_vis = int(s_vis[0].nonzero()[-1])
            rows = att[-1:] if rank_by == "last" else att[last_vis + 1:]
            scores = rows.mean(0)[s_vis[0]]
            assert set(state.kept[i].tolist()) == set(torch.topk(scores, keep_count(len(scores), r)).indices.tolist())
            seq, seq_vis = s_embeds, s_vis
            for logits in step_logits:  # the prompt's logits, then each decoded token's
                ref = masked_reference(model, seq, k, state.kept[i], seq_vis)
                torch.testing.assert_close(logits[i], ref[0], rtol=1e-4, atol=1e-4)
                token = logits[i].argmax(-1).reshape(1, 1)
                seq = torch.cat([seq, model.get_input_embeddings()(token)], 1)
                seq_vis = torch.cat([seq_vis, torch.zeros(1, 1, dtype=torch.bool)], 1)


def test_the_e2e_chat_table_reports_identical_answers_and_the_reused_conversation(tiny_model_dir, clips):
    """`videoqa bench e2e`'s chat rows: the same answers with the cache as without; the second turn is served the
    clip's prefix, the third more (the second turn's whole prompt)."""
    from videoqa.bench.e2e import format_chat, measure_chat

    loaded = load_model(str(tiny_model_dir))
    chats = {cached: measure_chat(VideoQA(loaded, max_new_tokens=4, prefix_cache_bytes=None if cached else 0),
                                  [clips[0]]) for cached in (False, True)}
    on = chats[True]
    assert [t["answers"] for t in on] == [t["answers"] for t in chats[False]]
    assert on[0]["reused"] == 0 and 0 < on[1]["reused"] < on[2]["reused"]
    table = format_chat(chats, "test")
    assert table.count("| yes |") == 3 and "| NO |" not in table


def test_kept_set_overlap_counts_equal_sets_and_common_starts():
    from videoqa.bench.e2e import kept_set_overlap

    kept = [[(1, 2, 3), (1, 2, 3), (1, 4, 5), (1, 2, 4)], [(0, 1, 2), (5, 6, 7)]]
    assert kept_set_overlap(kept) == ("1 of 4 questions kept the same set as their clip's first question; the "
                                      "others' sorted kept lists agree with it on their first 0-2 tokens "
                                      "(median 1, of 3)")
