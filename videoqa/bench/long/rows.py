"""Rows of `videoqa bench long` beyond the frame-rule ones: where a sampler could get to, what the content-aware
sampler gets, and how much pruning keeps at many frames.

* **Oracle**: the same frame budget, placed to contain the brief events (and, between two events, a frame
  without one), from the synthetic scene's metadata: the headroom any sampler has at that budget.
* **Content-aware sampler**: videoqa/video/changes.py's frames at the same frame count (so the same tokens and
  FLOPs) as the uniform rows they sit beside.
* **Many-frames fidelity** (the setting of the published "95 % kept at 90 % pruning"): at the most frames the
  context holds, FastV, FastVID and VisPruner with original positions at R=0.9, against those frames unpruned;
  and each at the prefill FLOPs of unpruned 8 frames (the most frames at which R <= 0.9 fits, pruned to fit),
  against unpruned 8 frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...pruning import REGISTRY, PruneConfig
from ...pruning.budget import largest
from ...pruning.flops import estimate_flops
from ...video.clip import frame_indices
from ...video.pyav import _sample_pyav
from .core import Row, RowResult, read_scenes

if TYPE_CHECKING:
    from ...video import Clip

ORACLE = "oracle"  # Row.sampler of the oracle row: not a decoder's sampler
FIDELITY_R = 0.9
FIDELITY_R_MAX = 0.9  # matched FLOPs: the most frames at which pruning at most this much fits
BASE_FRAMES = 8
UNPRUNED_MAX = "max frames, unpruned"
UNPRUNED_8 = "8 frames, unpruned"


def oracle_indices(scene: dict, num_frames: int) -> list[int]:
    """`num_frames` frame numbers, uniform but for the ones moved into each event and each gap between
    consecutive events that no frame shows yet (to its middle): the nearest frame that nothing else needs
    moves (ties: the earlier). Needs num_frames >= events + gaps (5 at most on the long split)."""
    idx = frame_indices(scene["n_frames"], num_frames)
    events = sorted(scene["events"], key=lambda e: e["start"])
    spans = [(e["start"], e["stop"]) for e in events]  # [lo, hi): a frame must fall in each
    spans += [(a["stop"], b["start"]) for a, b in zip(events, events[1:], strict=False)]

    def witnesses(frames: list[int], span: tuple[int, int]) -> int:
        return sum(span[0] <= i < span[1] for i in frames)

    for span in spans:
        if witnesses(idx, span):
            continue
        middle = (span[0] + span[1] - 1) // 2
        # a frame may move when every span it shows is also shown by another
        movable = [i for i in range(num_frames)
                   if all(witnesses(idx, sp) > 1 or not sp[0] <= idx[i] < sp[1] for sp in spans)]
        slot = min(movable, key=lambda i: (abs(idx[i] - middle), i))
        idx[slot] = middle
    return sorted(idx)


def oracle_clip(video: str | Path, num_frames: int) -> Clip:
    """The oracle's frames of one clip of a long split (its scenes.json sits beside videos/)."""
    video = Path(video)
    scenes = read_scenes(video.parent.parent)
    idx = oracle_indices(scenes[video.stem], num_frames)
    clip = _sample_pyav(video, num_frames, pick=lambda total, _n: [min(i, total - 1) for i in idx])
    clip.sampler = ORACLE
    return clip


def matched_flops(dims, n_text: int, max_frames: int, layer: int) -> tuple[int, float]:
    """(frames, R) at the prefill FLOPs of unpruned 8 frames: the most frames up to `max_frames` at which
    R <= FIDELITY_R_MAX fits them, with the most kept tokens that fit."""
    base = BASE_FRAMES * dims.tokens_per_frame
    cap = estimate_flops(dims, n_text, base, base, None).full
    for f in range(max_frames, 0, -1):
        n_vis = f * dims.tokens_per_frame
        kept = largest(lambda k, n_vis=n_vis: estimate_flops(dims, n_text, n_vis, k, layer).pruned <= cap, 0, n_vis)
        if kept >= max(1, round(n_vis * (1 - FIDELITY_R_MAX))):
            return f, 1.0 - kept / n_vis
    return 1, FIDELITY_R_MAX


def row_inputs(qa, row: Row, cfg: PruneConfig, video: str, question: str,
               frames: int | None) -> tuple[str | Clip, PruneConfig, int | None, str | None]:
    """What `qa.ask` gets for one question of `row`: (video or clip, pruning, frames, sampler)."""
    if row.sampler == ORACLE:
        return oracle_clip(video, frames or BASE_FRAMES), cfg, None, None
    if row.match_flops:
        f, r = matched_flops(qa.dims, qa.text_tokens(question.strip()), frames, cfg.layer or 0)
        return video, PruneConfig(cfg.method, r=r, params=cfg.params), f, None
    return video, cfg, frames, row.sampler


