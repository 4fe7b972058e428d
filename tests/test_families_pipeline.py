"""Today's families (LLaVA-OneVision, Qwen2.5-VL, Qwen3-VL) through the one VideoQA path, on tiny random models of
the real classes saved with save_pretrained and loaded by folder, against transformers' own computations fed by the
family's own processor on the same sampled frames (Qwen: with the frames' real timing):

- the prompt's ids are the processor's (the chat template; Qwen3-VL's timestamps between temporal patches);
- unpruned: our prefill's logits and our answer equal transformers' `generate()`;
- FastV: the kept set is the top of the attention transformers' eager forward pays the visual tokens at layer K-1,
  and the logits equal transformers' forward with the dropped tokens masked out as keys from layer K on (its own
  embeddings, M-RoPE positions and deepstack), K in {1, 2, 3} x R in {.25, .5, .75};
- before the LLM with original positions: the same masked forward from the first layer; on M-RoPE the renumbered
  rule gives the same positions (select.py);
- a left-padded batch of two equals the two single runs; eager attention equals SDPA; streaming's text is the
  answer's.
"""

from __future__ import annotations

import pytest
import torch
from helpers.clipgen import write_clip

from videoqa.models import llava_onevision as ov
from videoqa.models import qwen_vl
from videoqa.models.families import make_tiny
from videoqa.models.reference import forward_with_dropped_keys
from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig, keep_count

FAMILIES = ["llava-onevision", "qwen2.5-vl", "qwen3-vl"]
QUESTION = "What colour is the shape?"
ATOL = 1e-5


class Fam:
    def __init__(self, name: str, folder):
        self.name = name
        self.dir = make_tiny(name, folder / "model")
        self.clip = write_clip(folder / "clip.mp4", n_frames=30, size=(112, 112), fps=10)
        self.other = write_clip(folder / "other.mp4", n_frames=40, size=(96, 128), fps=8)
        self.qa = VideoQA.from_pretrained(str(self.dir), max_new_tokens=8, prefix_cache_bytes=0)
        self.eager = VideoQA.from_pretrained(str(self.dir), attn_implementation="eager", max_new_tokens=8,
                                             prefix_cache_bytes=0)

    def request(self, cfg: PruneConfig, question: str = QUESTION, clip=None, qa=None):
        qa = qa or self.qa
        cfg, max_new = qa._config(cfg, None)
        return qa.prepare(clip or self.clip, question, None, cfg, 8, max_new)

    def prefill(self, requests, qa=None):
        qa = qa or self.qa
        with torch.inference_mode():
            return qa.prefill(requests, qa.collate(requests))

    def reference_inputs(self, question: str = QUESTION, clip=None):
        """The family's own processor on the frames the pipeline sampled."""
        sampled, _ = self.qa.sample(clip or self.clip, 8)
        if self.name == "llava-onevision":
            return ov.processor_inputs(self.qa.processor, sampled.frames, question)
        return qwen_vl.processor_inputs(self.qa.processor, sampled.frames, question, sampled.info.fps,
                                        sampled.indices)


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request, tmp_path_factory):
    torch.set_num_threads(1)
    return Fam(request.param, tmp_path_factory.mktemp(request.param))


def test_prompt_ids_are_the_processors(fam):
    req = fam.request(PruneConfig(method="none"))
    inputs = fam.reference_inputs()
    assert req.ids.tolist() == inputs["input_ids"][0].tolist()


@torch.no_grad()
def test_unpruned_answer_and_logits_equal_transformers_generate(fam):
    inputs = fam.reference_inputs()
    ref = fam.qa.model.generate(**inputs, max_new_tokens=8, do_sample=False, output_logits=True,
                                return_dict_in_generate=True)
    state = fam.prefill([fam.request(PruneConfig(method="none"))])
    delta = (state.logits[0] - ref.logits[0][0].float()).abs().max()
    assert delta < ATOL, delta
    expected = fam.qa.processor.tokenizer.decode(ref.sequences[0, inputs["input_ids"].shape[1]:],
                                                 skip_special_tokens=True).strip()
    assert fam.qa.ask(fam.clip, QUESTION, prune=PruneConfig(method="none"), frames=8).text == expected


