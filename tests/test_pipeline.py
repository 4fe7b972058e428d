"""The pipeline against direct transformers calls, its cache, its errors and its determinism."""

from __future__ import annotations

import dataclasses
import itertools
import math
import resource
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from helpers.clipgen import write_clip

from videoqa import llm
from videoqa.errors import InputError, ModelLoadError, VideoError
from videoqa.model import NAMED_MODELS, LoadedModel, packaged_path, resolve_model
from videoqa.models import VideoLlava
from videoqa.models.tiny import EOS_ID, TinySpec, make_tiny_model
from videoqa.pipeline import CACHE_SIZE, TextDelta, VideoQA
from videoqa.pruning import PruneConfig, keep_count
from videoqa.pruning.adaptive import AdaptivePolicy
from videoqa.request import positions
from videoqa.result import Answer
from videoqa.video import sample_frames


@pytest.fixture(scope="module")
def clip_path(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("clips") / "index.mp4", n_frames=24)


def test_prompt_template_and_history():
    assert VideoLlava().prompt("What is it?") == "USER: <video>\nWhat is it? ASSISTANT:"
    assert VideoLlava().prompt("And then?", [("What is it?", "A cat.")]) == (
        "USER: <video>\nWhat is it? ASSISTANT: A cat.</s>USER: And then? ASSISTANT:")


def test_answer_equals_direct_generate(tiny_qa, clip_path):
    """No pruning: our prefill/decode loop gives exactly transformers' own generate()."""
    question = "What colour is the square?"
    answer = tiny_qa.ask(clip_path, question, prune=PruneConfig(method="none"), max_new_tokens=8)
    frames = sample_frames(clip_path, 8).frames
    proc = tiny_qa.processor
    prompt = VideoLlava().prompt(question, template=tiny_qa.prompt)
    inputs = proc(text=[prompt], videos=[list(frames)], return_tensors="pt")
    out = tiny_qa.model.generate(**inputs, max_new_tokens=8, do_sample=False)
    new = out[0, inputs["input_ids"].shape[1]:]
    expected = proc.tokenizer.decode(new, skip_special_tokens=True).strip()
    assert answer.text == expected
    assert answer.stats.prompt_tokens == inputs["input_ids"].shape[1]
    assert answer.kept.n_kept == answer.kept.n_visual == 8 * 65


def test_fastv_through_the_pipeline_reports_what_it_kept(tiny_qa, clip_path):
    """FastV through the pipeline keeps round(n*(1-R)) tokens and reports them against the layout."""
    answer = tiny_qa.ask(clip_path, "Which way does it move?", prune=PruneConfig(method="fastv", k=2, r=0.75))
    assert answer.kept.n_kept == keep_count(520, 0.75)
    assert answer.kept.layer == 2 and answer.kept.method == "fastv"
    assert sorted(answer.kept.kept) == answer.kept.kept
    assert sum(answer.kept.per_frame()) == answer.kept.n_kept
    assert 0 < answer.flops.ratio < 1
    assert answer.stats.kept_visual_tokens == answer.kept.n_kept


def test_follow_up_questions_reuse_the_encoding(tiny_model_dir, clip_path):
    qa = VideoQA.from_pretrained(str(tiny_model_dir), max_new_tokens=4)
    first = qa.ask(clip_path, "What is it?")
    assert qa.encode_count == 1 and not first.stats.encode_cached
    second = qa.ask(clip_path, "And then?", history=[("What is it?", first.text)])
    assert qa.encode_count == 1 and second.stats.encode_cached and second.stats.t_encode == 0.0
    assert second.stats.prompt_tokens > first.stats.prompt_tokens  # history is in the prompt


def test_same_input_same_answer_and_kept_tokens(tiny_qa, clip_path):
    for method in ("fastv", "vispruner", "random"):
        cfg = PruneConfig(method=method, r=0.5)
        a, b = (tiny_qa.ask(clip_path, "What is it?", prune=cfg) for _ in range(2))
        assert a.text == b.text and a.kept.kept == b.kept.kept