def sampler_rows(fastv: PruneConfig) -> list[Row]:
    """The oracle and content-aware rows, each beside the uniform row with its frame count and FLOPs."""
    none = PruneConfig(method="none")
    return [Row("8 frames, oracle, unpruned", none, BASE_FRAMES, sampler=ORACLE),
            Row("8 frames, content, unpruned", none, BASE_FRAMES, sampler="content"),
            Row("adaptive FastV, content", fastv, sampler="content"),
            Row("adaptive FastV, uniform", fastv, sampler="uniform")]


def fidelity_methods(k: int) -> list[tuple[str, PruneConfig]]:
    """(name, configuration at R=0.9) of the fidelity table's methods, original positions each."""
    out = [("FastV", PruneConfig(method="fastv", k=k, r=FIDELITY_R))]
    if "fastvid" in REGISTRY:
        out.append(("FastVID", PruneConfig(method="fastvid", r=FIDELITY_R)))
    out.append(("VisPruner, original positions", PruneConfig(method="vispruner", r=FIDELITY_R, keep_positions=True)))
    return out


def fidelity_rows(k: int) -> list[Row]:
    """Per method: R=0.9 at the most frames, and the FLOPs of unpruned 8 frames. Needs the unpruned rows at 8
    and at the most frames (default_rows has them) for the table."""
    rows = []
    for name, cfg in fidelity_methods(k):
        rows.append(Row(f"max frames, {name} R={FIDELITY_R:g}", cfg, "max", sampler="uniform"))
        rows.append(Row(f"8-frame FLOPs, {name}", cfg, "max", sampler="uniform", match_flops=True))
    return rows


@dataclass(frozen=True)
class FidelityLine:
    method: str
    frames: float
    pruned: float | None  # accuracy at R=0.9, max frames
    unpruned: float | None  # those frames unpruned
    matched_frames: float
    matched: float | None  # at unpruned 8 frames' FLOPs
    base: float | None  # unpruned 8 frames
    flops: float  # matched row's FLOPs, % of unpruned 8 frames

    @staticmethod
    def kept(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else a / b


def fidelity_lines(results: list[RowResult], k: int, group: str) -> list[FidelityLine]:
    by = {r.label: r for r in results}
    lines = []
    for name, _ in fidelity_methods(k):
        pruned, matched = by[f"max frames, {name} R={FIDELITY_R:g}"], by[f"8-frame FLOPs, {name}"]
        lines.append(FidelityLine(name, pruned.frames.get(group, float("nan")), pruned.accuracy(group),
                                  by[UNPRUNED_MAX].accuracy(group), matched.frames.get(group, float("nan")),
                                  matched.accuracy(group), by[UNPRUNED_8].accuracy(group),
                                  matched.flops.get(group, float("nan"))))
    return lines


def format_fidelity(results: list[RowResult], k: int, groups: tuple[str, ...] = (">30 s", "all")) -> str:
    """Markdown: accuracy kept (%) per method at R=0.9 against the same frames, and at 8 frames' FLOPs against
    unpruned 8 frames; one block of rows per clip group."""
    def pct(x: float | None) -> str:
        return "–" if x is None or x != x else f"{100 * x:.1f}"

    head = ["clips", "method", "max frames", f"R={FIDELITY_R:g} acc", "unpruned acc", "kept %",
            "frames at 8-frame FLOPs", "acc", "unpruned 8 frames acc", "kept %", "FLOPs %"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for group in groups:
        for ln in fidelity_lines(results, k, group):
            out.append("| " + " | ".join([group, ln.method, f"{ln.frames:.1f}", pct(ln.pruned), pct(ln.unpruned),
                                          pct(FidelityLine.kept(ln.pruned, ln.unpruned)), f"{ln.matched_frames:.1f}",
                                          pct(ln.matched), pct(ln.base), pct(FidelityLine.kept(ln.matched, ln.base)),
                                          pct(ln.flops)]) + " |")
    return "\n".join(out)


METHOD_RATIOS = (0.5, 0.75, 0.9)


def method_rows(methods: list[str], k: int) -> list[Row]:
    """`bench long --methods`: each method at R = 0.5, 0.75, 0.9 on the same 8 uniform frames as the unpruned
    reference (first, as every table needs it); methods without R once. FastV-like methods at the table's K."""
    rows = [Row("8 frames, unpruned", PruneConfig(method="none"), 8, sampler="uniform")]
    for name in methods:
        method = REGISTRY.get(name)
        if name == "none":
            continue
        extra = {"k": k} if method.option("k") is not None else {}
        ratios = METHOD_RATIOS if method.uses_r else (None,)
        rows += [Row(f"{name} R={r}" if r is not None else name,
                     PruneConfig(method=name, **({"r": r} if r is not None else {}), **extra), 8, sampler="uniform")
                 for r in ratios]
    return rows
