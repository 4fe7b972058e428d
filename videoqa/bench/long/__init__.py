"""`videoqa bench long`: adaptive R where video length matters, on the held-out long-clip split.

The split (clips of 4-60 s whose answer may hang on a brief event: `videoqa.synth.long`) is written
into the runs folder on first use. Each row — a frame rule and a pruning configuration — is one resumable
eval run through the machinery of `videoqa eval` and `bench accuracy`, and the table is computed from the
run folders' predictions alone, so an interrupted run resumes and a finished one re-prints the same table.

Columns: strict exact match per clip-length bucket, per event position (event questions only: where the
clip's brief events sit) and per question type; mean frames and kept visual tokens; prefill FLOPs relative
to unpruned 8 frames on the same question, by the model's own dimensions and by Video-LLaVA-7B's for the
same token counts; measured prefill time relative to the unpruned 8-frame row.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ...eval.datasets import load_dataset
from ...models.video_llava import video_llava_7b_dims
from ...pruning import REGISTRY, ModelDims, PruneConfig
from ...pruning.flops import estimate_flops
from ..accuracy import exact_hits, split_marker, split_rows
from .core import (
    BUCKETS,
    FASTVID_RATIOS,
    FRAME_FLOOR,
    LONG_K,
    MAX_NEW,
    SPLIT_CLIPS,
    THIRDS,
    Row,
    RowResult,
    read_scenes,
    resolve_frames,
    text_tokens_of,
)
from .reads import evaluate_reads, format_reads
from .rows import fidelity_rows, format_fidelity, sampler_rows
from .run import run_row


def default_rows(k: int = LONG_K) -> list[Row]:
    fastv = PruneConfig(method="fastv", k=k, r="auto")
    rows = [  # the references: uniform frames, whatever sampler the model's card prefers
        Row("8 frames, unpruned", PruneConfig(method="none"), 8, sampler="uniform"),
        Row("8 frames, FastV R=0.5", PruneConfig(method="fastv", k=k, r=0.5), 8, sampler="uniform"),
        Row("max frames, unpruned", PruneConfig(method="none"), "max", sampler="uniform"),
        Row("adaptive FastV", fastv),
        Row(f"adaptive FastV, frame floor {FRAME_FLOOR}", replace(fastv, frame_floor=FRAME_FLOOR)),
        Row("adaptive VisPruner", PruneConfig(method="vispruner", r="auto")),
        Row("adaptive VisPruner, kept positions", PruneConfig(method="vispruner", r="auto", keep_positions=True)),
        Row("adaptive random", PruneConfig(method="random", r="auto")),
    ]
    if "fastvid" in REGISTRY:
        rows += [Row(f"FastVID R={r}", PruneConfig(method="fastvid", r=r)) for r in FASTVID_RATIOS]
    return rows + sampler_rows(fastv) + fidelity_rows(k)


def long_split(root: Path, split: str, clips: int, seed: int = 0, erase: bool = False) -> Path:
    """Write the first `clips` clips of the long-clip `split` ("test" or "val") under `root`, unless already there
    (with `erase`: the same clips with their events erased, the counterfactual of `reads`).

    A smaller split is a prefix of a larger one, so run folders stay valid when `clips` changes."""
    marker = root / "split.json"
    wanted = {"split": split, "clips": clips, "seed": seed} | ({"erased": True} if erase else {})
    if split_marker(marker) != wanted:
        from ...synth import long as synth_long

        scenes = {"test": synth_long.test_scenes, "val": synth_long.val_scenes}[split](clips, seed)
        synth_long.write_eval_split(root, scenes, seed, erase=erase)
        marker.write_text(json.dumps(wanted))
    return root


@dataclass(frozen=True)
class QuestionInfo:
    type: str
    bucket: str
    third: str | None  # where the clip's events sit, for questions about an event; None otherwise


def question_info(root: Path) -> dict[str, QuestionInfo]:
    from ...synth import long as synth_long

    event_types = {t for types in synth_long.KIND_TYPES.values() for t in types}
    scenes = read_scenes(root)
    videos = {q["question_id"]: q["video_name"] for q in split_rows(root, "test_q.json", "video_name")}
    info = {}
    for a in split_rows(root, "test_a.json", "type"):
        scene = scenes[videos[a["question_id"]]]
        bucket = next(label for label, longest in BUCKETS if scene["duration_s"] <= longest)
        third = scene["event_third"] if a["type"] in event_types else None
        info[a["question_id"]] = QuestionInfo(a["type"], bucket, third)
    return info


def measure(label: str, preds: dict[str, dict], hits: dict[str, bool], info: dict[str, QuestionInfo],
            dims: ModelDims) -> RowResult:
    """Accuracy per group and FLOPs per bucket of one row's predictions (error records count as misses)."""
    dims_7b = video_llava_7b_dims()
    groups: dict[str, list[int]] = {}
    sums: dict[tuple[str, str, str], float] = {}
    ok = [(qid, rec) for qid, rec in preds.items() if not rec.get("error")]
    for qid in preds:
        q = info[qid]
        for g in ("all", q.bucket, q.type) + ((f"event {q.third}", f"event {q.bucket}") if q.third else ()):
            groups.setdefault(g, [0, 0])
            groups[g][0] += bool(hits.get(qid))
            groups[g][1] += 1
    for qid, rec in ok:
        n_text, n_vis, n_kept = text_tokens_of(rec), rec["kept"]["n_visual"], rec["kept"]["n_kept"]
        base = 8 * dims.tokens_per_frame  # the reference: 8 frames, unpruned, same question
        for name, d in (("own", dims), ("7b", dims_7b)):
            cost = estimate_flops(d, n_text, n_vis, n_kept, rec["flops"]["layer"]).pruned
            ref = estimate_flops(d, n_text, base, base, None).full
            for g in ("all", info[qid].bucket):
                sums[name, g, "cost"] = sums.get((name, g, "cost"), 0.0) + cost
                sums[name, g, "ref"] = sums.get((name, g, "ref"), 0.0) + ref

    def ratios(name: str) -> dict[str, float]:
        return {g: sums[name, g, "cost"] / sums[name, g, "ref"] for (n, g, part) in sums if n == name and part == "ref"}

    return RowResult(label, {g: (h, n) for g, (h, n) in groups.items()},
                     frames={g: _mean([rec["stats"]["frames"] for qid, rec in ok if g in ("all", info[qid].bucket)])
                             for g in ["all", *(b for b, _ in BUCKETS)]},
                     kept=_mean([rec["kept"]["n_kept"] for _, rec in ok]),
                     flops=ratios("own"), flops_7b=ratios("7b"),
                     prefill_s=_mean([rec["stats"]["t_prefill"] for _, rec in ok]),
                     errors=len(preds) - len(ok))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _pct(x: float | None) -> str:
    return "–" if x is None or x != x else f"{100 * x:.1f}"