@torch.no_grad()
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("r", [0.25, 0.5, 0.75])
def test_fastv_kept_set_and_logits_equal_masked_reference(fam, k, r):
    inputs = fam.reference_inputs()
    vis = inputs["input_ids"][0] == fam.qa.visual_token_id
    att = fam.eager.model(**inputs, output_attentions=True, use_cache=False).attentions[k - 1][0]  # [H, n, n]
    scores = att.mean(0)[-1][vis]
    expected = set(torch.topk(scores, keep_count(len(scores), r)).indices.tolist())
    state = fam.prefill([fam.request(PruneConfig(method="fastv", r=r, params=(("k", k),)))])
    assert set(state.kept[0].tolist()) == expected
    dropped = vis.clone()
    dropped[vis.nonzero().squeeze(-1)[state.kept[0]]] = False
    delta = (state.logits[0] - forward_with_dropped_keys(fam.qa.model, inputs, k, dropped)).abs().max()
    assert delta < ATOL, delta


@torch.no_grad()
def test_before_llm_with_original_positions_equals_masking_the_dropped_tokens(fam):
    """Dropping tokens before the LLM, each kept one at its unpruned position, is FastV at K=0: transformers'
    forward on the whole prompt with the dropped tokens masked out as keys in every layer. On M-RoPE the
    renumbered rule recomputes the same ids (get_rope_index on the kept tokens' grid cells)."""
    inputs = fam.reference_inputs()
    vis = inputs["input_ids"][0] == fam.qa.visual_token_id
    rules = [True] if fam.name == "llava-onevision" else [True, False]
    for keep_positions in rules:
        req = fam.request(PruneConfig(method="random", r=0.6, params=(("keep_positions", keep_positions),)))
        state = fam.prefill([req])
        dropped = vis.clone()
        dropped[vis.nonzero().squeeze(-1)[torch.as_tensor(req.kept)]] = False
        ref = forward_with_dropped_keys(fam.qa.model, inputs, 0, dropped)
        assert (state.logits[0] - ref).abs().max() < ATOL, keep_positions


@torch.no_grad()
@pytest.mark.parametrize("method", ["none", "fastv", "vispruner"])
def test_padded_batch_of_two_equals_single_runs(fam, method):
    cfg = PruneConfig(method=method, r=0.5)
    a = fam.request(cfg, QUESTION, fam.clip)
    b = fam.request(cfg, "Which way does the red circle move in this video?", fam.other)
    assert len(a.ids) != len(b.ids)  # one of them is left-padded in the batch
    batch = fam.prefill([a, b])
    for i, req in enumerate((a, b)):
        single = fam.prefill([req])
        assert (batch.logits[i] - single.logits[0]).abs().max() < ATOL
    items = [(fam.clip, QUESTION), (fam.other, "Which way does the red circle move in this video?")]
    answers = fam.qa.ask_batch(items, prune=cfg, frames=8)
    for (clip, question), answer in zip(items, answers, strict=True):
        alone = fam.qa.ask(clip, question, prune=cfg, frames=8)
        assert answer.text == alone.text and answer.kept.kept == alone.kept.kept


@torch.no_grad()
@pytest.mark.parametrize("method", ["none", "fastv"])
def test_eager_attention_equals_sdpa(fam, method):
    cfg = PruneConfig(method=method, r=0.5)
    sdpa = fam.prefill([fam.request(cfg)])
    eager = fam.prefill([fam.request(cfg, qa=fam.eager)], qa=fam.eager)
    assert (sdpa.logits - eager.logits).abs().max() < ATOL
    a, b = (qa.ask(fam.clip, QUESTION, prune=cfg, frames=8) for qa in (fam.qa, fam.eager))
    assert a.text == b.text and a.kept.kept == b.kept.kept


def test_streaming_yields_the_answers_text(fam):
    items = list(fam.qa.stream(fam.clip, QUESTION, prune=PruneConfig(method="fastv", r=0.5), frames=8))
    *deltas, answer = items
    streamed = "".join(deltas).strip()
    assert all(isinstance(d, str) for d in deltas) and answer.text.startswith(streamed)
    if "\ufffd" not in answer.text:  # a random model's broken UTF-8 is held back until it completes
        assert streamed == answer.text
    assert answer.text == fam.qa.ask(fam.clip, QUESTION, prune=PruneConfig(method="fastv", r=0.5), frames=8).text
