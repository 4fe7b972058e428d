"""Train samples/demo-long-model: the demo Video-LLaVA grown to 8 LLM layers and a 2048-token context,
fine-tuned on long clips with brief events (videoqa/synth/long.py) at 8-31 frames, mixed with the short
clips of videoqa/synth/short.py at 8 frames, plus an image-level objective on the vision tower's [CLS].

Command for the shipped model (CPU, 1 thread; all settings are the LongArgs defaults):

    OMP_NUM_THREADS=1 python scripts/train_long.py

Warm start: tokenizer, processor, vision tower, projector and the 4 LLM layers come from
samples/demo-model; 4 more decoder layers are appended, initialised as the identity (o_proj and
down_proj zero, so at step 0 the grown model computes exactly the demo's function), and
max_position_embeddings becomes 2048 (RoPE: nothing learned depends on it). 8 layers because FastV's
first K layers run at full length and with d=128 attention's n^2 term dominates: with 4 layers FastV
at K=2 cannot show 16 frames for the FLOPs of 8 unpruned frames; with 8 layers it can at R >= 0.76.
New layers go after the old ones so FastV's ranking layers (the first K) start as the demo's.

Data (computed once, cached float16 under --cache): every long clip is rendered, written to mp4 at
4 fps, decoded with videoqa.video.sample_frames at 8 frames and at one random count in 9..31 (the most
that fits 2048 tokens at 65 per frame), and run through the model's processor per count. Batches hold
one frame count each (the video tensor is [B, F, ...]); batch size = --tokens-per-step / sequence length.
A long clip's sequence packs its questions as conversation turns (as train_demo.py does) while they fit
the context. Loss: answer tokens (direction and event questions weighted --dir-weight / --event-weight)
+ --aux-weight x cross-entropy of a linear head on the vision tower's [CLS] at the feature layer
(hidden_states[-2][:, 0], the token VisPruner's CLS->patch attention belongs to) predicting what the
frame shows: the moving shape's colour and shape, the brief (haloed) object's colour and shape or
"none", and whether the screen flashes (visible-event classes weigh --aux-event-weight). The head is
training-only and not saved.
The new layers and the aux head learn at --lr, the demo's own weights at --lr x --old-lr-scale.

Right-padded batches run without an attention mask: causal attention never lets a real token see the
padding after it, and the loss skips padding, so SDPA takes its fused causal path.

The run is defined by its steps (--max-minutes is only a safety stop), so the defaults reproduce it.
The best checkpoint by validation accuracy (short clips at 8 frames + long clips at 24 frames, all
events visible there; validation splits are disjoint from train and from the held-out splits) is saved
atomically with training.json (arguments, s/step, eval history, aux accuracy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import VideoLlavaForConditionalGeneration, VideoLlavaProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_demo as td  # noqa: E402

from videoqa.synth import long as synth_long  # noqa: E402
from videoqa.synth import short as synth  # noqa: E402
from videoqa.video import sample_frames  # noqa: E402

HERE = Path(__file__).resolve().parents[1] / "samples"  # where the shipped models live
COLOURS = list(synth.COLOURS)
# Per-frame aux targets (classes; index 0 = "none" where the thing may be absent). Each is visible in one
# frame: the brief object is the haloed shape, the moving one the other.
AUX = {"colour": len(COLOURS), "shape": len(synth.SHAPES), "event_colour": len(COLOURS) + 1,
       "event_shape": len(synth.SHAPES) + 1, "flash": 2}
EVENT_HEADS = ("event_colour", "event_shape", "flash")


@dataclass
class LongArgs:
    out: str = str(HERE / "demo-long-model")
    init: str = str(HERE / "demo-model")
    seed: int = 0
    long_clips: int = 1200
    short_clips: int = 2000
    val_long: int = 20
    val_short: int = 30
    val_frames: int = 24
    max_frames: int = 31
    context: int = 2048
    add_layers: int = 4
    steps: int = 500
    tokens_per_step: int = 7000
    short_frac: float = 0.2  # share of steps that are short clips at 8 frames
    eight_frac: float = 0.3  # share of long-clip steps at 8 frames (else the clip's random count)
    lr: float = 4e-4  # new layers and the aux head
    old_lr_scale: float = 0.5  # the demo's own weights learn at lr x this
    warmup: int = 30
    weight_decay: float = 0.01
    dir_weight: float = 2.0
    event_weight: float = 3.0
    aux_weight: float = 1.0
    aux_event_weight: float = 4.0  # class weight of 'object/flash visible' (rare among frames)
    eval_every: int = 125
    max_minutes: float = 240.0  # a safety stop only: the run is defined by its steps
    threads: int = 1
    cache: str = "/tmp/demo_long_cache_v2"  # use a new folder when synth_long.py changes


def grow(init: str, add_layers: int, context: int) -> VideoLlavaForConditionalGeneration:
    """The demo model with `add_layers` identity decoder layers appended and a longer context."""
    old = VideoLlavaForConditionalGeneration.from_pretrained(init)
    cfg = old.config
    cfg.text_config.num_hidden_layers += add_layers
    cfg.text_config.max_position_embeddings = context
    torch.manual_seed(0)
    model = VideoLlavaForConditionalGeneration(cfg)
    missing, unexpected = model.load_state_dict(old.state_dict(), strict=False)
    n_old = cfg.text_config.num_hidden_layers - add_layers
    # everything but the new layers comes from the demo model
    assert not unexpected and all(int(k.split(".layers.")[1].split(".")[0]) >= n_old for k in missing), missing
    for layer in model.model.language_model.layers[n_old:]:
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    model.generation_config = old.generation_config
    return model


@dataclass
class View:
    """One long clip sampled at `frames` frames: cached pixels, per-frame aux targets."""

    clip: int
    frames: int
    pixels: torch.Tensor  # [F, 3, H, W] float16
    aux: torch.Tensor  # [F, len(AUX)] class index per head


def aux_targets(scene: synth_long.LongScene | synth.Scene, indices: list[int]) -> torch.Tensor:
    """[len(indices), len(AUX)] class targets of the frames `indices` of the clip."""
    main = scene.main if isinstance(scene, synth_long.LongScene) else scene
    events = scene.events if isinstance(scene, synth_long.LongScene) else []
    rows = []
    for i in indices:
        on = [e for e in events if e.start <= i < e.stop]
        obj = next((e for e in on if e.kind == "object"), None)  # events never overlap in time
        rows.append([COLOURS.index(main.colour), synth.SHAPES.index(main.shape),
                     COLOURS.index(obj.colour) + 1 if obj else 0, synth.SHAPES.index(obj.shape) + 1 if obj else 0,
                     int(any(e.kind == "flash" for e in on))])
    return torch.tensor(rows)


def long_views(scenes, counts: list[list[int]], processor, cache: Path, tag: str, chunk: int = 200):
    """Views for every (clip, frame count), cached on disk in chunks."""
    views, t0 = [], time.time()
    for start in range(0, len(scenes), chunk):
        file = cache / f"{tag}_{start}_{chunk}.pt"
        if not file.exists():
            part = []
            for k, scene in enumerate(scenes[start : start + chunk]):
                path = synth.write_mp4(synth_long.render(scene), cache / f"{scene.name}.mp4", fps=scene.fps)
                for f in counts[start + k]:
                    clip = sample_frames(path, f)
                    assert clip.indices == synth_long.sample_indices(scene.n_frames, f), scene.name
                    pv = processor.video_processor(videos=[list(clip.frames)], return_tensors="pt")
                    part.append(View(start + k, f, pv["pixel_values_videos"][0].half(),
                                     aux_targets(scene, clip.indices)))
                path.unlink()
            torch.save([asdict(v) for v in part], file)
            print(f"  {tag}: {start + len(scenes[start:start + chunk])}/{len(scenes)} clips, "
                  f"{time.time() - t0:.0f}s", flush=True)
        for d in torch.load(file):
            scene = scenes[d["clip"]]
            d["aux"] = aux_targets(scene, synth_long.sample_indices(scene.n_frames, d["frames"]))
            views.append(View(**d))
    return views


def long_sequence(tok, scene, rng, n_video: int, a: LongArgs):
    """Packed conversation about a long clip: its questions in random order while they fit the context."""
    qas = synth_long.questions(scene, rng)
    events = synth_long.KIND_TYPES[scene.kind]

    def weight(qtype: str) -> float:
        return a.dir_weight if qtype == "direction" else a.event_weight if qtype in events else 1.0

    turns = [(q, ans, weight(qtype)) for q, ans, qtype in (qas[k] for k in rng.permutation(len(qas)))]
    return td.pack_turns(tok, turns, n_video, a.context)


class CLSCapture:
    """Forward hook on the vision tower keeping the [CLS] state of the feature layer."""

    def __init__(self, model, layer: int):
        self.layer, self.value = layer, None
        model.model.video_tower.register_forward_hook(self)

    def __call__(self, module, args, output):
        self.value = output.hidden_states[self.layer][:, 0]


def aux_loss(head: torch.nn.Linear, cls: torch.Tensor, targets: torch.Tensor, event_weight: float = 1.0):
    """Sum over heads of the cross-entropy of a linear head on [CLS] states, and the accuracies. In the
    event heads the visible classes weigh `event_weight` (class 0, "none", 1): events show in few frames."""
    loss, acc = 0.0, {}
    for j, (name, lg) in enumerate(zip(AUX, head(cls).split(list(AUX.values()), dim=-1), strict=True)):
        w = None
        if name in EVENT_HEADS:
            w = torch.full((lg.shape[-1],), event_weight)
            w[0] = 1.0
        loss = loss + F.cross_entropy(lg, targets[:, j], weight=w)
        hit = lg.argmax(-1) == targets[:, j]
        acc[name] = hit.float().mean().item()
        if name in EVENT_HEADS and (targets[:, j] > 0).any():
            acc[name + "_when_visible"] = hit[targets[:, j] > 0].float().mean().item()
    return loss, acc


def parse_args(argv: list[str] | None) -> LongArgs:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in asdict(LongArgs()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return LongArgs(**vars(p.parse_args(argv)))


def long_eval_items(scenes, frames: int, workdir: Path, seed: int):
    items = []
    for scene in scenes:
        path = synth.write_mp4(synth_long.render(scene), workdir / f"{scene.name}.mp4", fps=scene.fps)
        fr = sample_frames(path, frames).frames
        path.unlink()
        items += [(fr, q, ans, t) for q, ans, t in synth_long.questions(scene, synth_long.question_rng(scene, seed))]
    return items


@torch.no_grad()
def aux_eval(model, head, capture, views: list[View]) -> dict[str, float]:
    """Aux-head accuracy per target on validation frames (event heads also on the frames showing one)."""
    model.eval()
    model.model.video_tower(torch.cat([v.pixels for v in views]).float(), output_hidden_states=True)
    _, acc = aux_loss(head, capture.value, torch.cat([v.aux for v in views]))
    model.train()
    return acc


def lr_schedule(a: LongArgs):
    return td.warmup_cosine(a.lr, a.warmup, a.steps, floor=0.1)


def prepare(a: LongArgs, processor, cache: Path):
    """Training scenes and cached pixels; validation items (frames in memory) and aux validation views."""
    rng = np.random.default_rng([a.seed, 11])
    long_train = synth_long.make_split("train", a.long_clips, a.seed)
    counts = [[8, int(rng.integers(9, a.max_frames + 1))] for _ in long_train]
    views = long_views(long_train, counts, processor, cache, f"long_s{a.seed}")
    short_train = synth.make_split("train", a.short_clips, a.seed)
    short_pixels = td.pixel_cache(short_train, processor, cache, f"short_s{a.seed}")
    # validation: short clips from the train stream past any index the demo trainers use
    short_val = synth.make_split("train", 19000 + a.val_short, a.seed)[19000:]
    long_val = synth_long.val_scenes(a.val_long, a.seed)
    val = {"short@8": td.eval_items(short_val, cache, a.seed),
           f"long@{a.val_frames}": long_eval_items(long_val, a.val_frames, cache, a.seed)}
    tag = f"longval{len(long_val)}_s{a.seed}"
    aux_views = long_views(long_val, [[a.val_frames]] * len(long_val), processor, cache, tag)
    return long_train, views, short_train, short_pixels, val, aux_views


def batch_for_step(a: LongArgs, rng, tok, long_train, by_frames, short_train, short_pixels):
    """(ids, weights, pixels [B, F, ...], aux targets [B*F, len(AUX)]) for one step, one frame count."""
    if rng.random() < a.short_frac:
        n = a.tokens_per_step // 600
        idx = rng.integers(len(short_train), size=n)
        seqs = [td.build_sequence(tok, short_train[i], rng, 8 * 65, a.dir_weight) for i in idx]
        aux = torch.cat([aux_targets(short_train[i], [0] * 8) for i in idx])
        return seqs, short_pixels[idx].float(), aux
    f = 8 if rng.random() < a.eight_frac else int(rng.choice([k for k in by_frames if k != 8]))
    pool = by_frames[f]
    n = min(len(pool), max(2, a.tokens_per_step // (f * 65 + 60)))
    chosen = [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]
    seqs = [long_sequence(tok, long_train[v.clip], rng, f * 65, a) for v in chosen]
    return seqs, torch.stack([v.pixels for v in chosen]).float(), torch.cat([v.aux for v in chosen])


def train_step(model, head, capture, opt, seqs, pixels, aux, a: LongArgs):
    ids, _, w = td.collate(seqs)
    logits = model(input_ids=ids, pixel_values_videos=pixels).logits
    vocab = logits.shape[-1]
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1), reduction="none")
    lm = (ce * w[:, :-1].reshape(-1)).sum() / w.sum()
    aux_l, aux_acc = aux_loss(head, capture.value, aux, a.aux_event_weight)
    loss = lm + a.aux_weight * aux_l
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
    opt.step()
    return lm.item(), aux_l.item(), ids.shape


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    # the identity-initialised layers start with tiny activations/gradients: denormal floats made a step
    # ~2x slower on this CPU (measured 7.7 s vs 4.0 s per step at 12 x 8 frames)
    torch.set_flush_denormal(True)
    t_all = time.time()
    out, cache = Path(a.out), Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    processor = VideoLlavaProcessor.from_pretrained(a.init)
    tok = processor.tokenizer
    model = grow(a.init, a.add_layers, a.context)
    model.train()
    capture = CLSCapture(model, model.config.vision_feature_layer)
    head = torch.nn.Linear(model.config.vision_config.hidden_size, sum(AUX.values()))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params / 1e6:.2f}M, layers {model.config.text_config.num_hidden_layers}", flush=True)

    long_train, views, short_train, short_pixels, val, aux_views = prepare(a, processor, cache)
    by_frames: dict[int, list[View]] = {}
    for v in views:
        by_frames.setdefault(v.frames, []).append(v)
    prep_min = (time.time() - t_all) / 60
    print(f"data ready in {prep_min:.1f} min: {len(views)} long views, {len(short_train)} short clips; "
          f"val {[(k, len(v)) for k, v in val.items()]}", flush=True)

    fresh = {id(p) for p in model.model.language_model.layers[-a.add_layers:].parameters()}
    fresh |= {id(p) for p in head.parameters()}
    groups = []
    for p in [*model.parameters(), *head.parameters()]:
        scale = 1.0 if id(p) in fresh else a.old_lr_scale
        decay = a.weight_decay if p.ndim >= 2 else 0.0
        g = next((g for g in groups if g["scale"] == scale and g["weight_decay"] == decay), None)
        if g is None:
            groups.append(g := {"params": [], "scale": scale, "weight_decay": decay})
        g["params"].append(p)
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.98))
    lr_at = lr_schedule(a)
    rng = np.random.default_rng([a.seed, 7])
    history, best, losses, t0 = [], -1.0, [], time.time()

    def evaluate(step: int, elapsed: float) -> dict:
        res = {k: asdict(td.evaluate(model, processor, items, batch=12)) for k, items in val.items()}
        aux = aux_eval(model, head, capture, aux_views)
        rec = {"step": step, "minutes": elapsed / 60, **res, "aux_val": aux}
        history.append(rec)
        print(f"EVAL step {step}: " + "; ".join(f"{k} {r['overall']:.3f} {r['per_type']}" for k, r in res.items())
              + f" | aux {json.dumps({k: round(v, 3) for k, v in aux.items()})}", flush=True)
        return rec

    step = 0
    for step in range(1, a.steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1) * g["scale"]
        seqs, pixels, aux = batch_for_step(a, rng, tok, long_train, by_frames, short_train, short_pixels)
        lm, al, shape = train_step(model, head, capture, opt, seqs, pixels, aux, a)
        losses.append((lm, al))
        elapsed = time.time() - t0
        if step % 10 == 0:
            lm_m, al_m = np.mean(losses[-10:], axis=0)
            print(f"step {step} lm {lm_m:.4f} aux {al_m:.4f} lr {lr_at(step):.2e} batch {tuple(shape)} "
                  f"{elapsed / step:.2f}s/step", flush=True)
        out_of_time = elapsed > a.max_minutes * 60
        if step % a.eval_every == 0 or step == a.steps or out_of_time:
            rec = evaluate(step, elapsed)
            score = sum(rec[k]["overall"] for k in val)
            if score > best:
                best = score
                info = {"args": asdict(a), "params": n_params, "step": step, "prep_minutes": prep_min,
                        "seconds_per_step": elapsed / step, "train_minutes": elapsed / 60,
                        "validation": rec, "history": history}
                td.save(model, processor, out, info)
                print(f"  saved {out} (step {step})", flush=True)
        if out_of_time:
            print(f"stopping at step {step}: time limit {a.max_minutes} min", flush=True)
            break
    info = json.loads((out / "training.json").read_text())
    info["history"] = history  # the full history, also the evaluations after the saved step
    tmp = out / "training.json.tmp"
    tmp.write_text(json.dumps(info, indent=1))
    tmp.replace(out / "training.json")
    print(f"done in {(time.time() - t_all) / 60:.1f} min", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