def test_stream_yields_text_then_answer(tiny_qa, clip_path):
    items = list(tiny_qa.stream(clip_path, "What is it?"))
    answer = items[-1]
    assert all(isinstance(x, str) for x in items[:-1])
    assert "".join(items[:-1]).strip() == answer.text


def test_auto_r_gives_a_decision(tiny_qa, clip_path):
    answer = tiny_qa.ask(clip_path, "What is it?", prune=PruneConfig(method="fastv", r="auto"))
    assert answer.decision is not None and answer.decision.frames == 8
    assert answer.kept.n_kept == answer.decision.kept


def test_before_llm_methods_shorten_the_prompt(tiny_qa, clip_path):
    none = tiny_qa.ask(clip_path, "What is it?", prune=PruneConfig(method="none"))
    for method in ("vispruner", "random"):
        a = tiny_qa.ask(clip_path, "What is it?", prune=PruneConfig(method=method, r=0.5))
        assert a.kept.layer == 0
        assert a.stats.prompt_tokens == none.stats.prompt_tokens - (520 - keep_count(520, 0.5))


def test_question_too_long_for_the_context(tiny_qa, clip_path):
    with pytest.raises(InputError, match="context"):
        tiny_qa.ask(clip_path, "why " * 5000)


def test_empty_question_and_bad_options(tiny_qa, clip_path):
    with pytest.raises(InputError, match="empty"):
        tiny_qa.ask(clip_path, "   ")
    with pytest.raises(InputError, match="K="):
        tiny_qa.ask(clip_path, "What?", prune=PruneConfig(method="fastv", k=9, r=0.5))


def test_bad_video_is_a_video_error(tiny_qa, tmp_path):
    bad = tmp_path / "notes.mp4"
    bad.write_text("this is not a video")
    with pytest.raises(VideoError, match="notes.mp4"):
        tiny_qa.ask(bad, "What is it?", prune=PruneConfig(method="none"))


def test_frames_array_input_via_clip(tiny_qa, clip_path):
    clip = sample_frames(clip_path, 8)
    a = tiny_qa.ask(clip, "What is it?", prune=PruneConfig(method="none"))
    b = tiny_qa.ask(clip_path, "What is it?", prune=PruneConfig(method="none"))
    assert a.text == b.text
    assert np.array_equal(a.clip.frames, b.clip.frames)
    assert a.kept.kept == b.kept.kept and a.stats.t_sample == 0.0  # a Clip is not decoded again


@pytest.mark.parametrize("method", ["fastv", "vispruner", "none"])
def test_batch_of_two_equals_each_alone(tiny_qa, clip_path, tmp_path, method):
    """Left-padded batch with per-sample ranking: same answers and same kept tokens as single runs."""
    other = write_clip(tmp_path / "other.avi", n_frames=13, size=(80, 60), fmt="avi-mpeg4")
    items = [(clip_path, "What colour is the square in this video?"), (other, "Where?")]
    cfg = PruneConfig(method=method, k=2, r=0.5)
    batch = tiny_qa.ask_batch(items, prune=cfg, max_new_tokens=6)
    for (video, question), b in zip(items, batch, strict=True):
        alone = tiny_qa.ask(video, question, prune=cfg, max_new_tokens=6)
        assert b.text == alone.text
        assert b.kept.kept == alone.kept.kept
        assert b.kept.offset == alone.kept.offset
    assert batch[0].stats.prompt_tokens != batch[1].stats.prompt_tokens  # the batch really was padded


def test_keep_positions_gives_kept_tokens_their_unpruned_positions(tiny_qa, clip_path):
    cfg = PruneConfig(method="random", r=0.5, keep_positions=True)
    full = tiny_qa.prepare(clip_path, "What is it?", None, PruneConfig(method="none"), None, 4)
    req = tiny_qa.prepare(clip_path, "What is it?", None, cfg, None, 4)
    vis = req.ids == tiny_qa.model.config.video_token_id
    pos = positions(req, vis)
    full_vis = (full.ids == tiny_qa.model.config.video_token_id).nonzero().squeeze(-1)
    assert pos[vis].tolist() == full_vis[torch.as_tensor(req.kept)].tolist()
    assert pos[-1] == len(full.ids) - 1  # the text after the video sits where it did unpruned
    contiguous = positions(tiny_qa.prepare(clip_path, "What is it?", None, PruneConfig(method="random", r=0.5),
                                                   None, 4), vis)
    assert contiguous.tolist() == list(range(len(req.ids)))


