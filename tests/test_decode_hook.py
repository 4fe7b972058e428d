"""The in-LLM hook's decode-time half: a plan's `after_token` may drop KV-cache entries while decoding (as
KV-cache methods such as DyCoke's do). Here one hides every visual token after the first decoded token; the
next logits equal transformers' own decoder over the whole sequence with that token's row masked the same way."""

from __future__ import annotations

import torch
from helpers.masked_reference import eager_prompt

from videoqa import llm
from videoqa.pruning.hook import DecodeView, LayerKeep, LayerView

N, VIS = 40, slice(4, 30)


class HideVisualAfterFirstToken:
    layers = (1,)

    def at_layer(self, view: LayerView) -> LayerKeep:  # keep every token: only decoding changes anything
        return LayerKeep([torch.arange(n) for n in view.n_visual])

    def after_token(self, view: DecodeView) -> None:
        if view.step == 1:
            for mask in view.key_masks:
                mask[:, VIS] = False


@torch.no_grad()
def test_after_token_hides_cache_entries_like_a_masked_forward(tiny_model_dir):
    model, embeds, vis = eager_prompt(tiny_model_dir, N, VIS, seed=0)
    state = llm.prefill(model, embeds, torch.ones(1, N, dtype=torch.long), vis, HideVisualAfterFirstToken())
    embed = model.get_input_embeddings()
    t1 = embed(state.logits.argmax(-1)[:, None])
    t2 = embed(llm.decode_one_token(model, state, t1).argmax(-1)[:, None])  # after it, the hook hides the video
    ours = llm.decode_one_token(model, state, t2)

    seq = torch.cat([embeds, t1, t2], dim=1)
    n = seq.shape[1]
    allowed = torch.ones(n, n).tril().bool()
    allowed[n - 1, VIS] = False  # t2's query no longer sees the visual keys
    mask = torch.zeros(n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    dec = model.model.language_model
    h = dec(inputs_embeds=seq, attention_mask=mask, position_ids=torch.arange(n)[None]).last_hidden_state
    ref = model.lm_head(h)[:, -1].float()
    assert torch.allclose(ours, ref, atol=1e-4), (ours - ref).abs().max()
    unhidden = model.lm_head(dec(inputs_embeds=seq, position_ids=torch.arange(n)[None]).last_hidden_state)[:, -1]
    assert not torch.allclose(ours, unhidden.float(), atol=1e-4)  # the hook changed something
