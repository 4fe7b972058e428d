"""Train the demo Video-LLaVA (samples/demo-model) from scratch on synthetic clips (`videoqa.synth.short`).

    OMP_NUM_THREADS=1 python -m scripts.train_demo       # the shipped run: every setting is a TrainArgs default
    python -m scripts.train_demo --eval-only --out samples/demo-model --eval-clips 200   # held-out accuracy

Clips go through the same path as inference (H.264 mp4, the same 8-frame sampling, the model's own
processor); each training sequence packs a clip's three questions as turns of one conversation in the
checkpoint's prompt format, and the loss covers only the answers. How the shipped model was trained, and
the trials that chose these settings, are in docs/demo-models.md ("How it was trained").
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import VideoLlavaForConditionalGeneration, VideoLlavaProcessor

from videoqa.models.tiny import (
    BASE_CORPUS,
    EOS_ID,
    PAD_ID,
    VIDEO_ID,
    TinySpec,
    build_config,
    build_processor,
    build_tokenizer,
)
from videoqa.safe_load import LOAD_KWARGS
from videoqa.synth import built, phrasings
from videoqa.synth import short as synth

HERE = Path(__file__).resolve().parents[1] / "samples"  # where the shipped models live


@dataclass
class TrainArgs:
    out: str = str(HERE / "demo-model")
    seed: int = 0
    train_clips: int = 6000
    eval_clips: int = 64
    steps: int = 3000
    stop_at: int = 0  # end after this step (the schedule still runs to --steps): how the first run was cut
    batch: int = 16
    lr: float = 5e-4  # 2e-3 plateaued (direction ~50%, shape ~35% after 1000 steps)
    warmup: int = 50
    weight_decay: float = 0.01
    dir_weight: float = 2.0  # extra loss weight on direction answers
    type_weights: str = ""  # more loss weights by question type, "shape=2,exists=3" (direction: --dir-weight)
    eval_every: int = 250
    max_minutes: float = 75.0
    threads: int = 1  # measured: 1 thread beats 2 when the 2 cores are shared (OpenMP barriers)
    cache: str = "/tmp/demo_cache_v3"  # keyed by seed only: use a new folder when synth.py changes
    vocab: int = 512
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    ffn: int = 384
    vision_hidden: int = 64
    vision_layers: int = 3
    vision_heads: int = 4
    eval_only: bool = False
    init: str = ""  # continue from this checkpoint (its tokenizer and processor too) instead of a fresh model
    turns: int = 3  # most questions in one conversation; past 3 the clip's questions are asked again, any order
    tower_weight: float = 0.0  # weight of the tower's per-patch and [CLS] targets (scripts/long_tower.py); 0 = off
    chat_clips: int = 0  # held-out clips of 30-turn chats (FastV R=auto), added to checkpoint selection; 0 = off
    mc_share: float = 0.0  # share of sequences that are one multiple-choice question answered by its letter
    # The loss weight of that letter: one token against a conversation's dozens of answer tokens (at weight 1 a
    # 320-step run with mc_share 0.3 never learnt to answer a letter).
    mc_weight: float = 1.0
    # Answer a multiple-choice question with the right option's text ("red"), which the benchmarks' answer parsing
    # (videoqa.eval.choice.extract_choice) reads as that option's letter, instead of the letter itself.
    mc_text: bool = False
    extra_types: bool = False  # also ask synth.EXTRA_TYPES (yes/no, how many, "unknown"); evaluated with them too
    vary: bool = False  # vary each trained question at random (synth.phrasings.vary), the held-out forms never made
    noise: bool = False  # with --vary: fillers in, a type-less word out (synth.phrasings.noisy; issue 36's run)
    compose: float = 0.0  # share of colour / shape / direction questions built from parts (synth.built.compose)
    # Train the language side only: a fine-tune on phrasings at lr 3e-4 moved the tower too and lost shapes (held-out
    # shape accuracy 99.5 % -> 83-91 %).
    freeze_tower: bool = False


def make_spec(a: TrainArgs) -> TinySpec:
    return TinySpec(
        family="llama", image_size=64, patch_size=8, vision_hidden=a.vision_hidden,
        vision_layers=a.vision_layers, vision_heads=a.vision_heads, hidden=a.hidden, layers=a.layers,
        heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn, context=1024, vocab_size=a.vocab, frames=8,
    )


def prompt(question: str, first: bool) -> str:
    return f"USER: <video>\n{question} ASSISTANT:" if first else f"USER: {question} ASSISTANT:"


def normalise(text: str) -> str:
    return text.strip().lower().strip(".!?,;: ")


def clip_frames(scene: synth.Scene, workdir: Path) -> np.ndarray:
    """Render -> mp4 -> decode 8 frames: the same bytes the pipeline would see for this clip."""
    with tempfile.TemporaryDirectory(dir=workdir) as own:  # own folder: runs sharing a --cache must not race
        return synth.read_frames(synth.write_mp4(synth.render(scene), Path(own) / f"{scene.name}.mp4"), 8)


def pixel_cache(
    scenes: list[synth.Scene], processor: VideoLlavaProcessor, cache: Path, tag: str, chunk: int = 1000
) -> torch.Tensor:
    """[N, 8, 3, 64, 64] float16 processor outputs, computed once and cached on disk in chunks."""
    cache.mkdir(parents=True, exist_ok=True)
    parts = []
    t0 = time.time()
    for start in range(0, len(scenes), chunk):
        file = cache / f"{tag}_{start}_{chunk}.pt"
        if not file.exists():
            out = []
            for scene in scenes[start : start + chunk]:
                frames = clip_frames(scene, cache)
                pv = processor.video_processor(videos=[list(frames)], return_tensors="pt")["pixel_values_videos"]
                out.append(pv[0].to(torch.float16))
            torch.save(torch.stack(out), file)
            print(f"  {tag}: {start + len(out)}/{len(scenes)} clips, {time.time() - t0:.0f}s", flush=True)
        parts.append(torch.load(file))
    return torch.cat(parts)


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def pack_turns(tok, turns, n_video: int, context: int | None = None) -> tuple[list[int], list[float]]:
    """Token ids and per-token loss weights of one conversation: `turns` are (question, answer, weight) in
    order, the first one carrying the video's `n_video` slots; loss on the answers and their </s> only. Turns
    after the first stop where the next would pass `context`."""
    ids, weights = [tok.bos_token_id], [0.0]
    for turn, (q, a, w) in enumerate(turns):
        p = encode(tok, prompt(q, first=turn == 0))
        if turn == 0:
            v = p.index(VIDEO_ID)
            p = p[:v] + [VIDEO_ID] * n_video + p[v + 1 :]
        ans = encode(tok, " " + a) + [EOS_ID]
        if turn and context is not None and len(ids) + len(p) + len(ans) > context:
            break
        ids += p + ans
        weights += [0.0] * len(p) + [w] * len(ans)
    return ids, weights


def parse_type_weights(text: str, known) -> dict[str, float]:
    """--type-weights "shape=2,exists=3" as {type: weight}; SystemExit naming a type not in `known`."""
    weights = {t: float(w) for t, w in (kv.split("=") for kv in text.split(",") if kv)}
    if unknown := set(weights) - set(known):
        raise SystemExit(f"--type-weights: unknown question types {sorted(unknown)}")
    return weights


def warmup_cosine(lr: float, warmup: int, steps: int, floor: float):
    """Learning rate per step: linear warm-up, then a cosine down to `floor` times `lr`."""
    def lr_at(step: int) -> float:
        if step < warmup:
            return lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, steps - warmup)
        return lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))
    return lr_at


def build_sequence(tok, scene: synth.Scene, rng: np.random.Generator, n_video: int, dir_weight: float,
                   turns: int = 3, context: int = 1024, extra: bool = False, vary: bool = False,
                   noise: bool = False, type_weights: dict[str, float] | None = None, compose: float = 0.0):
    """Token ids and per-token loss weights for one packed conversation about `scene`: its three questions in
    random order, or (turns > 3) 1..turns questions drawn again and again, each phrased afresh, so that a long
    chat, whose history repeats questions, is something the model has seen. With `extra`, questions are drawn
    from synth.ALL_TYPES (yes/no, how many, the unanswerable ones) as well; with chance `compose` a colour, shape or
    direction question is one built from parts instead of a trained form."""
    types = synth.ALL_TYPES if extra else synth.QUESTION_TYPES
    if turns <= 3:
        qas = [synth.questions(scene, rng, types, synth.TEMPLATES)[k] for k in rng.permutation(len(types))[:3]]
    else:
        qas = [synth.questions(scene, rng, types, synth.TEMPLATES)[int(rng.integers(len(types)))]
               for _ in range(int(rng.integers(1, turns + 1)))]
    if compose > 0:
        qas = [(built.compose(qtype, rng, short=True).format(colour=scene.colour, shape=scene.shape)
                if qtype in built.SHORT_COMPOSED_TYPES and rng.random() < compose else q, a, qtype)
               for q, a, qtype in qas]
    if vary:
        qas = [(phrasings.noisy(q, rng, qtype, scene.colour, scene.shape) if noise else phrasings.vary(q, rng), a,
                qtype) for q, a, qtype in qas]
    weights = {**(type_weights or {}), "direction": dir_weight}
    return pack_turns(tok, [(q, a, weights.get(qtype, 1.0)) for q, a, qtype in qas], n_video, context)


def mc_question(scene: synth.Scene, rng: np.random.Generator,
                templates: dict[str, list[str]] = synth.TEMPLATES) -> tuple[str, str, str, str]:
    """One of the clip's questions as `videoqa eval --dataset videomme` asks it (videoqa.synth.mc's four options,
    Video-MME's prompt): (prompt, the right option's letter, type, the right option's text)."""
    from videoqa.eval.mc_layouts import videomme_prompt
    from videoqa.synth.mc import options_for

    question, answer, kind = synth.questions(scene, rng, templates=templates)[int(rng.integers(3))]
    options, letter = options_for(answer, kind, rng)
    listing = "\n".join(f"{L}. {o}" for L, o in zip("ABCD", options, strict=True))
    return videomme_prompt(question, listing), letter, kind, answer