def test_prune_config_is_immutable_and_validate_returns_a_checked_copy(tiny_qa, clip_path):
    cfg = PruneConfig(method="fastv", k=2, r="0.5")
    checked = cfg.validate(n_layers=4)
    assert checked.r == 0.5 and cfg.r == "0.5"  # the caller's object is left as it was
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.r = 0.25
    assert dataclasses.replace(checked, r=0.25).r == 0.25 and checked.r == 0.5
    answer = tiny_qa.ask(clip_path, "What is it?", prune=cfg, max_new_tokens=2)
    assert answer.prune == checked and cfg.r == "0.5"


def test_generate_yields_text_deltas_and_returns_the_answers(tiny_qa, clip_path):
    """One batch of two: the deltas of each sample add up to its answer, and the answers equal asking alone."""
    cfg = PruneConfig(method="fastv", k=2, r=0.5)
    questions = ["What is it?", "Which way does it move?"]
    events = tiny_qa.generate([tiny_qa.prepare(clip_path, q, None, cfg, None, 6) for q in questions])
    texts = ["", ""]
    while True:
        try:
            event = next(events)
        except StopIteration as finished:
            answers = finished.value
            break
        assert isinstance(event, TextDelta)
        texts[event.index] += event.text
    assert [t.strip() for t in texts] == [a.text for a in answers]
    alone = [tiny_qa.ask(clip_path, q, prune=cfg, max_new_tokens=6) for q in questions]
    assert [a.text for a in answers] == [a.text for a in alone]
    assert [a.kept.kept for a in answers] == [a.kept.kept for a in alone]


def test_named_models_are_found_in_the_installed_package(monkeypatch):
    demo = resolve_model("demo")
    assert demo == str(packaged_path("demo-model")) and (packaged_path("demo-model") / "config.json").is_file()
    monkeypatch.setitem(NAMED_MODELS, "unbuilt", ("no-such-model", "bash scripts/train_unbuilt.sh"))
    with pytest.raises(ModelLoadError, match="build it with `bash scripts/train_unbuilt.sh`"):
        resolve_model("unbuilt")
    assert resolve_model("org/some-model") == "org/some-model"  # a hub id passes through


def qa_sharing(tiny_qa, **kwargs) -> VideoQA:
    """Another VideoQA on the session's tiny model (no reload), with injected memory/clock sources."""
    loaded = LoadedModel(tiny_qa.model, tiny_qa.processor, tiny_qa.device, tiny_qa.dtype, tiny_qa.name)
    return VideoQA(loaded, prune=tiny_qa.prune, max_new_tokens=8, **kwargs)


def test_auto_r_in_a_batch_decides_with_the_memory_the_batch_shares(tiny_qa, clip_path):
    """Alone, the request fits at the paper's R; two in one batch share the same free memory, so each plans
    with half of it and gives something up (a higher R, or, as at these shapes, fewer frames: with few layers
    the full-length activations before layer K are the peak, which no R reduces), and together they fit."""
    auto = PruneConfig(method="fastv", k=2, r="auto")
    ample = qa_sharing(tiny_qa, free_memory=lambda device: 64 << 30).ask(clip_path, "What is it?", prune=auto)
    policy = AdaptivePolicy(new_tokens=8)
    usable = int(1.5 * ample.decision.memory["need_bytes"])  # room for 1.5 requests at R = 0.5
    free = math.ceil((usable + policy.reserve_bytes) / (1 - policy.memory_margin))
    qa = qa_sharing(tiny_qa, free_memory=lambda device: free)
    alone = qa.ask(clip_path, "What is it?", prune=auto)
    assert alone.decision.r == ample.decision.r == 0.5 and alone.decision.bound == "default"
    batch = qa.ask_batch([(clip_path, "What is it?"), (clip_path, "What is it?")], prune=auto)
    for answer in batch:
        d = answer.decision
        assert d.bound == "memory" and d.memory["share"] == 2
        assert (d.frames, d.r) != (alone.decision.frames, alone.decision.r)
    assert sum(a.decision.memory["need_bytes"] for a in batch) <= usable


