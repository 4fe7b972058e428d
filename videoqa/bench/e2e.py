"""The `e2e` suite: an MSVD-shaped workload end to end, per method, with and without the prefix cache.

`videoqa bench e2e [--clips N] [--model demo]`: the sample clips shipped with videoqa plus N generated ones (held-out
demo scenes), 20 questions each, clip by clip as `videoqa eval` goes: one question at a time (`--batch-size 1`, the
default), then each clip's questions as one left-padded batch (`--batch-size 20`). For every method it prints
the time per question by stage (frame decoding, vision tower, selection, prefill, decoding, the rest: Python,
tokenising, batching) and each stage's share, with the prefix cache off and on, the speed-up, whether the answers are
identical (and the process's CPU seconds per question: on a shared machine the wall clock also counts
other processes), and the method's end-to-end speed-up over no pruning next to its FLOPs ratio: how much of the LLM's
saving survives the other stages. Then the web chat's case: a 3-turn conversation on each clip, each turn with the
conversation so far as history, with and without the prefix cache (the third turn reuses the second's prompt).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from ..model import load_model, packaged_path
from ..pruning import PruneConfig
from ..pruning.registry import REGISTRY

QUESTIONS_PER_CLIP = 20
STAGES = ("frames", "vision", "select", "prefill", "decode", "other")
PHRASINGS = ("{q}", "Question: {q}", "Look at the video. {q}")  # 9 templates x 3: 20 distinct questions a clip
CHAT = ("What colour is the shape?", "What shape is it?", "Which way does it move?")


def clip_questions(colour: str, shape: str) -> list[str]:
    """20 distinct questions about a clip of a `colour` `shape` (the demo model's question templates)."""
    from ..synth.short import QUESTION_TYPES, TEMPLATES

    base = [t.format(colour=colour, shape=shape) for qt in QUESTION_TYPES for t in TEMPLATES[qt]]
    return [p.format(q=q) for p in PHRASINGS for q in base][:QUESTIONS_PER_CLIP]


def workload(folder: Path, n_generated: int) -> list[tuple[Path, list[str]]]:
    """(clip, its questions): the shipped sample clips, then `n_generated` held-out demo scenes."""
    from ..synth.short import make_split, render, write_mp4

    samples = packaged_path("clips")
    facts: dict[str, dict[str, str]] = {}
    for q in json.loads((samples / "questions.json").read_text()):
        facts.setdefault(q["video"], {})[q["type"]] = q["answer"]
    out = [(samples / name, clip_questions(f["colour"], f["shape"])) for name, f in sorted(facts.items())]
    for scene in make_split("test", n_generated, seed=34):
        path = write_mp4(render(scene), folder / f"{scene.name}.mp4")
        out.append((path, clip_questions(scene.colour, scene.shape)))
    return out


def measure(qa, work: list[tuple[Path, list[str]]], cfg: PruneConfig, batched: bool) -> dict:
    """Ask every question clip by clip, one at a time or each clip's questions as one batch. Per question: seconds
    by stage (a batch's prefill and decoding shared by its questions; "other" is the wall time no stage accounts
    for), answers, FLOPs ratio, prefix-cache hits, and each clip's kept sets."""
    totals = dict.fromkeys(STAGES[:-1], 0.0)
    answers, ratios, hits, kept, tokens = [], [], 0, [], []
    qa.ask(work[0][0], "What colour is the shape?", prune=cfg)  # warm-up: first-call costs are not the workload's
    if qa.prefix_cache is not None:
        qa.prefix_cache.clear()
    qa._encoded.clear(), qa._clips.clear(), qa._selections.clear()  # every clip decoded and encoded once, measured
    t0, cpu0 = time.perf_counter(), time.process_time()
    for clip, questions in work:
        groups = [[(clip, q) for q in questions]] if batched else [[(clip, q)] for q in questions]
        kept.append([])
        for group in groups:
            got = qa.ask_batch(group, prune=cfg)
            for a in got:
                s = a.stats
                totals["frames"] += s.t_sample
                totals["vision"] += s.t_encode
                totals["select"] += s.t_select
                answers.append(a.text)
                kept[-1].append(tuple(a.kept.kept))
                ratios.append(a.flops.ratio)
                hits += s.prefix_cached
                tokens.append((s.prompt_tokens, a.kept.offset + s.kept_visual_tokens))
            totals["prefill"] += got[0].stats.t_prefill
            totals["decode"] += got[0].stats.t_generate
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n = len(answers)
    per_q = {s: v / n for s, v in totals.items()}
    per_q["other"] = max(0.0, wall / n - sum(per_q.values()))
    return {"per_q": per_q, "wall_per_q": wall / n, "cpu_per_q": cpu / n, "answers": answers,
            "flops": sum(ratios) / n, "hits": hits, "n": n, "kept": kept, "tokens": tokens,
            "question_independent": cfg.method_spec.question_independent, "per_clip": n / len(work)}


def cache_bound(off: dict, on: dict) -> float | None:
    """The most the prefix cache could give a method (None for one acting inside the LLM): its uncached time a
    question over what a cached question cannot avoid, were its Python free: its clip's frames, tower and selection
    and its decoding (as measured with the cache), and its share of the clip's prefix prefill plus its own prompt
    tokens after the video, each token at the uncached prefill's cost a prompt token."""
    if not off["question_independent"] or not off["tokens"]:
        return None
    prompt = sum(t for t, _ in off["tokens"]) / len(off["tokens"])
    prefix = sum(p for _, p in off["tokens"]) / len(off["tokens"])
    per_token = off["per_q"]["prefill"] / prompt
    floor = (sum(on["per_q"][s] for s in ("frames", "vision", "select", "decode"))
             + per_token * (prefix / off["per_clip"] + prompt - prefix))
    return off["wall_per_q"] / floor


def kept_set_overlap(kept: list[list[tuple[int, ...]]]) -> str:
    """How alike a method's kept sets are across each clip's questions: what an in-LLM method (FastV) could share
    between questions beyond layers < K, since a kept token's keys at layer >= K depend on every kept one before
    it."""
    same, starts, n = 0, [], 0
    for clip in kept:
        for other in clip[1:]:
            n += 1
            if other == clip[0]:
                same += 1
                continue
            starts.append(next((i for i, (a, b) in enumerate(zip(clip[0], other, strict=False)) if a != b),
                               min(len(clip[0]), len(other))))
    line = f"{same} of {n} questions kept the same set as their clip's first question"
    if starts:
        line += (f"; the others' sorted kept lists agree with it on their first {min(starts)}-{max(starts)} tokens "
                 f"(median {sorted(starts)[len(starts) // 2]}, of {len(kept[0][0])})")
    return line


def configs() -> list[PruneConfig]:
    return [PruneConfig(method=m.name) if not m.uses_r else PruneConfig(method=m.name, r=0.5) for m in REGISTRY]


def run_e2e(model: str = "demo", n_generated: int = 2, device: str | None = None,
            methods: list[str] | None = None) -> str:
    """The suite's tables (`methods`: those registered methods only, by name, and "none", the reference; default
    all)."""
    from ..pipeline import VideoQA

    loaded = load_model(model, device)
    with tempfile.TemporaryDirectory(prefix="videoqa-e2e-") as tmp:
        work = workload(Path(tmp), n_generated)
        tables = []
        for batched in (False, True):
            results = {}
            for cfg in [c for c in configs() if methods is None or c.method in {"none", *methods}]:
                for cached in (False, True):
                    qa = VideoQA(loaded, max_new_tokens=16, prefix_cache_bytes=None if cached else 0)
                    results[cfg.method, cached] = measure(qa, work, qa._config(cfg, None)[0], batched)
            n_q = sum(len(q) for _, q in work)
            how = "each clip's questions as one batch" if batched else "one question at a time"
            tables.append(format_tables(results, f"{model}, {len(work)} clips x {QUESTIONS_PER_CLIP} questions "
                                                 f"({n_q}), clip by clip, {how}, device {loaded.device}"))
            if ("fastv", False) in results and not batched:
                tables[-1] += f"\n\nFastV's kept sets: {kept_set_overlap(results['fastv', False]['kept'])}"
        for cfg in (None, PruneConfig(method="none")):  # the web page's default settings, and no pruning
            qas = {cached: VideoQA(loaded, max_new_tokens=16, prefix_cache_bytes=None if cached else 0, prune=cfg)
                   for cached in (False, True)}
            chats = {cached: measure_chat(qa, [clip for clip, _ in work]) for cached, qa in qas.items()}
            title = f"{model}, {_setting(qas[True].prune)}, {len(work)} clips x a {len(CHAT)}-turn chat, " \
                    f"device {loaded.device}"
            tables.append(format_chat(chats, title))
    return "\n\n".join(tables)


def _setting(cfg: PruneConfig) -> str:
    """'fastv K=2 R=auto', 'none'."""
    k = f" K={cfg.layer}" if cfg.layer is not None else ""
    return f"{cfg.method}{k}{f' R={cfg.r}' if cfg.method_spec.uses_r else ''}"


def measure_chat(qa, clips: list[Path], questions: tuple[str, ...] = CHAT) -> list[dict]:
    """Per turn, over a conversation on each clip (the model's answers as history): mean prefill and wall
    seconds, mean prompt tokens served by the prefix cache, and the answers."""
    qa.ask(clips[0], "What is shown?")  # warm-up
    if qa.prefix_cache is not None:
        qa.prefix_cache.clear()
    turns = [{"prefill": 0.0, "wall": 0.0, "reused": 0, "answers": []} for _ in questions]
    for clip in clips:
        history: list[tuple[str, str]] = []
        for turn, question in zip(turns, questions, strict=True):
            reused = qa.prefix_cache.reused_tokens if qa.prefix_cache is not None else 0
            t0 = time.perf_counter()
            answer = qa.ask(clip, question, history=history)
            turn["wall"] += (time.perf_counter() - t0) / len(clips)
            turn["prefill"] += answer.stats.t_prefill / len(clips)
            if qa.prefix_cache is not None:
                turn["reused"] += (qa.prefix_cache.reused_tokens - reused) / len(clips)
            turn["answers"].append(answer.text)
            history.append((question, answer.text))
    return turns


def format_chat(chats: dict[bool, list[dict]], title: str) -> str:
    lines = [f"Chat follow-ups: {title}",
             "| turn | prefill ms, cache off | prefill ms, on | ms / turn, off | ms / turn, on "
             "| prompt tokens from the cache | speed-up | same answers |", "|---|---|---|---|---|---|---|---|"]
    for i, (off, on) in enumerate(zip(chats[False], chats[True], strict=True)):
        lines.append(f"| {i + 1} | {1000 * off['prefill']:.1f} | {1000 * on['prefill']:.1f} | {1000 * off['wall']:.1f} "
                     f"| {1000 * on['wall']:.1f} | {on['reused']:.0f} | {off['wall'] / on['wall']:.2f}x | "
                     f"{'yes' if on['answers'] == off['answers'] else 'NO'} |")
    return "\n".join(lines)


def format_tables(results: dict, title: str) -> str:
    head = ("| method | prefix cache | ms / question | " + " | ".join(f"{s} ms (%)" for s in STAGES)
            + " | prefix hits | speed-up | cache's bound | CPU ms / question | CPU speed-up | same answers |")
    lines = [f"End to end: {title}", head, "|" + "---|" * (head.count("|") - 1)]
    methods = list(dict.fromkeys(m for m, _ in results))
    for m in methods:
        off, on = results[m, False], results[m, True]
        for cached, r in ((False, off), (True, on)):
            total = sum(r["per_q"].values())
            stages = " | ".join(f"{1000 * r['per_q'][s]:.1f} ({100 * r['per_q'][s] / total:.0f}%)" for s in STAGES)
            speed = f"{off['wall_per_q'] / on['wall_per_q']:.2f}x" if cached else "1.00x"
            cpu_speed = f"{off['cpu_per_q'] / on['cpu_per_q']:.2f}x" if cached else "1.00x"
            same = ("yes" if on["answers"] == off["answers"] else "NO") if cached else "-"
            bound = cache_bound(off, on) if cached else None
            lines.append(f"| {m} | {'on' if cached else 'off'} | {1000 * r['wall_per_q']:.1f} | {stages} | "
                         f"{r['hits']}/{r['n']} | {speed} | {'-' if bound is None else f'{bound:.2f}x'} | "
                         f"{1000 * r['cpu_per_q']:.1f} | {cpu_speed} | {same} |")
    lines += ["", "Each method against no pruning (same cache setting): the end-to-end speed-up next to 1 / its FLOPs "
              "ratio, the speed-up its LLM FLOPs promise.",
              "| method | FLOPs % | FLOPs promise | e2e speed-up, cache off | e2e speed-up, cache on |",
              "|---|---|---|---|---|"]
    for m in methods:
        r = results[m, False]
        promise = 1 / r["flops"] if r["flops"] else float("inf")
        e2e = [results["none", c]["wall_per_q"] / results[m, c]["wall_per_q"] for c in (False, True)]
        lines.append(f"| {m} | {100 * r['flops']:.1f} | {promise:.2f}x | {e2e[0]:.2f}x | {e2e[1]:.2f}x |")
    return "\n".join(lines)
