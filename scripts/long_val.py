"""Validation of scripts/train_long_frozen_tower.py on cached tower features: greedy answers as the pipeline gives
them (checked against the saved model by the recipe's forward check), and the counterfactual on erased clips."""

from __future__ import annotations

import time

import numpy as np
import torch

from scripts import train_demo as td
from videoqa.models.tiny import EOS_ID, VIDEO_ID
from videoqa.synth import long as synth_long
from videoqa.synth import short as synth


def forward(model, ids: torch.Tensor, feats: list[torch.Tensor]) -> torch.Tensor:
    """Logits of right-padded `ids` whose video slots take the projected cached features, in order."""
    emb = model.model.language_model.embed_tokens(ids)
    vis = model.model.multi_modal_projector(torch.cat([f.flatten(0, 1) for f in feats]).float())
    emb = emb.masked_scatter((ids == VIDEO_ID)[..., None], vis.to(emb.dtype))
    return model.lm_head(model.model.language_model(inputs_embeds=emb).last_hidden_state)


@torch.no_grad()
def greedy(model, tok, question: str, feats: torch.Tensor, tpf: int, max_new: int = 3) -> str:
    """The model's greedy answer to one question about cached frame features (as the pipeline's prompt)."""
    p = [tok.bos_token_id] + td.encode(tok, td.prompt(question, True))
    v = p.index(VIDEO_ID)
    ids = p[:v] + [VIDEO_ID] * (len(feats) * tpf) + p[v + 1 :]
    new = []
    for _ in range(max_new):
        nxt = int(forward(model, torch.tensor([ids + new]), [feats])[0, -1].argmax())
        if nxt == EOS_ID:
            break
        new.append(nxt)
    return td.normalise(tok.decode(new))


def evaluate(model, tok, tpf: int, val: dict, frame_counts: list[int]) -> dict:
    """Validation: short clips at 8 frames; long clips per frame count, with the counterfactual on event
    questions (right with the event and changed without it), split by whether the frames show the event."""
    model.eval()
    t0 = time.time()
    res = {"short@8": {}}
    for scene, fe in zip(val["short"], val["short_feats"], strict=True):
        rng = np.random.default_rng([0, 99, int(scene.name.split("_")[-1])])
        for q, ans, t in synth.questions(scene, rng):
            res["short@8"].setdefault(t, []).append(greedy(model, tok, q, fe, tpf) == ans)
    for f in frame_counts:
        r = res[f"long@{f}"] = {}
        for scene, fe, fe0 in zip(val["long"], val["feats"], val["erased"], strict=True):
            idx = synth_long.sample_indices(scene.n_frames, f)
            shown = synth_long.shows(scene, idx)
            for q, ans, t in synth_long.questions(scene, synth_long.question_rng(scene, 0)):
                got = greedy(model, tok, q, fe[idx], tpf)
                if t not in synth_long.KIND_TYPES[scene.kind]:
                    r.setdefault(t, []).append(got == ans)
                    continue
                r.setdefault("event_shown" if shown else "event_hidden", []).append(got == ans)
                if shown:
                    r.setdefault("reads", []).append(got == ans and greedy(model, tok, q, fe0[idx], tpf) != got)
    model.train()
    out = {k: {t: float(np.mean(v)) for t, v in r.items()} for k, r in res.items()}
    out["seconds"] = time.time() - t0
    return out


def score(ev: dict) -> float:
    """Model selection: short accuracy + per count, direction and reading the event."""
    s = np.mean(list(ev["short@8"].values()))
    for k, r in ev.items():
        if k.startswith("long@"):
            s += r.get("direction", 0) + r.get("reads", 0) + r.get("event_shown", 0)
    return float(s)
