"""`videoqa bench long --sweep`: the adaptive policy's constants, measured on the validation split.

Each variant is adaptive FastV with one set of constants, run like a row of `videoqa bench long` (the same
resumable run folders) on the validation split, so the held-out split is never looked at while tuning.
The table shows, per variant, accuracy and prefill FLOPs per clip-length bucket against unpruned 8 frames,
and whether it meets the goal: at least 10 points more right on clips > 30 s, at no more FLOPs than
unpruned 8 frames, losing at most 1 point on clips <= 10 s.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ...model_card import write_policy
from ...pruning import PruneConfig
from ...pruning.adaptive import AdaptivePolicy
from . import evaluate_rows, long_split, per_bucket
from .core import BUCKETS, MAX_NEW, SPLIT_CLIPS, Row, RowResult

# (seconds per frame, budget exponent, r_max, K, frame floor, base R): a grid around the frame rate that
# resolves the split's events (24 frames see every event of a 60 s clip) and the FastV layers an 8-layer model
# allows under the FLOPs cap (K=2 caps a 60 s clip at 18 frames, K=1 at 25); the exponent, r_max and the floor
# vary one at a time around 2 s per frame. Then fewer frames (4 and 6 s per frame: a 60 s clip gets 15 and
# 10), and a lighter pruning of the 8 frames short clips get (base R 0.25); last, the content-aware sampler
# (videoqa/video/changes.py) at three rates, and at two with the base frames left unpruned (base R 0: pruning only
# what frames past the base add), to be the default only if it wins. Each row is one pass over the split.
# A variant is (s/frame, γ, r_max, K, floor, base R[, sampler]).
VARIANTS = [
    (spf, 0.25, 0.9, k, 0.0, 0.5) for spf in (1.5, 2.0, 3.0) for k in (1, 2)
] + [
    (2.0, gamma, 0.9, 1, 0.0, 0.5) for gamma in (0.0, 0.5)
] + [
    (2.0, 0.25, 0.95, 1, 0.0, 0.5)
] + [
    (2.0, 0.25, 0.9, k, floor, 0.5) for floor in (0.25, 0.5) for k in (1, 2)
] + [
    (spf, 0.25, 0.9, 2, 0.0, 0.5) for spf in (4.0, 6.0)
] + [
    (spf, 0.25, 0.9, 2, 0.0, 0.25) for spf in (3.0, 6.0)
] + [
    (spf, 0.25, 0.9, 2, 0.0, 0.5, "content") for spf in (2.0, 3.0, 6.0)
] + [
    (spf, 0.25, 0.9, 2, 0.0, 0.0, "content") for spf in (3.0, 6.0)
]


def sweep_rows(variants: list[tuple] | None = None) -> list[Row]:
    rows = [Row("8 frames, unpruned", PruneConfig(method="none"), 8, sampler="uniform"),
            Row("8 frames, FastV R=0.5", PruneConfig(method="fastv", k=2, r=0.5), 8, sampler="uniform")]
    for spf, gamma, r_max, k, floor, base_r, *sampler in variants or VARIANTS:
        policy = replace(AdaptivePolicy(), seconds_per_frame=spf, budget_exponent=gamma, r_max=r_max, base_r=base_r)
        label = f"s/frame {spf:g}, γ {gamma:g}, r_max {r_max:g}, K {k}, floor {floor:g}"
        label += (f", base R {base_r:g}" if base_r != 0.5 else "") + (f", {sampler[0]} sampler" if sampler else "")
        rows.append(Row(label, PruneConfig(method="fastv", k=k, r="auto", frame_floor=floor), "auto", policy,
                        sampler=sampler[0] if sampler else "uniform"))
    return rows


def _delta(r: RowResult, ref: RowResult, bucket: str) -> float | None:
    """Points gained over the reference in a bucket (None: no questions there)."""
    a, b = r.accuracy(bucket), ref.accuracy(bucket)
    return None if a is None or b is None else 100 * (a - b)


def goal(r: RowResult, ref: RowResult) -> str:
    """Whether a row meets the goal against the unpruned 8-frame reference, with the failing parts named."""
    gain, change = _delta(r, ref, BUCKETS[-1][0]), _delta(r, ref, BUCKETS[0][0])
    if gain is None or change is None:
        return "– (a bucket has no questions)"
    eps = 1e-9  # counts of questions: 0.6 - 0.5 must read as 10 points
    fails = [f"> 30 s {gain:+.1f} < +10"] if gain < 10 - eps else []
    fails += [f"≤ 10 s {change:+.1f} < −1"] if change < -1 - eps else []
    fails += ["FLOPs > 100 %"] if max(r.flops.values()) > 1.0 + 1e-9 else []
    return "yes" if not fails else "no: " + ", ".join(fails)


def format_sweep(results: list[RowResult]) -> str:
    ref = results[0]
    long_ = BUCKETS[-1][0]
    head = ["policy", "frames (≤10 / 10–30 / >30 s)", "kept tokens", "FLOPs % own dims (≤10 / 10–30 / >30 s)", "all",
            *[b for b, _ in BUCKETS], "events > 30 s", "Δ > 30 s", "Δ ≤ 10 s", "goal"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        accs = [r.accuracy(g) for g in ["all", *[b for b, _ in BUCKETS], f"event {long_}"]]
        deltas = [_delta(r, ref, b) for b in (long_, BUCKETS[0][0])]
        lines.append("| " + " | ".join([r.label, per_bucket(r.frames, 1, ".1f"), f"{r.kept:.0f}", per_bucket(r.flops),
                                        *[f"{100 * a:.1f}" if a is not None else "–" for a in accs],
                                        *["–" if d is None else f"{d:+.1f}" for d in deltas], goal(r, ref)]) + " |")
    return "\n".join(lines)


def choose(rows: list[Row], results: list[RowResult]) -> int | None:
    """The variant to ship: most right on clips > 30 s among those within the FLOPs of unpruned 8 frames and
    losing at most 1 point on clips <= 10 s (the goal's constraints); None when none is. Ties: the first."""
    ref = results[0]
    best = None
    for i in range(2, len(rows)):
        r = results[i]
        change, long_acc = _delta(r, ref, BUCKETS[0][0]), r.accuracy(BUCKETS[-1][0])
        if change is None or long_acc is None or change < -1 - 1e-9 or max(r.flops.values()) > 1.0 + 1e-9:
            continue
        if best is None or long_acc > results[best].accuracy(BUCKETS[-1][0]):
            best = i
    return best


def card_policy(row: Row, note: str) -> dict:
    """A sweep row's constants in the model card's "policy" form."""
    p = row.policy or AdaptivePolicy()
    return {"frames": p.base_frames, "k": row.prune.k, "r": p.base_r, "seconds_per_frame": p.seconds_per_frame,
            "budget_exponent": p.budget_exponent, "r_max": p.r_max, "sampler": row.sampler or "uniform",
            "note": note + (f"; FastV frame floor {row.prune.frame_floor:g} (not a card constant: pass "
                            f"--frame-floor)" if row.prune.frame_floor else "")}


def write_choice(folder: str | Path, rows: list[Row], results: list[RowResult], what: str) -> str:
    """Write the chosen variant's constants into `folder`'s videoqa.json; the line saying what was written."""
    i = choose(rows, results)
    if i is None:
        return f"no variant keeps the FLOPs and the short clips' accuracy: {folder} left as it was"
    note = f"videoqa bench long --sweep, {what}: {rows[i].label}; goal: {goal(results[i], results[0])}"
    file = write_policy(folder, card_policy(rows[i], note))
    return f"wrote {rows[i].label!r} into {file}"


def run_sweep(model: str = "demo-long", runs_dir: str | Path = "runs/long", clips: int | None = None,
              device: str | None = None, variants: list[tuple] | None = None,
              write_card: str | Path | None = None) -> str:
    """The sweep table on the first `clips` clips of the validation split; with `write_card`, the chosen
    variant's constants are written into that model folder's videoqa.json."""
    from ...pipeline import VideoQA

    runs = Path(runs_dir)
    clips = SPLIT_CLIPS if clips is None else clips
    root = long_split(runs / "val-split", "val", clips)
    qa = VideoQA.from_pretrained(model, device=device, max_new_tokens=MAX_NEW)
    rows = sweep_rows(variants)
    results = evaluate_rows(qa, root, runs / "val", rows, model, "val")
    n = results[0].groups["all"][1]
    written = ""
    if write_card is not None:
        written = "\n" + write_choice(write_card, rows, results, f"{n} questions of {clips} validation clips, {model}")
    return (f"Policy sweep: adaptive FastV on {clips} clips of the validation split ({n} questions), {model}; "
            f"greedy, strict exact match %; FLOPs: prefill, % of unpruned 8 frames on the same question "
            f"(model's own dims). Goal: > 30 s at least +10 points over unpruned 8 frames, no bucket over 100 % "
            f"FLOPs, ≤ 10 s at most 1 point lost.\n" + format_sweep(results) + written)