def test_room_for_the_answer_is_counted_once(tiny_qa, clip_path):
    answer = tiny_qa.ask(clip_path, "What is it?", prune=PruneConfig(method="fastv", k=2, r="auto"),
                         max_new_tokens=8)
    mem, s = answer.decision.memory, answer.stats
    assert mem["kv_bytes_full"] == mem["kv_bytes_per_token"] * (s.prompt_tokens + 8)


def test_context_check_with_keep_positions_uses_the_last_position(tiny_qa, clip_path):
    """Kept tokens keep their unpruned positions, so the last position is that of the unpruned prompt."""
    none = tiny_qa.prepare(clip_path, "why", None, PruneConfig(method="none"), None, 4)
    per_word = len(tiny_qa.prepare(clip_path, "why why", None, PruneConfig(method="none"), None, 4).ids) - len(none.ids)
    words = 1 + (tiny_qa.dims.context - 4 - len(none.ids)) // per_word + 1  # unpruned: just over the context
    question = " ".join(["why"] * words)
    cfg = PruneConfig(method="random", r=0.5)
    assert len(tiny_qa.prepare(clip_path, question, None, cfg, None, 4).ids) + 4 <= tiny_qa.dims.context
    with pytest.raises(InputError, match="context"):
        tiny_qa.prepare(clip_path, question, None, dataclasses.replace(cfg, keep_positions=True), None, 4)


def test_every_eos_id_stops_generation(tmp_path, clip_path):
    """A Qwen2-style generation config lists several EOS ids: the second one stops decoding too."""
    qa = VideoQA.from_pretrained(str(make_tiny_model(tmp_path / "qwen2", TinySpec(family="qwen2"))),
                                 prune=PruneConfig(method="none"), max_new_tokens=6)
    reqs = [qa.prepare(clip_path, "What is it?", None, qa.prune, None, 6)]
    tokens = [int(t) for t in llm.decode_n_tokens(qa.model, qa.prefill(reqs, qa.collate(reqs)), 6, None)]
    stop = tokens[2]
    first = tokens.index(stop)
    qa.model.generation_config.eos_token_id = [EOS_ID, stop]
    answer = qa.ask(clip_path, "What is it?")
    assert answer.stats.new_tokens == first
    assert answer.text == qa.processor.tokenizer.decode(tokens[:first], skip_special_tokens=True).strip()


def test_timings_are_read_through_the_device_clock(tiny_qa, clip_path):
    """Every timing is read through the pipeline's clock (which synchronises CUDA first): with a clock that
    ticks once per reading, each is a whole number of readings."""
    ticks = itertools.count()
    qa = qa_sharing(tiny_qa, clock=lambda: float(next(ticks)))
    s = qa.ask(clip_path, "What is it?", prune=PruneConfig(method="fastv", k=2, r=0.5)).stats
    for t in (s.t_sample, s.t_encode, s.t_rank, s.t_prefill, s.t_generate, s.t_total):
        assert t == int(t) and t >= 0
    assert 1 <= s.t_rank < s.t_prefill < s.t_total and s.t_generate >= 1


def test_peak_memory_is_this_calls_not_the_process_lifetime(tiny_qa, clip_path):
    """A bigger earlier allocation (freed since) must not show up in a later answer's peak."""
    big = np.ones(256 << 20, dtype=np.uint8)  # 256 MiB, touched: the process high-water mark rises
    del big
    answer = tiny_qa.ask(clip_path, "What is it?", max_new_tokens=2)
    lifetime = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert answer.stats.peak_memory_kind == "cpu-rss-sampled"
    assert 0 < answer.stats.peak_memory_bytes < lifetime - (128 << 20)


