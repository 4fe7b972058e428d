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

import hashlib
import json
import math
import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..batch.local import local_records
from ..batch.run import summarize_answer
from ..batch.store import latest_by_key, read_records
from ..eval.datasets import QADataset, load_dataset
from ..eval.judges import ExactJudge
from ..eval.run import run_eval
from ..model_policy import ModelPolicy
from ..models.video_llava import video_llava_7b_dims
from ..pruning import REGISTRY, ModelDims, PruneConfig
from ..pruning.adaptive import AdaptivePolicy
from ..pruning.flops import estimate_flops
from .accuracy import exact_hits
from .long_reads import evaluate_reads, format_reads
from .long_rows import fidelity_rows, format_fidelity, row_inputs, sampler_rows

MAX_NEW = 8  # answers are one or two words
SPLIT_CLIPS = 120  # the whole held-out (and validation) split
BUCKETS = (("≤10 s", 10.0), ("10–30 s", 30.0), (">30 s", math.inf))  # (label, longest duration)
THIRDS = ("first", "middle", "last")
FASTVID_RATIOS = (0.5, 0.75, 0.9, 0.95)
FRAME_FLOOR = 0.5  # the floor row's share (chosen on the validation split)
LONG_K = 2  # FastV's layer in this table's rows (chosen on the validation split)