def build_mc_sequence(tok, scene: synth.Scene, rng: np.random.Generator, n_video: int, weight: float = 1.0,
                      text: bool = False):
    """One multiple-choice question about the clip (mc_question), answered by its letter or, with `text`, by the
    right option's text (loss weight `weight`)."""
    prompt_text, letter, _, answer = mc_question(scene, rng)
    return pack_turns(tok, [(prompt_text, answer if text else letter, weight)], n_video)


def collate(seqs: list[tuple[list[int], list[float]]]):
    """Right-padded ids, mask and weights; weights are shifted so weights[t] scores predicting ids[t+1]."""
    n = max(len(s[0]) for s in seqs)
    ids = torch.full((len(seqs), n), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    w = torch.zeros((len(seqs), n))
    for i, (s, sw) in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        w[i, : len(s) - 1] = torch.tensor(sw[1:])
    return ids, mask, w


@dataclass
class EvalResult:
    n: int
    overall: float
    per_type: dict[str, float]
    seconds: float


@torch.no_grad()
def evaluate(
    model: VideoLlavaForConditionalGeneration,
    processor: VideoLlavaProcessor,
    items: list[tuple[np.ndarray, str, str, str]],
    batch: int = 24,
    show: int = 0,
) -> EvalResult:
    """Greedy exact-match accuracy on (frames, question, answer, type) items via processor + generate."""
    model.eval()
    t0 = time.time()
    hits: dict[str, list[bool]] = {}
    for b in range(0, len(items), batch):
        chunk = items[b : b + batch]
        inputs = processor(
            text=[prompt(q, True) for _, q, _, _ in chunk],
            videos=[list(f) for f, _, _, _ in chunk],
            padding=True,
            return_tensors="pt",
        )
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=PAD_ID)
        texts = processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        for (_, q, a, qtype), text in zip(chunk, texts, strict=True):
            ok = normalise(text) == a
            hits.setdefault(qtype, []).append(ok)
            if show > 0:
                print(f"    {q!r} -> {text!r} (want {a}) {'ok' if ok else 'WRONG'}")
                show -= 1
    model.train()
    allhits = [h for v in hits.values() for h in v]
    return EvalResult(
        n=len(allhits),
        overall=float(np.mean(allhits)),
        per_type={k: float(np.mean(v)) for k, v in sorted(hits.items())},
        seconds=time.time() - t0,
    )


