"""A new recipe for the long-clip demo model: a frozen per-patch tower, cached features, a curriculum.

    OMP_NUM_THREADS=1 python -m scripts.train_long_frozen_tower      # writes runs/demo-long-frozen-tower

The shipped samples/demo-long-model is five runs of it (scripts/train_demo_long.sh); the figures are in its
training.json and in `videoqa bench long`'s "reads the event" table.

Why the previous recipe (8 px patches, 65 tokens a frame, end-to-end tower) never read events: at 8 frames a
third or more of its event labels were for events no sampled frame showed, so the cheapest fit was a fixed
prior per question; its frame counts were drawn per step from two cached counts per clip (half the sequences
at 8 frames, few at 31), so longer prompts broke direction; and its tower found the brief object's patches
with about half recall. This recipe changes each of those:

1. Tower (scripts/long_tower.py): 16 px patches (17 tokens a frame: 4x fewer, so a step is ~4x cheaper),
   trained first on per-patch targets (background / moving shape / brief object, with colour and shape),
   then frozen; every frame of every clip is cached as tower features. It needs many clips (--tower-clips,
   --tower-short): trained on 400, it knew the shapes of its own clips only (checked on held-back clips now).
2. Language stage (projector + LLM; the LLM's 4 layers warm-started from samples/demo-model and grown to 8
   by identity layers, context 1024): sequences built from cached features at any frame count.
   * Event questions are asked only when the sampled frames show the event (synth.long.shows); clips shown
     with their events erased are asked the event questions too, with the answer "none" ("zero" flashes), so
     an answer must come from the frames.
   * Curriculum: the first --curriculum share of steps shows 1-8 frames around the events (no direction
     question there); afterwards --window-frac of steps still do.
   * Frame counts --min-frames..max (the most that fit the context) are drawn so that every count gets the
     same number of sequences (a step holds one count; a count is drawn in proportion to its length).
   * --short-frac of steps are the short clips at 8 frames (colour / shape / direction).
The run is defined by its steps (--max-minutes is only a safety stop). The best checkpoint by validation
(short clips at 8 frames; long validation clips at 8, 24 and the most frames; the counterfactual) is saved
with training.json and videoqa.json (the conversation it was trained on: plain).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import VideoLlavaForConditionalGeneration, VideoLlavaProcessor

from scripts import long_tower as lt
from scripts import train_demo as td
from scripts.long_val import evaluate, forward, score
from videoqa.models.tiny import VIDEO_ID  # noqa: E402
from videoqa.safe_load import LOAD_KWARGS  # noqa: E402
from videoqa.synth import built, phrasings  # noqa: E402
from videoqa.synth import long as synth_long  # noqa: E402
from videoqa.synth import short as synth  # noqa: E402

HERE = Path(__file__).resolve().parents[1] / "samples"
EXTRA_CHUNK = 1200  # extra long clips are featurised and cached this many at a time
TEXT_ROOM = 32  # prompt tokens besides the video's, first turn
SHORT_FRAMES = [int(i) for i in np.linspace(0, synth.CLIP_FRAMES - 1, 8).astype(int)]  # the 8 frames sampled


@dataclass
class LongArgs:
    out: str = "runs/demo-long-frozen-tower"  # not samples/: scripts/train_demo_long.sh makes the shipped one
    init: str = str(HERE / "demo-model")  # tokenizer, processor and the LLM's first 4 layers
    resume: str = ""  # a checkpoint of this recipe (same tower cache) to continue from: its projector and LLM
    seed: int = 0
    long_clips: int = 600
    erase_clips: int = 200  # the first N long clips are also cached with their events erased
    extra_clips: int = 0  # more long clips (the train stream's next ones) featurised by the cached tower; every
    # other one also erased. Added to a run that had begun to memorise its clips (train loss falling, validation flat)
    extra_short: int = 0  # more short clips (the short train stream's next ones), for the same reason
    short_clips: int = 1000
    val_long: int = 30
    val_short: int = 30
    select_long: int = 0  # long validation clips for choosing the checkpoint, when more than --val-long: the rest
    # are featurised into a file of their own (the cache of the tower and its features keeps its name)
    val_counts: str = "8,24,max"  # the frame counts validated
    patch: int = 16
    tower_clips: int = 200
    tower_short: int = 200
    tower_steps: int = 2400
    tower_batch: int = 64
    tower_lr: float = 1e-3
    brief_weight: float = 4.0
    pos_weight: float = 0.0  # the tower's [CLS] also regresses the moving shape's centre
    context: int = 1024
    add_layers: int = 4
    min_frames: int = 8
    steps: int = 2400
    stop_at: int = 0  # end after this step (the schedule still runs to --steps): how the first stage was cut
    tokens_per_step: int = 4000
    curriculum: float = 0.15
    window_frac: float = 0.2
    short_frac: float = 0.15
    erase_frac: float = 0.2
    lr: float = 1e-3  # projector and new layers
    old_lr_scale: float = 0.5  # the demo's own LLM weights
    warmup: int = 50
    weight_decay: float = 0.01
    dir_weight: float = 2.0
    event_weight: float = 2.0
    proj_weight: float = 0.0  # the tower's per-patch/[CLS] targets also on the projector's output (the LLM's input)
    proj_frames: int = 64  # frames of a step that objective sees
    eval_every: int = 600
    max_minutes: float = 80.0
    threads: int = 1
    cache: str = "/tmp/demo_long_cache_v3"
    finetune: str = ""  # a model of this recipe to fine-tune whole: its tower (frozen) makes the features, no tower
    # is trained and no layers are added (--add-layers only says which layers get --old-lr-scale)
    extra_types: int = 0  # 1: also ask the EXTRA_TYPES of synth.short / synth.long (yes/no, how many, "unknown")
    vary: int = 0  # 1: vary each trained question at random (synth.phrasings.vary), the held-out forms never made
    noise: int = 0  # 1 (with --vary): also filler words in and a droppable word out (synth.phrasings.noisy)
    compose: float = 0.0  # share of a long clip's questions built from parts (synth.built.compose), not the table
    reps: int = 1  # a long view asks each of its questions this many times, each in a phrasing drawn anew
    type_weights: str = ""  # loss weights by question type, "colour=3,order=2"; they replace --dir-weight and
    # --event-weight for the types they name
    mc_frac: float = 0.0  # share of steps that are short clips' multiple-choice questions, answered by the letter


def build(a: LongArgs) -> tuple[VideoLlavaForConditionalGeneration, VideoLlavaProcessor]:
    """A fresh 16 px-patch tower and projector; the demo's LLM grown by identity layers to a longer context. With
    --finetune, that model as it is."""
    if a.finetune:
        return (VideoLlavaForConditionalGeneration.from_pretrained(a.finetune, **LOAD_KWARGS),
                VideoLlavaProcessor.from_pretrained(a.finetune, **LOAD_KWARGS))
    old = VideoLlavaForConditionalGeneration.from_pretrained(a.init, **LOAD_KWARGS)
    cfg = old.config
    cfg.vision_config.patch_size = a.patch
    grid = cfg.vision_config.image_size // a.patch
    cfg.image_seq_length, cfg.video_seq_length = grid * grid, 8 * (grid * grid + 1)
    cfg.text_config.num_hidden_layers += a.add_layers
    cfg.text_config.max_position_embeddings = a.context
    torch.manual_seed(a.seed)
    model = VideoLlavaForConditionalGeneration(cfg)
    llm = {k: v for k, v in old.state_dict().items() if "language_model" in k or k.startswith("lm_head")}
    missing, unexpected = model.load_state_dict(llm, strict=False)
    assert not unexpected, unexpected
    n_old = cfg.text_config.num_hidden_layers - a.add_layers
    for layer in model.model.language_model.layers[n_old:]:
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    model.generation_config = old.generation_config
    if a.resume:  # the tower comes from the feature cache either way; the rest continues where that run stopped
        prev = VideoLlavaForConditionalGeneration.from_pretrained(a.resume, **LOAD_KWARGS).state_dict()
        model.load_state_dict({k: v for k, v in prev.items() if "video_tower" not in k and "image_tower" not in k},
                              strict=False)
    processor = VideoLlavaProcessor.from_pretrained(a.init, **LOAD_KWARGS)
    processor.patch_size = a.patch
    return model, processor


def tokens_per_frame(model) -> int:
    v = model.config.vision_config
    return (v.image_size // v.patch_size) ** 2 + 1


def long_templates(rng, compose: float) -> dict[str, list[str]]:
    """The table of trained forms, or with chance `compose` one question built from parts for each type."""
    if compose <= 0 or rng.random() >= compose:
        return synth_long.TEMPLATES
    return synth_long.TEMPLATES | {t: [built.compose(t, rng)] for t in built.COMPOSED_TYPES}


def questions(scene, rng, idx: list[int] | None, erased: bool, direction: bool = True,
              extra: bool = False, compose: float = 0.0, reps: int = 1) -> list[tuple]:
    """(question, answer, type, is_event) a sequence may ask: event questions only when the frames show the
    event; about an erased clip the answer is "none" ("zero" flashes). `extra`: the EXTRA_TYPES too. A long clip's
    questions are asked `reps` times, each time phrased anew, built from parts with chance `compose`."""
    if not isinstance(scene, synth_long.LongScene):
        types = synth.ALL_TYPES if extra else synth.QUESTION_TYPES
        return [(q, ans, t, False) for q, ans, t in synth.questions(scene, rng, types, synth.TEMPLATES)]
    out = []
    asked = [qa for _ in range(reps) for qa in synth_long.questions(scene, rng, extra, long_templates(rng, compose))]
    for q, ans, t in asked:
        event = t in synth_long.KIND_TYPES[scene.kind]
        if t == "direction" and not direction:
            continue
        if event and erased:
            ans = "zero" if t == "count" else "none"
        elif event and not synth_long.shows(scene, idx):
            continue
        out.append((q, ans, t, event))
    return out


def sequence(tok, qas, n_video: int, a: LongArgs, rng, main: synth.Scene | None = None,
             type_weights: dict[str, float] | None = None) -> tuple[list[int], list[float]]:
    """A packed conversation: the questions as turns in random order while they fit; loss on the answers (weighted
    by `type_weights`, else --dir-weight / --event-weight). With --noise, a question about the moving shape (`main`)
    may name it by its colour or shape (phrasings.named)."""
    def reword(q: str, t: str) -> str:
        if not a.vary:
            return q
        if not a.noise:
            return phrasings.vary(q, rng)
        about_main = main is not None and t in synth.QUESTION_TYPES
        return phrasings.noisy(q, rng, *((t, main.colour, main.shape) if about_main else ()))

    weights = type_weights or {}
    turns = [(reword(q, t), ans,
              weights.get(t, a.dir_weight if t == "direction" else a.event_weight if event else 1.0))
             for q, ans, t, event in (qas[k] for k in rng.permutation(len(qas)))]
    return td.pack_turns(tok, turns, n_video, a.context)


def window(scene: synth_long.LongScene, rng) -> list[int]:
    """1-8 frames near the events that show every event and every gap between two (the curriculum's views)."""
    ev = scene.events
    need = [int(rng.integers(e.start, e.stop)) for e in ev]
    need += [int(rng.integers(x.stop, y.start)) for x, y in zip(ev, ev[1:], strict=False)]
    pad = int(rng.integers(0, 13))
    lo, hi = max(0, ev[0].start - pad), min(scene.n_frames, ev[-1].stop + pad)
    f = int(rng.integers(len(need), 9))
    extra = rng.choice(np.arange(lo, hi), size=min(hi - lo, max(0, f - len(need))), replace=False)
    return sorted(set(need) | {int(i) for i in extra})


def type_weights(a: LongArgs) -> dict[str, float]:
    return td.parse_type_weights(a.type_weights, synth_long.QUESTION_TYPES + synth_long.EXTRA_TYPES + synth.ALL_TYPES)


class Data:
    """Cached features and the scenes they belong to; draws one step's sequences."""

    def __init__(self, a, tok, tpf, long_train, feats, erased, short_train, short_feats):
        self.a, self.tok, self.tpf = a, tok, tpf
        self.long, self.feats = long_train, feats
        self.erased = erased if isinstance(erased, dict) else dict(enumerate(erased))  # clip index -> features
        self.short, self.short_feats = short_train, short_feats
        self.shown, self.targets = [], {}
        self.type_weights = type_weights(a)
        self.max_frames = (a.context - TEXT_ROOM) // tpf
        self.counts = np.arange(a.min_frames, self.max_frames + 1)
        cost = self.counts * tpf + 80.0
        self.p_count = cost / cost.sum()  # a step of count F holds ~1/cost sequences: equal sequences per count

    def _view(self, c: int, idx: list[int], rng, direction: bool):
        erase = c in self.erased and rng.random() < self.a.erase_frac
        scene = self.long[c]
        feats = (self.erased[c] if erase else self.feats[c])[idx]
        self.shown.append((synth_long.erased(scene) if erase else scene, idx))
        qas = questions(scene, rng, idx, erase, direction, bool(self.a.extra_types), self.a.compose, self.a.reps)
        return sequence(self.tok, qas, len(idx) * self.tpf, self.a, rng, scene.main, self.type_weights), feats

    def step(self, step: int, rng):
        a = self.a
        self.shown = []  # (scene as shown, frame numbers) of each sequence: what frame_targets needs
        if a.mc_frac and rng.random() < a.mc_frac:
            n = a.tokens_per_step // (8 * self.tpf + 120)
            pick = rng.integers(len(self.short), size=n)
            self.shown = [(self.short[i], SHORT_FRAMES) for i in pick]
            return ([td.pack_turns(self.tok, [(*td.mc_question(self.short[i], rng)[:2], 1.0)], 8 * self.tpf)
                     for i in pick], [self.short_feats[i] for i in pick], "mc")
        if rng.random() < a.short_frac:
            n = a.tokens_per_step // (8 * self.tpf + 60)
            pick = rng.integers(len(self.short), size=n)
            self.shown = [(self.short[i], SHORT_FRAMES) for i in pick]
            return ([sequence(self.tok, questions(self.short[i], rng, None, False, extra=bool(a.extra_types)),
                              8 * self.tpf, a, rng, self.short[i], self.type_weights)
                     for i in pick], [self.short_feats[i] for i in pick], "short")
        if step <= a.curriculum * a.steps or rng.random() < a.window_frac:
            n = a.tokens_per_step // (8 * self.tpf + 80)
            views = [self._view(c, window(self.long[c], rng), rng, False)
                     for c in rng.integers(len(self.long), size=n)]
            return [v[0] for v in views], [v[1] for v in views], "window"
        f = int(rng.choice(self.counts, p=self.p_count))
        n = max(1, a.tokens_per_step // (f * self.tpf + 80))
        views = []
        for c in rng.integers(len(self.long), size=n):
            views.append(self._view(int(c), synth_long.sample_indices(self.long[c].n_frames, f), rng, True))
        return [v[0] for v in views], [v[1] for v in views], f"{f} frames"


    def frame_batch(self, feats: list[torch.Tensor], rng, k: int, grid: int):
        """k random frames of this step's sequences: (features [k, tokens, d], per-patch and frame targets)."""
        where = [(s, j) for s, f in enumerate(feats) for j in range(len(f))]
        x, pt, ft = [], [], []
        for w in rng.choice(len(where), size=min(k, len(where)), replace=False):
            s, j = where[w]
            scene, idx = self.shown[s]
            key = (scene.name, len(getattr(scene, "events", ())), idx[j])
            if key not in self.targets:
                self.targets[key] = lt.frame_targets(scene, idx[j], grid)
            x.append(feats[s][j])
            pt.append(self.targets[key][0])
            ft.append(self.targets[key][1])
        return torch.stack(x), torch.from_numpy(np.stack(pt)), torch.tensor(ft, dtype=torch.float32)


def featurise(model, processor, scenes, cache: Path, erase: bool = False) -> list[torch.Tensor]:
    layer = model.config.vision_feature_layer
    return [lt.features(model.model.video_tower, layer, lt.decode_clip(s, processor, cache, erase)).frames
            for s in scenes]


def val_scenes(a: LongArgs) -> tuple[list, list]:
    """Short validation clips (the train stream past any index a demo trainer uses) and long validation clips."""
    return synth.make_split("train", 19000 + a.val_short, a.seed)[19000:], synth_long.val_scenes(a.val_long, a.seed)


def cache_file(a: LongArgs, cache: Path) -> Path:
    """Where stage 1 (the tower) and its features are cached: named by the settings that make them."""
    names = ("seed", "long_clips", "erase_clips", "short_clips", "val_long", "val_short", "patch", "tower_clips",
             "tower_short", "tower_steps", "tower_batch", "tower_lr", "brief_weight", "pos_weight", "finetune")
    key = json.dumps({k: v for k, v in asdict(a).items() if k in names and (k not in ("pos_weight", "finetune") or v)},
                     sort_keys=True)
    return cache / f"features_{hashlib.sha1(key.encode()).hexdigest()[:10]}.pt"


def save_whole(obj, file: Path) -> None:
    """torch.save, whole or not at all: a run stopped half-way, or another run waiting for the cache, never finds
    a file that looks complete and is not."""
    torch.save(obj, file.with_suffix(".tmp"))
    file.with_suffix(".tmp").rename(file)


def extra_features(a: LongArgs, model, processor, cache: Path, log) -> tuple[list, list, dict]:
    """(scenes, features, {index among them: erased features}) of the --extra-clips, by the cached tower.
    Featurised in chunks of EXTRA_CHUNK clips, each cached, so a later run with more extra clips adds to them."""
    scenes = synth_long.make_split("train", a.long_clips + a.extra_clips, a.seed)[a.long_clips:]
    feats, erased = [], {}
    for lo in range(0, len(scenes), EXTRA_CHUNK):
        data = extra_chunk(a, model, processor, cache, scenes, lo, log)
        erased |= {lo + i: x for i, x in data["erased"].items()}
        feats += data["feats"]
    return scenes, feats, erased


def cached(file: Path, make, log, what: str):
    """The contents of `file`, made by `make()` and saved whole first if it is not there."""
    if not file.exists():
        t0 = time.time()
        save_whole(make(), file)
        log(f"{what}: featurised in {time.time() - t0:.0f}s")
    return torch.load(file)


def extra_chunk(a: LongArgs, model, processor, cache: Path, scenes: list, lo: int, log) -> dict:
    """Features of extra clips lo..lo+EXTRA_CHUNK ({"feats", "erased"}), cached per chunk."""
    part = scenes[lo : lo + EXTRA_CHUNK]

    def make() -> dict:
        # every other clip also erased; EXTRA_CHUNK is even, so that is every other one of the whole stream
        erased = featurise(model, processor, part[::2], cache, erase=True)
        return {"feats": featurise(model, processor, part, cache),
                "erased": dict(zip(range(0, len(part), 2), erased, strict=True))}

    return cached(cache_file(a, cache).with_suffix(f".extra{lo}-{lo + len(part)}.pt"), make, log,
                  f"extra clips {lo}-{lo + len(part)}")


def select_scenes(a: LongArgs) -> list:
    """The validation clips past --val-long, up to --select-long (none when --select-long is not more)."""
    if a.select_long <= a.val_long:
        return []
    return synth_long.val_scenes(a.select_long, a.seed)[a.val_long :]


def val_counts(a: LongArgs, max_frames: int) -> list[int]:
    return sorted({max_frames if c == "max" else int(c) for c in a.val_counts.split(",")})


def select_features(a: LongArgs, model, processor, cache: Path, scenes: list, log) -> dict:
    """Features of the select_scenes ({"feats", "erased"}), cached in a file of their own."""
    return cached(cache_file(a, cache).with_suffix(f".val{a.val_long}-{a.select_long}.pt"),
                  lambda: {"feats": featurise(model, processor, scenes, cache),
                           "erased": featurise(model, processor, scenes, cache, erase=True)},
                  log, f"validation clips {a.val_long}-{a.select_long}")


def extra_short_features(a: LongArgs, model, processor, cache: Path, log) -> tuple[list, list]:
    """(scenes, features) of the --extra-short clips (the short train stream past --short-clips)."""
    scenes = synth.make_split("train", a.short_clips + a.extra_short, a.seed)[a.short_clips:]
    return scenes, cached(cache_file(a, cache).with_suffix(f".short{a.extra_short}.pt"),
                          lambda: featurise(model, processor, scenes, cache), log, f"{len(scenes)} extra short clips")


def prepare(a: LongArgs, model, processor, cache: Path, log) -> dict:
    """Stage 1 (tower) and the feature caches; loaded from `cache` when this configuration made them."""
    file = cache_file(a, cache)
    tower = model.model.video_tower
    if file.exists():
        data = torch.load(file)
        tower.load_state_dict(data.pop("tower"))
        for p in tower.parameters():
            p.requires_grad_(False)
        tower.eval()
        return data
    rng = np.random.default_rng([a.seed, 5])
    long_train = synth_long.make_split("train", a.long_clips, a.seed)
    short_train = synth.make_split("train", a.short_clips, a.seed)
    grid = model.config.vision_config.image_size // a.patch
    t0 = time.time()
    if a.finetune:  # the model's own tower, as its record measured it
        for p in tower.parameters():
            p.requires_grad_(False)
        tower.eval()
        acc = json.loads((Path(a.finetune) / "training.json").read_text())["tower"]["held_back_accuracy"]
    else:
        # the tower's clips are a prefix of the same train streams (more of them than the language stage's base
        # set is fine: those are --extra-clips later)
        tdata = lt.tower_data(synth_long.make_split("train", a.tower_clips, a.seed),
                              synth.make_split("train", a.tower_short, a.seed), processor, cache, grid, rng)
        log(f"tower data: {len(tdata[0])} frames in {time.time() - t0:.0f}s")
        acc = lt.train_tower(tower, model.config.vision_feature_layer, tdata, a.tower_steps, a.tower_batch,
                             a.tower_lr, a.brief_weight, rng, log, a.pos_weight)
        log(f"tower held-back accuracy {json.dumps({k: round(v, 3) for k, v in acc.items()})} "
            f"({time.time() - t0:.0f}s)")
        del tdata
    short_val, long_val = val_scenes(a)
    data = {"tower_acc": acc, "tower_minutes": (time.time() - t0) / 60}
    data["feats"] = featurise(model, processor, long_train, cache)
    log(f"long features: {sum(len(f) for f in data['feats'])} frames, {time.time() - t0:.0f}s")
    data["erased"] = featurise(model, processor, long_train[: a.erase_clips], cache, erase=True)
    data["short_feats"] = featurise(model, processor, short_train, cache)
    data["val"] = {"feats": featurise(model, processor, long_val, cache),
                   "erased": featurise(model, processor, long_val, cache, erase=True),
                   "short_feats": featurise(model, processor, short_val, cache)}
    data["prep_minutes"] = (time.time() - t0) / 60
    save_whole({**data, "tower": tower.state_dict()}, file)
    return data


def check_forward(model, processor, scene, feats: torch.Tensor) -> None:
    """The cached-feature forward must give the logits the saved model gives from pixels, prompt and all."""
    idx = synth_long.sample_indices(scene.n_frames, 8)
    clip = lt.decode_clip(scene, processor, Path("/tmp"), indices=idx)
    text = td.prompt("What shape is moving?", True)
    ids = processor.tokenizer(text).input_ids
    v = ids.index(VIDEO_ID)
    ids = ids[:v] + [VIDEO_ID] * (8 * tokens_per_frame(model)) + ids[v + 1 :]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([ids]), pixel_values_videos=clip.frames[None].float()).logits
        mine = forward(model, torch.tensor([ids]), [feats[idx]])
    # features are cached in float16: equal to that precision, and the same greedy token everywhere
    assert torch.allclose(ref, mine, atol=2e-2) and (ref.argmax(-1) == mine.argmax(-1)).all(), (ref - mine).abs().max()


def parse_args(argv: list[str] | None) -> LongArgs:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in asdict(LongArgs()).items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return LongArgs(**vars(p.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    type_weights(a)  # a bad --type-weights fails now, not after the features are made
    torch.set_num_threads(a.threads)
    torch.set_flush_denormal(True)  # the identity-initialised layers' tiny values made steps ~2x slower
    t_all = time.time()

    def log(msg: str) -> None:
        print(f"[{(time.time() - t_all) / 60:5.1f} min] {msg}", flush=True)

    out, cache = Path(a.out), Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    model, processor = build(a)
    tok, tpf = processor.tokenizer, tokens_per_frame(model)
    data = prepare(a, model, processor, cache, log)
    val = data["val"]
    val["short"], val["long"] = val_scenes(a)
    check_forward(model, processor, val["long"][0], val["feats"][0])
    if picked := select_scenes(a):
        sel = select_features(a, model, processor, cache, picked, log)
        val["long"], val["feats"], val["erased"] = (val["long"] + picked, val["feats"] + sel["feats"],
                                                    val["erased"] + sel["erased"])
    long_train = synth_long.make_split("train", a.long_clips, a.seed)
    short_train = synth.make_split("train", a.short_clips, a.seed)
    feats, erased = data["feats"], dict(enumerate(data["erased"]))
    if a.extra_clips:
        more, more_feats, more_erased = extra_features(a, model, processor, cache, log)
        erased |= {len(long_train) + i: f for i, f in more_erased.items()}
        long_train, feats = long_train + more, feats + more_feats
    short_feats = data["short_feats"]
    if a.extra_short:
        more, more_feats = extra_short_features(a, model, processor, cache, log)
        short_train, short_feats = short_train + more, short_feats + more_feats
    d = Data(a, tok, tpf, long_train, feats, erased, short_train, short_feats)
    counts = val_counts(a, d.max_frames)
    log(f"data ready: {len(long_train)} long clips ({len(erased)} also erased), {len(short_train)} short; "
        f"frame counts {a.min_frames}..{d.max_frames}, {tpf} tokens a frame")

    n_old = model.config.text_config.num_hidden_layers - a.add_layers
    old = {id(p) for n, p in model.named_parameters() if "language_model" in n and ".layers." not in n
           or n.startswith("lm_head") or any(f".layers.{i}." in n for i in range(n_old))}
    groups = []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        scale = a.old_lr_scale if id(p) in old else 1.0
        decay = a.weight_decay if p.ndim >= 2 and "embed" not in n else 0.0
        g = next((g for g in groups if g["scale"] == scale and g["weight_decay"] == decay), None)
        if g is None:
            groups.append(g := {"params": [], "scale": scale, "weight_decay": decay})
        g["params"].append(p)
    heads = lt.TowerHeads(model.config.text_config.hidden_size) if a.proj_weight else None
    if heads is not None:
        groups.append({"params": list(heads.parameters()), "scale": 1.0, "weight_decay": 0.0})
    grid = model.config.vision_config.image_size // a.patch
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.98))

    lr_at = td.warmup_cosine(a.lr, a.warmup, a.steps, floor=0.05)

    stages = td.earlier_stages(a.finetune or a.resume)  # the runs before this one: the recipe is all of them
    rng = np.random.default_rng([a.seed, 7])
    history, best, losses, kinds, t0 = [], -1.0, [], {}, time.time()
    model.train()
    model.model.video_tower.eval()
    for step in range(1, a.steps + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(step - 1) * g["scale"]
        seqs, feats, kind = d.step(step, rng)
        kinds[kind.split()[-1]] = kinds.get(kind.split()[-1], 0) + len(seqs)
        ids, _, w = td.collate(seqs)
        logits = forward(model, ids, feats)
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        loss = (ce * w[:, :-1].reshape(-1)).sum() / w.sum()
        if heads is not None:  # keep what the tower found (shape above all) plain in what the LLM reads
            x, pt, ft = d.frame_batch(feats, rng, a.proj_frames, grid)
            proj_loss, _ = heads.loss(model.model.multi_modal_projector(x.float()), pt, ft, a.brief_weight)
            loss = loss + a.proj_weight * proj_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
        opt.step()
        losses.append(loss.item())
        elapsed = time.time() - t0
        if step % 50 == 0:
            log(f"step {step} loss {np.mean(losses[-50:]):.4f} lr {lr_at(step):.2e} {elapsed / step:.2f}s/step "
                f"sequences {kinds}")
        out_of_time = elapsed > a.max_minutes * 60
        if step % a.eval_every == 0 or step == a.steps or out_of_time:
            ev = evaluate(model, tok, tpf, val, counts)
            history.append({"step": step, "minutes": elapsed / 60, **ev})
            log(f"EVAL step {step}: " + json.dumps({k: ({t: round(x, 3) for t, x in v.items()}
                                                        if isinstance(v, dict) else round(v, 1))
                                                    for k, v in ev.items()}))
            if score(ev) > best:
                best = score(ev)
                info = {"args": asdict(a), "recipe": "scripts/train_long_frozen_tower.py", "step": step,
                        "params": sum(p.numel() for p in model.parameters()),
                        "tower": {"held_back_accuracy": data["tower_acc"], "minutes": data["tower_minutes"]},
                        "prep_minutes": data["prep_minutes"], "seconds_per_step": elapsed / step,
                        "train_minutes": elapsed / 60, "sequences": kinds, "validation": ev, "history": history,
                        **({"stages": stages} if stages else {})}
                td.save(model, processor, out, info)
                log(f"  saved {out} (step {step})")
        if out_of_time:
            log(f"stopping at step {step}: time limit {a.max_minutes} min")
            break
        if step == a.stop_at:  # no evaluation of its own: a run cut by hand had none (stage 1's was at step 1200)
            log(f"stopping at step {step}: --stop-at")
            break
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