def test_clip_cache_keeps_the_recently_used(tiny_qa, clip_path):
    qa = qa_sharing(tiny_qa)
    first, _ = qa.sample(clip_path, 1)
    for n in range(2, CACHE_SIZE + 1):
        qa.sample(clip_path, n)
    assert qa.sample(clip_path, 1)[0] is first  # used again: now the most recent
    qa.sample(clip_path, CACHE_SIZE + 1)  # evicts the least recently used (2 frames), not the oldest
    assert qa.sample(clip_path, 1)[0] is first


def test_two_threads_asking_at_once_get_the_sequential_answers(tiny_qa, clip_path, tmp_path):
    """Calls from two threads run one after the other (the clock's readings come in one block per call), give
    the answers sequential calls give, and a clip both ask about at once is encoded once."""
    other = write_clip(tmp_path / "other.mp4", n_frames=13, size=(80, 60))
    jobs = [(clip_path, "What is it?", PruneConfig(method="fastv", k=2, r=0.5)),
            (clip_path, "Which way does it move?", PruneConfig(method="vispruner", r=0.75)),
            (other, "What colour is it?", PruneConfig(method="none"))]
    qa = qa_sharing(tiny_qa)
    expected = [(a.text, a.kept.kept) for a in (qa.ask(v, q, prune=c) for v, q, c in jobs)]
    readers: list[int] = []

    def clock() -> float:
        readers.append(threading.get_ident())
        return time.perf_counter()

    qa = qa_sharing(tiny_qa, clock=clock)  # fresh caches
    start = threading.Barrier(2)

    def ask(job):
        if job is jobs[0] or job is jobs[1]:
            start.wait()  # the first two calls (same clip, not yet encoded) start together
        return qa.ask(job[0], job[1], prune=job[2])

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(ask, jobs))
    assert [(a.text, a.kept.kept) for a in answers] == expected
    assert qa.encode_count == 2  # each clip once
    switches = sum(a != b for a, b in itertools.pairwise(readers))
    assert switches <= len(jobs) - 1


def test_a_stream_may_be_advanced_from_different_threads(tiny_qa, clip_path):
    """As Gradio does with a streaming handler: each step on whichever worker thread is free."""
    qa = qa_sharing(tiny_qa)
    stream = qa.stream(clip_path, "What is it?", prune=PruneConfig(method="none"))
    with ThreadPoolExecutor(1) as first:
        head = first.submit(next, stream).result()
    with ThreadPoolExecutor(1) as second:
        rest = second.submit(list, stream).result()
    assert isinstance(rest[-1], Answer) and "".join([head, *rest[:-1]]).strip() == rest[-1].text
    assert qa.ask(clip_path, "What is it?", prune=PruneConfig(method="none")).text == rest[-1].text  # released


@pytest.mark.parametrize("cfg", [PruneConfig(method="none"), PruneConfig(method="fastvid", r=0.5)],
                         ids=["none", "fastvid-original-positions"])
@pytest.mark.slow
def test_answer_cap_larger_than_the_context_is_capped_by_it(tiny_qa, clip_path, cfg):
    """The official protocol asks for 1024 new tokens; a model whose context cannot hold that many after
    the prompt still answers, decoding at most to the context's end, and says what cap it ran under. Tokens
    pruned before the LLM with their original positions still use up positions."""
    short = tiny_qa.ask(clip_path, "What is it?", prune=cfg, max_new_tokens=3)
    assert (short.stats.max_new_tokens, short.stats.context_capped) == (3, False)
    # As many frames as leave the usual answer room (64 tokens), so the context ends soon after it.
    n_text, context = tiny_qa.text_tokens("What is it?"), tiny_qa.dims.context
    frames = (context - n_text - 64) // tiny_qa.dims.tokens_per_frame
    answer = tiny_qa.ask(clip_path, "What is it?", prune=cfg, max_new_tokens=10**6, frames=frames)
    s = answer.stats
    assert s.frames == frames  # the huge cap did not cost frames
    assert s.context_capped
    assert s.max_new_tokens == context - s.prompt_tokens - (s.visual_tokens - s.kept_visual_tokens)
    assert answer.stats.new_tokens <= answer.stats.max_new_tokens
    at_end = answer.stats.new_tokens == answer.stats.max_new_tokens
    assert at_end == any("end of the model's context" in w for w in answer.warnings)
    assert answer.to_dict()["stats"]["max_new_tokens"] == answer.stats.max_new_tokens


