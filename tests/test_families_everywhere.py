"""Today's families everywhere Video-LLaVA goes, with no path of their own: the web chat's model (loaded by the
function `videoqa serve --model DIR` uses) answering as `ask` does, Compare answering with every method as `ask`
does, `videoqa batch --batch-size 2` answering as `videoqa ask`, the frames baseline sampling whole temporal
patches, and Qwen's resolution as the adaptive policy's third knob (docs/qwen-vl.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers.clipgen import write_clip
from videoqa.ui.actions import ChatActions
from videoqa.ui.session import ChatSession, Settings, shown_text

from videoqa.cli import build_parser, main
from videoqa.cli.options import load_qa
from videoqa.models.families import make_tiny
from videoqa.pruning import PruneConfig
from videoqa.pruning.adaptive import frames_wanted
from videoqa.pruning.planner import plan

FAMILIES = ["llava-onevision", "qwen2.5-vl", "qwen3-vl"]
QUESTION = "What colour is the shape?"
FASTV = PruneConfig(method="fastv", r=0.5, params=(("k", 2),))


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, tmp_path_factory):
    """(family, model folder, clip, the web chat's model: `videoqa serve --model DIR`'s loader)."""
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp(request.param)
    model = make_tiny(request.param, folder / "model")
    clip = write_clip(folder / "clip.mp4", n_frames=30, size=(112, 112))
    args = build_parser().parse_args(["serve", "--model", str(model), "--max-new-tokens", "6"])
    return request.param, model, clip, load_qa(args)


def test_web_chat_model_answers_as_ask_does(served, tmp_path):
    family, _, clip, qa = served
    actions = ChatActions(qa, [], tmp_path)
    session = ChatSession()
    actions.load_upload(str(clip), session)
    actions.enqueue(QUESTION, session, "fastv", 2, "0.5", 0, False)
    updates = list(actions.run(session))
    shown = [shown_text(m) for m in session.chat()][1:]
    assert shown[:2] == [QUESTION, qa.ask(clip, QUESTION, prune=FASTV).text]
    assert "turn-results" in shown[2] and "Kept " in shown[2]  # the answer's own results block follows it
    gallery = [u["gallery"] for u in updates if "gallery" in u][-1]
    assert len(gallery["value"] if isinstance(gallery, dict) else gallery) == 8  # a heatmap per sampled frame


@pytest.mark.slow
def test_compare_answers_every_method_as_ask_does(served, tmp_path):
    family, _, clip, qa = served
    actions = ChatActions(qa, [], tmp_path)
    session = ChatSession()
    actions.load_upload(str(clip), session)
    out = list(actions.compare(QUESTION, session, 2, "0.5", 0, False))[-1]
    assert out[0].startswith(f"Compared {len(actions.methods)} methods"), out[0]
    for i, method in enumerate(actions.methods):
        cfg, frames, sampler = actions.config(Settings(method, 2, "0.5", 0, False))
        expected = qa.ask(clip, QUESTION, prune=cfg, frames=frames, sampler=sampler).text or "(empty answer)"
        assert out[1 + 3 * i] == expected, method


@pytest.mark.slow
def test_batch_of_two_on_the_command_line_answers_as_ask(served, tmp_path, capsys):
    family, model, clip, _ = served
    other = write_clip(tmp_path / "other.mp4", n_frames=40, size=(96, 128), fps=8)
    common = ["--model", str(model), "--prune", "fastv", "--r", "0.5", "--max-new-tokens", "4"]
    out = tmp_path / "out.jsonl"
    assert main(["batch", str(clip), str(other), "--question", QUESTION, "--out", str(out), "--batch-size", "2",
                 "--no-progress", *common]) == 0
    records = {Path(r["video"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert len(records) == 2 and all(r["error"] is None for r in records.values())
    for path in (clip, other):
        capsys.readouterr()
        assert main(["ask", str(path), QUESTION, *common, "--json"]) == 0
        alone = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert records[path.name]["answer"] == alone["answer"], family


def test_frames_baseline_samples_whole_temporal_patches(served):
    family, _, clip, qa = served
    for frames, r in ((6, 0.5), (8, 0.75), (8, 0.5)):
        answer = qa.ask(clip, QUESTION, prune=PruneConfig(method="frames", r=r), frames=frames)
        layout = answer.kept.layout
        shown = round(frames * (1 - r))  # the frames R's share of the tokens fills
        assert answer.stats.frames % layout.frames_per_token == 0 and abs(answer.stats.frames - shown) <= 1
        assert layout.n_frames * layout.frames_per_token == answer.stats.frames
        assert answer.kept.n_kept == answer.kept.n_visual  # every token of the frames it sampled


def tight_memory(qa, cfg: PruneConfig, n_text: int, duration: float, wanted: int) -> int | None:
    """The least free memory (of a geometric scan) at which the processor's resolution samples fewer than the
    `wanted` frames but the lowest resolution the family allows keeps them; None without a resolution knob."""
    sizes = qa.family.resolutions(qa.processor)
    if not sizes:
        return None
    for k in range(40, 80):
        free = int(1.3 ** k)
        try:
            full = plan(qa.dims, cfg, n_text, duration, None, qa.max_new_tokens, free, qa.policy).frames
            low = plan(qa.dims_at(sizes[-1]), cfg, n_text, duration, None, qa.max_new_tokens, free, qa.policy).frames
        except Exception:  # not even one frame fits yet
            continue
        if full < wanted <= low:
            return free
    raise AssertionError("no memory size between the resolutions' needs")


def test_resolution_is_lowered_before_frames_are_dropped(served, monkeypatch):
    family, _, clip, qa = served
    monkeypatch.setattr(qa, "policy", replace(qa.policy, reserve_bytes=0, memory_margin=0.0))
    # the decoded frames' bytes would come out of this tiny budget on a CPU: plan with all of it
    monkeypatch.setattr("videoqa.pipeline.shares_host_memory", lambda device_type: False)
    auto = PruneConfig(method="fastv", r="auto")
    cfg, _ = qa._config(auto, None)
    wanted = frames_wanted(3.0, qa.policy)
    free = tight_memory(qa, cfg, qa.text_tokens(QUESTION), 3.0, wanted)
    monkeypatch.setattr(qa, "free_memory", lambda device: 1 << 40)
    roomy = qa.ask(clip, QUESTION, prune=auto)
    assert "lowered" not in roomy.decision.reason and roomy.stats.frames == wanted
    if free is None:  # LLaVA-OneVision's frames are always 384 px: no third knob
        assert family == "llava-onevision" and qa.family.resolutions(qa.processor) == []
        return
    monkeypatch.setattr(qa, "free_memory", lambda device: free)
    tight = qa.ask(clip, QUESTION, prune=auto)
    assert tight.stats.frames == wanted and "lowered" in tight.decision.reason
    full, low = roomy.kept.layout, tight.kept.layout
    assert low.grid * low.n_cols < full.grid * full.n_cols
    if family == "qwen2.5-vl":  # the grid is the processor's own resize at the chosen bound
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

        pixels = int(tight.decision.reason.split("at most ")[1].split(" pixels")[0])
        low_px = qa.processor.video_processor.size["shortest_edge"]
        h, w = smart_resize(112, 112, factor=28, min_pixels=min(low_px, pixels), max_pixels=pixels)
        assert (low.grid, low.n_cols) == (h // 28, w // 28)


def test_qwen_plans_with_the_clips_own_frame_size(tmp_path):
    """A processor allowing huge frames (the published Qwen2.5-VL's 12.8 M pixels: 8,192 tokens a frame at its
    bound) still answers a small clip in a small context: the plan counts the tokens of the clip's own frames, as
    many as the processor gives them."""
    from videoqa.models import qwen_vl
    from videoqa.pipeline import VideoQA

    torch.set_num_threads(1)
    spec = qwen_vl.TinyQwenSpec(family="qwen2.5-vl", max_pixels=12845056, context=1024)
    model = qwen_vl.make_tiny_qwen(tmp_path / "model", spec)
    clip = write_clip(tmp_path / "clip.mp4", n_frames=30, size=(112, 112))
    qa = VideoQA.from_pretrained(str(model), max_new_tokens=2, prefix_cache_bytes=0)
    assert qa.dims.tokens_per_frame * 8 > qa.dims.context  # the processor's bound alone would not fit 8 frames
    answer = qa.ask(clip, QUESTION, prune=PruneConfig(method="none"), frames=8)
    sampled, _ = qa.sample(clip, 8)
    inputs = qwen_vl.processor_inputs(qa.processor, sampled.frames, QUESTION, sampled.info.fps, sampled.indices)
    assert answer.kept.n_visual == int((inputs["input_ids"] == qa.visual_token_id).sum())


def test_ray_actor_answers_a_batch_as_ask_does(served, tmp_path):
    """The Ray back end's actor (called here without a cluster) on one row it decodes itself and one the CPU
    stage decoded: one left-padded batch, each answer equal to `ask` on the same clip."""
    import pickle

    import numpy as np

    from videoqa.batch.ray_backend import _QAActor
    from videoqa.batch.shipped import shipped_rows
    from videoqa.batch.worklist import WorkItem
    from videoqa.pipeline import VideoQA

    _, model, clip, _ = served
    qa = VideoQA.from_spec({"model": str(model), "prune": FASTV.to_dict(), "max_new_tokens": 4,
                            "prefix_cache_bytes": 0})
    other = write_clip(tmp_path / "other.mp4", n_frames=40, size=(96, 128), fps=8)
    decoded, _ = qa.sample(other, 6)
    rows = shipped_rows([WorkItem(key=f"k{i}", video=str(v), question=QUESTION) for i, v in enumerate((clip, other))])
    batch = {**{key: np.array([row[key] for row in rows], dtype=object) for key in rows[0]},
             "clip": np.array([b"", pickle.dumps(decoded)], dtype=object),
             "error": np.array(["", ""], dtype=object), "duration": np.array([None, None], dtype=object)}
    actor = _QAActor.__new__(_QAActor)
    actor.qa, actor.timeout_s, actor.load_s, actor.batch_size = qa, 60, None, 2
    records = [json.loads(r) for r in actor(batch)["record"]]
    assert [r["error"] for r in records] == [None, None]
    assert [r["answer"] for r in records] == [qa.ask(clip, QUESTION).text, qa.ask(decoded, QUESTION).text]