@dataclass(frozen=True)
class Row:
    """One policy: which frames, pruned how.

    frames: a count; "max" (per question, the most whose unpruned tokens fit the context); or "auto" (the
    adaptive policy's: the pipeline decides them when R is "auto", and a fixed-R row takes the adaptive
    FastV row's frames for the same question, so both see the same frames)."""

    label: str
    prune: PruneConfig
    frames: int | str = "auto"
    policy: AdaptivePolicy | None = None  # None: the model's (its videoqa.json, else Video-LLaVA-7B's defaults)
    # None: the model's default frame sampler (its card's); "uniform" pins the baseline every reference row uses,
    # whatever the card says; "oracle": long_rows.oracle_clip
    sampler: str | None = None
    match_flops: bool = False  # R (and frames) per question: the FLOPs of unpruned 8 frames (long_rows)

    def config(self, model: str, split: str, card: ModelPolicy | None = None) -> dict:
        """What the row runs; `card`: the model's own policy, which fills what the row leaves unset (so a card
        rewritten by `--sweep --write-card` never resumes a run made with the old constants)."""
        policy = self.policy or (card.policy if card else AdaptivePolicy())
        sampler_used = self.sampler or (card.sampler if card else None)
        # absent when uniform: run folders made before samplers existed keep their names
        sampler = ({"sampler": sampler_used} if sampler_used not in (None, "uniform") else {}) | (
            {"match_flops": True} if self.match_flops else {})
        return {"dataset": f"long-{split}", "model": model, "prune": self.prune.to_dict(), "frames": self.frames,
                "policy": asdict(policy) if self.prune.adaptive or self.frames == "auto" else None} | sampler

    def folder(self, model: str, split: str, card: ModelPolicy | None = None) -> str:
        """A folder name that changes whenever the configuration does, so a resumed run never mixes two."""
        digest = hashlib.sha1(json.dumps(self.config(model, split, card), sort_keys=True).encode()).hexdigest()[:8]
        return re.sub(r"[^a-z0-9.]+", "-", self.label.lower()).strip("-") + "-" + digest


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
    (with `erase`: the same clips with their events erased, the counterfactual of `long_reads`).

    A smaller split is a prefix of a larger one, so run folders stay valid when `clips` changes."""
    marker = root / "split.json"
    wanted = {"split": split, "clips": clips, "seed": seed} | ({"erased": True} if erase else {})
    if not (marker.exists() and json.loads(marker.read_text()) == wanted):
        from ..synth import long as synth_long

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
    from ..synth import long as synth_long

    event_types = {t for types in synth_long.KIND_TYPES.values() for t in types}
    scenes = {s["name"]: s for s in json.loads((root / "scenes.json").read_text())}
    videos = {q["question_id"]: q["video_name"] for q in json.loads((root / "test_q.json").read_text())}
    info = {}
    for a in json.loads((root / "test_a.json").read_text()):
        scene = scenes[videos[a["question_id"]]]
        bucket = next(label for label, longest in BUCKETS if scene["duration_s"] <= longest)
        third = scene["event_third"] if a["type"] in event_types else None
        info[a["question_id"]] = QuestionInfo(a["type"], bucket, third)
    return info


def resolve_frames(row: Row, rows: list[Row], done: dict[str, dict], dims: ModelDims) -> dict[tuple, int | None]:
    """(video, question) -> frames for this row (None: the pipeline decides), from rows already run."""
    if isinstance(row.frames, int):
        return {}
    if row.frames == "max":
        ref = done[rows[0].label]  # the unpruned 8-frame row: its prompt length gives each question's room
        return {(rec["video"], rec["question"]): (dims.context - _n_text(rec) - MAX_NEW) // dims.tokens_per_frame
                for rec in ref.values() if not rec.get("error")}
    if row.prune.adaptive:
        return {}
    source = next(r for r in rows if r.prune.method == "fastv" and r.prune.adaptive and r.frames == "auto")
    return {(rec["video"], rec["question"]): rec["stats"]["frames"]
            for rec in done[source.label].values() if not rec.get("error")}


def _n_text(rec: dict) -> int:
    """Prompt tokens besides the visual ones (the prompt itself may hold only the kept visual tokens)."""
    return rec["flops"]["n_tokens"] - rec["kept"]["n_visual"]


def run_row(qa, ds: QADataset, runs: Path, row: Row, model: str, split: str, frames: dict) -> dict[str, dict]:
    """Evaluate one row (resumable); its predictions by question id."""
    cfg = row.prune.validate(qa.dims.n_layers)
    qa.policy = row.policy or qa.model_policy.policy

    def answer(video: str, question: str) -> dict:
        n = row.frames if isinstance(row.frames, int) else frames.get((video, question))
        if n is None and row.frames != "auto":
            raise ValueError(f"no reference run gives this question's frames for {row.label!r}")
        shown, cfg_q, n, sampler = row_inputs(qa, row, cfg, video, question, n)
        return summarize_answer(qa.ask(shown, question, prune=cfg_q, frames=n, sampler=sampler).to_dict())

    out = runs / row.folder(model, split, qa.model_policy)
    run_eval(ds, out, lambda todo: local_records(todo, answer), ExactJudge(), row.config(model, split, qa.model_policy),
             progress=False)
    wanted = {it.question_id for it in ds.present}
    return {k: v for k, v in latest_by_key(read_records(out / "predictions.jsonl")).items() if k in wanted}


@dataclass
class RowResult:
    """What the table shows for one row: (hits, questions) per group, and cost figures."""

    label: str
    groups: dict[str, tuple[int, int]]
    frames: dict[str, float]  # bucket (or "all") -> mean frames
    kept: float
    flops: dict[str, float]  # bucket (or "all") -> FLOPs / unpruned-8-frame FLOPs, the model's dims
    flops_7b: dict[str, float]  # the same at Video-LLaVA-7B's dims
    prefill_s: float
    errors: int
    prefill_ratio: float | None = None
    extra: dict = field(default_factory=dict)

    def accuracy(self, group: str) -> float | None:
        h, n = self.groups.get(group, (0, 0))
        return h / n if n else None


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
        n_text, n_vis, n_kept = _n_text(rec), rec["kept"]["n_visual"], rec["kept"]["n_kept"]
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
    from ..pipeline import VideoQA

    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    runs = Path(runs_dir)
    clips = SPLIT_CLIPS if clips is None else clips
    root = long_split(runs / f"{split}-split", split, clips)
    qa = VideoQA.from_pretrained(model, device=device, max_new_tokens=MAX_NEW)
    rows = rows or default_rows(k)
    results = evaluate_rows(qa, root, runs / split, rows, model, split)
    from ..synth import long as synth_long

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