def test_planning_reserves_the_usual_answer_room_whatever_the_cap(tiny_qa):
    """Callers that plan before decoding (the Ray actors) get the frames `prepare` will use: a 1024-token cap
    does not take frames away from a long clip whose frame count the context bounds."""
    auto = PruneConfig(method="fastv", k=2, r="auto")
    n_text = tiny_qa.text_tokens("What is it?")
    usual = tiny_qa.plan(600.0, n_text, auto, 100, 64, free_bytes=2**40)  # 100 frames asked: the context caps
    official = tiny_qa.plan(600.0, n_text, auto, 100, 1024, free_bytes=2**40)
    assert (official.frames, official.r) == (usual.frames, usual.r)
    assert usual.frames == (tiny_qa.dims.context - n_text - 64) // tiny_qa.dims.tokens_per_frame


def test_a_long_history_drops_its_oldest_turns_not_the_frames(short_context_qa, tmp_path):
    """Issue 22 item 3: a conversation longer than the context keeps the planned frames; the model sees the
    latest turns that fit, and the Answer says how many it did not see."""
    from helpers.clipgen import write_clip

    from videoqa.pruning import PruneConfig

    clip = write_clip(tmp_path / "talk.mp4", n_frames=20, size=(64, 64))
    history = [(f"Question number {i} about the shape?", f"It is answer {i}, blue and moving.") for i in range(40)]
    for cfg in (PruneConfig("fastv", 2, 0.5), PruneConfig("fastv", 2, "auto")):
        short = short_context_qa.ask(clip, "What colour?", history=history[-1:], prune=cfg)
        answer = short_context_qa.ask(clip, "What colour?", history=history, prune=cfg)
        assert short.stats.history_dropped == 0
        assert answer.stats.frames == short.stats.frames  # the frames planned without the old turns
        dropped = answer.stats.history_dropped
        assert 0 < dropped < len(history)
        # Exactly what the model gets when it is given only the turns it kept, and one more would not fit.
        kept = short_context_qa.ask(clip, "What colour?", history=history[dropped:], prune=cfg)
        assert kept.stats.history_dropped == 0 and kept.text == answer.text
        assert kept.stats.prompt_tokens == answer.stats.prompt_tokens
        one_more = short_context_qa.ask(clip, "What colour?", history=history[dropped - 1:], prune=cfg)
        assert one_more.stats.history_dropped == 1
        assert answer.to_dict()["stats"]["history_dropped"] == dropped


def test_cancel_stops_decoding_between_frames(tiny_qa, tmp_path):
    """Issue 22 item 7: a cancel check is asked between decoded frames; True stops before the clip is encoded."""
    from helpers.clipgen import write_clip

    from videoqa.errors import Cancelled

    clip = write_clip(tmp_path / "long.mp4", n_frames=120, size=(64, 64))
    asked = []

    def cancel() -> bool:
        # the questions asked between decoded frames (the index pass before them asks too, issue 37)
        if sys._getframe(1).f_code.co_name == "_frames":
            asked.append(1)
        return len(asked) > 3  # stop at the fourth check

    before = tiny_qa.encode_count
    with pytest.raises(Cancelled, match="stopped while decoding frames"):
        list(tiny_qa.stream(clip, "What is it?", cancel=cancel))
    assert len(asked) == 4 and tiny_qa.encode_count == before  # stopped at once, nothing encoded
    assert tiny_qa.ask(clip, "What is it?").stats.frames == 8  # the pipeline is free again


def test_the_stats_line_shows_r_as_set(tiny_qa, clip_path):
    """R=0.999 is not rounded to 1.00 in the stats line (the web chat shows R the same way)."""
    answer = tiny_qa.ask(clip_path, "What is moving?", prune=PruneConfig(method="fastv", k=1, r=0.999))
    assert "R=0.999 " in answer.summary()
    answer = tiny_qa.ask(clip_path, "What is moving?", prune=PruneConfig(method="fastv", k=1, r=0.5))
    assert "R=0.50 " in answer.summary()