CHAT = [("colour", "What colour is the shape?"), ("shape", "What shape is it?"),
        ("direction", "Which direction does it move?")]  # asked in turn, as tests/test_demo_answers.py asks


@torch.no_grad()
def conversation_accuracy(model, processor, scenes: list[synth.Scene], workdir: Path, turns: int = 30) -> float:
    """Share of right answers in `turns`-turn chats about each clip, asked through the pipeline as the web chat
    asks (its own answers as the history, FastV at R=auto): a single-turn score does not tell whether a long chat
    keeps its answers, and pruning changes that."""
    from videoqa.model import LoadedModel
    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig

    model.eval()
    # a new pipeline per call: its caches of encoded clips must not outlive the weights they were made with
    qa = VideoQA(LoadedModel(model, processor, torch.device("cpu"), torch.float32, "training"), max_new_tokens=4)
    hits = []
    with tempfile.TemporaryDirectory(dir=workdir) as own:  # own folder: runs sharing a --cache must not race
        for scene in scenes:
            path = synth.write_mp4(synth.render(scene), Path(own) / f"chat_{scene.name}.mp4")
            history: list[tuple[str, str]] = []
            for turn in range(turns):
                qtype, question = CHAT[turn % len(CHAT)]
                answer = qa.ask(path, question, history=history, prune=PruneConfig(method="fastv", r="auto"))
                hits.append(normalise(answer.text) == getattr(scene, qtype))
                history.append((question, answer.text))
    model.train()
    return float(np.mean(hits))