def per_bucket(values: dict[str, float], scale: float = 100, spec: str = ".0f") -> str:
    return " / ".join(f"{scale * values[b]:{spec}}" if values.get(b, math.nan) == values.get(b, math.nan) else "–"
                      for b, _ in BUCKETS)


def format_table(results: list[RowResult], types: list[str]) -> str:
    """Markdown: one row per policy."""
    buckets = [b for b, _ in BUCKETS]
    head = (["policy", "frames (≤10 / 10–30 / >30 s)", "kept tokens", "FLOPs % own dims (≤10 / 10–30 / >30 s)",
             "FLOPs % 7B dims (≤10 / 10–30 / >30 s)", "prefill time %", "all"] + buckets
            + [f"event {t}" for t in THIRDS] + types)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.label + (f" ({r.errors} errors)" if r.errors else ""), per_bucket(r.frames, 1, ".1f"),
                 f"{r.kept:.0f}", per_bucket(r.flops), per_bucket(r.flops_7b), _pct(r.prefill_ratio)]
        cells += [_pct(r.accuracy(g)) for g in ["all", *buckets, *[f"event {t}" for t in THIRDS], *types]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[RowResult], png: Path) -> Path:
    """One panel per length bucket: accuracy vs prefill FLOPs (% of unpruned 8 frames, own dims), a point per row."""
    from matplotlib.figure import Figure  # a bare Figure renders with Agg: no pyplot, no global backend
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig = Figure(figsize=(15, 4.8))
    axes = fig.subplots(1, len(BUCKETS), sharey=True)
    markers = "os^vD<>pPX*hH+x"
    for ax, (bucket, _) in zip(axes, BUCKETS, strict=True):
        for i, r in enumerate(results):
            if bucket in r.flops and r.accuracy(bucket) is not None:
                ax.plot(100 * r.flops[bucket], 100 * r.accuracy(bucket), markers[i % len(markers)], ms=8,
                        label=r.label)
        ax.axvline(100, color="gray", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xticks([10, 25, 50, 100, 200, 400, 800])
        ax.xaxis.set_major_formatter(ScalarFormatter())  # 50, 100, 400 rather than 10^2 and crowded minor labels
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"clips {bucket}")
        ax.set_xlabel("prefill FLOPs, % of unpruned 8 frames (model's own dims, log)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact match (%)")
    axes[-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    return png


def evaluate_rows(qa, root: Path, runs: Path, rows: list[Row], model: str, split: str) -> list[RowResult]:
    """Run (or resume) every row in order and measure it; rows[0] must be the unpruned 8-frame reference."""
    if not (rows[0].frames == 8 and rows[0].prune.method == "none"):
        raise ValueError("the first row must be 8 frames, unpruned: every ratio is relative to it")
    ds = load_dataset("msvd", root)
    info = question_info(root)
    done: dict[str, dict] = {}
    results = []
    for row in rows:
        preds = run_row(qa, ds, runs, row, model, split, resolve_frames(row, rows, done, qa.dims))
        done[row.label] = preds
        hits = exact_hits(root, runs / row.folder(model, split, qa.model_policy) / "predictions.jsonl")
        results.append(measure(row.label, preds, {q: hits[q] for q in preds}, info, qa.dims))
    ref = done[rows[0].label]
    for r, row in zip(results, rows, strict=True):  # prefill time over the questions both answered
        common = [q for q, rec in done[row.label].items() if not rec.get("error") and not ref[q].get("error")]
        if common:
            r.prefill_ratio = (sum(done[row.label][q]["stats"]["t_prefill"] for q in common)
                               / sum(ref[q]["stats"]["t_prefill"] for q in common))
    return results


def _has_fidelity(rows: list[Row], k: int) -> bool:
    labels = {r.label for r in rows}
    return all(r.label in labels for r in fidelity_rows(k)) and {"8 frames, unpruned", "max frames, unpruned"} <= labels


def run_long(model: str = "demo-long", runs_dir: str | Path = "runs/long", clips: int | None = None,
             device: str | None = None, split: str = "test", rows: list[Row] | None = None, k: int = LONG_K) -> str:
    """The long-clip table (and its plot) for `model` on the first `clips` clips of `split`."""
    from ...pipeline import VideoQA

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    runs = Path(runs_dir)
    clips = SPLIT_CLIPS if clips is None else clips
    root = long_split(runs / f"{split}-split", split, clips)
    qa = VideoQA.from_pretrained(model, device=device, max_new_tokens=MAX_NEW)
    rows = rows or default_rows(k)
    results = evaluate_rows(qa, root, runs / split, rows, model, split)
    from ...synth import long as synth_long

    types = [t for t in synth_long.QUESTION_TYPES if any(t in r.groups for r in results)]
    png = plot(results, runs / f"long_{split}_accuracy_vs_flops.png")
    erased_root = long_split(runs / f"{split}-split-erased", split, clips, erase=True)
    reads = evaluate_reads(qa, root, erased_root, runs, model, split)
    counts = ", ".join(f"{b}: {results[0].groups.get(b, (0, 0))[1]}" for b, _ in BUCKETS)
    d = qa.dims
    return (f"Long clips: {model} on {clips} clips of the {split} split, {results[0].groups['all'][1]} questions "
            f"({counts}); greedy, strict exact match %. FLOPs: prefill, % of unpruned 8 frames on the same "
            f"question, by the model's own dims ({d.n_layers} layers, d={d.hidden}, m={d.ffn}) and by "
            f"Video-LLaVA-7B's (32 layers, d=4096, m=11008) for the same token counts; FastV K="
            f"{next((r.prune.k for r in rows if r.prune.method == 'fastv'), '-')}. Prefill time: measured, "
            f"% of the unpruned 8-frame row. Event position: questions about the brief event only.\n"
            + format_table(results, types)
            + (f"\n\nMany frames (FastV K={k}; original positions): accuracy kept at R=0.9 against the same frames "
               "unpruned, and at the prefill FLOPs of unpruned 8 frames against those (own dims):\n"
               + format_fidelity(results, k) if _has_fidelity(rows, k) else "")
            + "\n\nReads the event (unpruned; erased: the same clips rendered without their events; shown: the "
              "sampled frames show every event; reads: right with the event and a different answer without it; "
              "blind: each type's most common answer on the split):\n" + format_reads(reads)
            + f"\nplot -> {png}\n{time.perf_counter() - t0:.0f} s, load average {load0:.1f} at the start, "
              f"{os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs)")