def eval_items(scenes: list[synth.Scene], workdir: Path, seed: int, extra: bool = False,
               mc: bool = False, mc_text: bool = False) -> list[tuple[np.ndarray, str, str, str]]:
    """(frames, question, answer, type) of each clip's questions (with `extra`, of synth.ALL_TYPES; with `mc`, one
    multiple-choice question too, type "mc"), in the trained phrasings."""
    items = []
    for scene in scenes:
        frames = clip_frames(scene, workdir)
        rng = np.random.default_rng([seed, 99, int(scene.name.split("_")[-1])])
        items += [(frames, q, a, t) for q, a, t in
                  synth.questions(scene, rng, synth.ALL_TYPES if extra else synth.QUESTION_TYPES)]
        if mc:
            q, letter, _, answer = mc_question(scene, np.random.default_rng([seed, 96, int(scene.name.split("_")[-1])]))
            items.append((frames, q, answer if mc_text else letter.lower(), "mc"))
    return items


def tower_targets(model, scenes: list[synth.Scene]):
    """Heads and targets for the tower's per-patch and [CLS] objective (scripts/long_tower.py) on each
    clip's 8 sampled frames: what covers each patch, and the frame's colour and shape on [CLS]."""
    from scripts import long_tower  # only this option needs it

    v = model.config.vision_config
    grid = v.image_size // v.patch_size
    frames = [int(i) for i in np.linspace(0, synth.CLIP_FRAMES - 1, 8).astype(int)]  # as read_frames samples
    patch, frame = [], []
    for scene in scenes:
        got = [long_tower.frame_targets(scene, i, grid) for i in frames]
        patch.append(np.stack([p for p, _ in got]))
        frame.append([f for _, f in got])
    return (long_tower.TowerHeads(v.hidden_size),
            (torch.from_numpy(np.stack(patch)), torch.tensor(frame, dtype=torch.float32)))


def earlier_stages(folder: str) -> dict:
    """The records of the runs a run continues (its --init or --resume folder): that folder's own `stages`, then
    its record as the next stage (without its evaluation history). Empty for a run from scratch."""
    file = Path(folder) / "training.json"
    if not folder or not file.exists():
        return {}
    record = json.loads(file.read_text())
    stages = record.pop("stages", {})
    stages[f"stage{len(stages) + 1}"] = {k: v for k, v in record.items() if k != "history"}
    return stages


def save(model, processor, out: Path, info: dict) -> None:
    """Write to a sibling temp folder then swap, so `out` always holds a complete model."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    (tmp / "training.json").write_text(json.dumps(info, indent=1))
    # the conversation the demo models are trained on: videoqa's default prompt for this folder
    (tmp / "videoqa.json").write_text(json.dumps({"conversation": "plain"}, indent=1) + "\n")
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def parse_args(argv: list[str] | None) -> TrainArgs:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in asdict(TrainArgs()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=type(default), default=default)
    return TrainArgs(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    test = synth.test_scenes(a.eval_clips, a.seed)
    items = eval_items(test, cache, a.seed, a.extra_types, a.mc_share > 0, a.mc_text)

    if a.eval_only:
        model = VideoLlavaForConditionalGeneration.from_pretrained(out, **LOAD_KWARGS).eval()
        processor = VideoLlavaProcessor.from_pretrained(out, **LOAD_KWARGS)
        res = evaluate(model, processor, items, show=6)
        print(json.dumps(asdict(res), indent=1))
        return 0

    spec = make_spec(a)
    torch.manual_seed(a.seed)
    if a.init:
        model = VideoLlavaForConditionalGeneration.from_pretrained(a.init, **LOAD_KWARGS)
        processor = VideoLlavaProcessor.from_pretrained(a.init, **LOAD_KWARGS)
        tok, config = processor.tokenizer, model.config
    else:
        tok = build_tokenizer(synth.corpus() + BASE_CORPUS, a.vocab)
        processor = build_processor(tok, spec.image_size, spec.patch_size)
        config = build_config(spec, len(tok))
        model = VideoLlavaForConditionalGeneration(config)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    n_params = sum(p.numel() for p in model.parameters())
    n_video = config.video_seq_length
    print(f"params {n_params / 1e6:.2f}M, visual tokens {n_video}, vocab {len(tok)}", flush=True)

    train = synth.make_split("train", a.train_clips, a.seed)
    t0 = time.time()
    pixels = pixel_cache(train, processor, cache, f"train_s{a.seed}")
    print(f"train pixels {tuple(pixels.shape)} in {time.time() - t0:.0f}s", flush=True)

    # The hand-built sequence must equal what the processor produces for the same prompt.
    q0 = synth.questions(train[0], np.random.default_rng(0))[0][0]
    ref = processor(text=prompt(q0, True), videos=[list(clip_frames(train[0], cache))], return_tensors="pt")
    mine = [tok.bos_token_id] + encode(tok, prompt(q0, True))
    v = mine.index(VIDEO_ID)
    mine = mine[:v] + [VIDEO_ID] * n_video + mine[v + 1 :]
    assert ref["input_ids"][0].tolist() == mine, "prompt tokenisation differs from the processor's"
    assert torch.allclose(ref["pixel_values_videos"][0].half(), pixels[0]), "pixel cache differs"

    stages = earlier_stages(a.init)  # a fine-tune's record says what it continues (the web chat counts its clips)
    heads, targets = None, None
    if a.tower_weight:
        heads, targets = tower_targets(model, train)
    if a.freeze_tower:
        model.model.video_tower.requires_grad_(False)
    params = [(n, p) for n, p in [*model.named_parameters(), *(heads.named_parameters() if heads else [])]
              if p.requires_grad]
    decay = [p for n, p in params if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in params if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.98),
    )

    lr_at = warmup_cosine(a.lr, a.warmup, a.steps, floor=0.1)

    rng = np.random.default_rng([a.seed, 7])
    best = -1.0
    history = []
    t_start = time.time()
    losses = []
    model.train()
    type_weights = parse_type_weights(a.type_weights, synth.ALL_TYPES)
    step = 0
    for step in range(1, a.steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1)
        idx = rng.integers(len(train), size=a.batch)
        ids, mask, w = collate([
            build_mc_sequence(tok, train[i], rng, n_video, a.mc_weight, a.mc_text) if rng.random() < a.mc_share else
            build_sequence(tok, train[i], rng, n_video, a.dir_weight, a.turns,
                           config.text_config.max_position_embeddings, a.extra_types, a.vary, a.noise, type_weights,
                           a.compose)
            for i in idx])
        logits = model(input_ids=ids, attention_mask=mask, pixel_values_videos=pixels[idx].float()).logits
        vocab = logits.shape[-1]
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1), reduction="none")
        loss = (ce * w[:, :-1].reshape(-1)).sum() / w.sum()
        if heads is not None:  # the tower runs a second time for its own states: it is a small share of a step
            states = model.model.video_tower(pixels[idx].float().flatten(0, 1), output_hidden_states=True)
            patch_t, frame_t = targets
            tower_loss, _ = heads.loss(states.hidden_states[config.vision_feature_layer],
                                       patch_t[idx].flatten(0, 1), frame_t[idx].flatten(0, 1), brief_weight=1.0)
            loss = loss + a.tower_weight * tower_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        elapsed = time.time() - t_start
        if step % 25 == 0:
            print(f"step {step} loss {np.mean(losses[-25:]):.4f} lr {lr_at(step):.2e} "
                  f"{elapsed / step:.2f}s/step", flush=True)
        out_of_time = elapsed > a.max_minutes * 60
        if step % a.eval_every == 0 or step == a.steps or out_of_time:
            res = evaluate(model, processor, items)
            history.append({"step": step, "minutes": elapsed / 60, **asdict(res)})
            chat = ""
            if a.chat_clips:
                history[-1]["chat_30_turns"] = conversation_accuracy(model, processor, test[: a.chat_clips], cache)
                chat = f", 30-turn chats {history[-1]['chat_30_turns']:.3f}"
            print(f"EVAL step {step}: overall {res.overall:.3f} {res.per_type} ({res.seconds:.0f}s){chat}", flush=True)
            score = res.overall + res.per_type.get("direction", 0.0) + history[-1].get("chat_30_turns", 0.0)
            if score > best:
                best = score
                info = {
                    "args": asdict(a), "spec": asdict(spec), "params": n_params, "step": step,
                    "seconds_per_step": elapsed / step, "train_minutes": elapsed / 60,
                    "heldout": asdict(res), "history": history, **({"stages": stages} if stages else {}),
                }
                save(model, processor, out, info)
                print(f"  saved {out} (step {step})", flush=True)
        if out_of_time:
            print(f"stopping at step {step}: time limit {a.max_minutes} min", flush=True)
            break
        if step == a.stop_at:  # no evaluation of its own: a run cut by hand had none
            print(f"stopping at step {step}: --stop-at", flush=True)
            break
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
