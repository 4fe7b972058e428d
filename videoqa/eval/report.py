"""Tables and plots of eval runs, next to the published Video-LLaVA numbers of FastV and VisPruner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..jsonio import read_json
from ..models.video_llava import video_llava_7b_dims
from ..pruning import AUTO
from ..pruning.flops import estimate_flops

# The papers ran Video-LLaVA-7B with 8 frames x 256 = 2048 visual tokens.
PAPER_VISUAL = 2048
# Text tokens of the papers' prompts are not published; 70 makes FastV's formula reproduce its own
# published ratios (52.3% at K=2, 57.1% at K=5, R=50%) to 0.1 point.
PAPER_TEXT = 70


@dataclass(frozen=True)
class RefPoint:
    dataset: str
    series: str  # legend label
    method: str
    kept: int  # visual tokens kept of 2048
    layer: int | None  # None: no pruning; 0: before the LLM; K: FastV
    accuracy: float  # %
    score: float | None

    @property
    def flops_pct(self) -> float:
        return 100 * estimate_flops(video_llava_7b_dims(), PAPER_TEXT, PAPER_VISUAL, self.kept, self.layer).ratio


def _refs() -> list[RefPoint]:
    pts = []
    # FastV paper, Table 6 (GPT-judged accuracy / score): baseline, K=2 R=50%, K=5 R=50%.
    fastv = {
        "tgif": [(0.18, 2.5), (0.21, 2.6), (0.20, 2.6)],
        "msvd": [(0.70, 3.9), (0.71, 3.9), (0.71, 4.0)],
        "msrvtt": [(0.56, 3.5), (0.55, 3.5), (0.57, 3.5)],
    }
    for ds, rows in fastv.items():
        for (acc, score), (kept, layer) in zip(rows, [(2048, None), (1024, 2), (1024, 5)], strict=True):
            method = "none" if layer is None else "fastv"
            pts.append(RefPoint(ds, "FastV paper (Tab. 6)", method, kept, layer, 100 * acc, score))
    # VisPruner project page: all 2048 tokens, then FastV and VisPruner at 455 / 227 / 114 kept tokens.
    vp = {  # dataset: (all, {kept: (fastv acc, fastv score, vispruner acc, vispruner score)})
        "tgif": (
            (19.8, 2.53),
            {455: (19.2, 2.50, 18.4, 2.49), 227: (14.3, None, 15.9, None), 114: (10.6, None, 14.1, None)},
        ),
        "msvd": (
            (70.5, 3.93),
            {455: (69.1, 3.91, 70.2, 3.95), 227: (68.9, None, 69.3, None), 114: (64.1, None, 65.4, None)},
        ),
        "msrvtt": (
            (57.5, 3.50),
            {455: (54.4, 3.42, 56.7, 3.50), 227: (53.0, None, 55.6, None), 114: (52.4, None, 54.1, None)},
        ),
    }
    for ds, ((acc, score), rows) in vp.items():
        pts.append(RefPoint(ds, "VisPruner paper: all tokens", "none", 2048, None, acc, score))
        for kept, (fa, fs, va, vs) in rows.items():
            pts.append(RefPoint(ds, "VisPruner paper: FastV (K=2)", "fastv", kept, 2, fa, fs))
            pts.append(RefPoint(ds, "VisPruner paper: VisPruner", "vispruner", kept, 0, va, vs))
    return pts


REFERENCES: tuple[RefPoint, ...] = tuple(_refs())


def load_results(paths) -> list[dict]:
    """results.json of each run (a run folder or the file itself)."""
    results = []
    for p in map(Path, paths):
        f = p / "results.json" if p.is_dir() else p
        if not f.is_file():
            raise InputError(f"{p}: no results.json (run `videoqa eval` first)")
        r = read_json(f, InputError)
        if not isinstance(r, dict):
            raise InputError(f"{f}: expected a JSON object (a results.json of `videoqa eval`)")
        r["run"] = str(p)
        results.append(r)
    return results


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def _r_label(r: dict) -> str:
    if r.get("method") == "none":
        return "0"
    if r.get("r") == AUTO:
        return f"auto ({_fmt(r.get('r_mean'), '.2f')})"
    return _fmt(r.get("r"), ".2f")


def markdown_table(results: list[dict]) -> str:
    head = ["dataset", "method", "K", "R", "kept tokens", "FLOPs %", "accuracy %", "score", "latency s", "judged",
            "judge", "run"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    def key(r: dict) -> tuple:
        return r.get("dataset") or "", r.get("method") or "", -(r.get("flops_ratio") or 0)

    for r in sorted(results, key=key):
        kept = f"{_fmt(r.get('kept_tokens'), '.0f')} / {_fmt(r.get('visual_tokens'), '.0f')}"
        acc = None if r.get("accuracy") is None else 100 * r["accuracy"]
        flops = None if r.get("flops_ratio") is None else 100 * r["flops_ratio"]
        judge = f"{r.get('judge')}: {', '.join(r.get('judge_model') or [])}"
        if r.get("scoring"):
            judge += f" ({r['scoring']} scoring)"
        cells = [
            r.get("dataset"),
            r.get("method"),
            _fmt(r.get("k"), "d"),
            _r_label(r),
            kept,
            _fmt(flops, ".1f"),
            _fmt(acc, ".1f"),
            _fmt(r.get("score"), ".2f"),
            _fmt(r.get("latency_s"), ".3f"),
            f"{r.get('judged')} ({r.get('missing_videos')} missing, {r.get('judge_failed')} failed)",
            judge,
            r.get("run"),
        ]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    datasets = sorted({r.get("dataset") for r in results})
    refs = [p for p in REFERENCES if p.dataset in datasets]
    if refs:
        rows += [
            "",
            "Published Video-LLaVA-7B references (FLOPs % from FastV's formula, 2048 visual tokens):",
            "",
            "| dataset | source | method | K | kept tokens | FLOPs % | accuracy % | score |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in refs:
            k = p.layer if p.method == "fastv" else None
            rows.append(
                f"| {p.dataset} | {p.series} | {p.method} | {_fmt(k, 'd')} | {p.kept} | {p.flops_pct:.1f} | "
                f"{p.accuracy:.1f} | {_fmt(p.score, '.2f')} |"
            )
    return "\n".join(rows)


_REF_STYLE = {  # series -> (marker, short label written next to each published point)
    "FastV paper (Tab. 6)": ("^", "FastV"),
    "VisPruner paper: all tokens": ("*", "VP: all"),
    "VisPruner paper: FastV (K=2)": ("x", "VP: FastV"),
    "VisPruner paper: VisPruner": ("s", "VP: VisPruner"),
}
# Our runs: colour by method, style by judge. Exact-judge points are large and hollow, GPT-judge points small
# and filled, so where both series pass through the same point each stays visible.
_JUDGE_STYLE = {
    "exact": {"marker": "o", "markersize": 9, "markerfacecolor": "none", "linestyle": "--"},
    "gpt": {"marker": "D", "markersize": 4, "linestyle": "-"},
}
_OTHER_JUDGE = {"marker": "v", "markersize": 6, "linestyle": "-."}


def _ref_label(p: RefPoint) -> str:
    short = _REF_STYLE[p.series][1]
    if p.layer is None:
        return short if short == "VP: all" else f"{short} all"
    k = f" K={p.layer}" if p.method == "fastv" else ""
    return f"{short}{k} {p.kept}"


def _plot_refs(ax, ds: str) -> None:
    for series, (marker, _) in _REF_STYLE.items():
        pts = sorted((p for p in REFERENCES if p.dataset == ds and p.series == series), key=lambda p: p.flops_pct)
        if not pts:
            continue
        xs, ys = [p.flops_pct for p in pts], [p.accuracy for p in pts]
        ax.plot(xs, ys, marker=marker, linestyle=":", color="gray", alpha=0.8, label=series,
                markerfacecolor="none")
        for p, x, y in zip(pts, xs, ys, strict=True):
            ax.annotate(_ref_label(p), (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6,
                        color="dimgray")


def _plot_runs(ax, results: list[dict], ds: str, colors: dict[str, str]) -> None:
    series: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        if r.get("dataset") == ds and r.get("accuracy") is not None and r.get("flops_ratio") is not None:
            series.setdefault((r.get("method") or "?", r.get("judge") or "?"), []).append(r)
    for (method, judge), rs in sorted(series.items()):
        rs.sort(key=lambda r: r["flops_ratio"])
        style = _JUDGE_STYLE.get(judge, _OTHER_JUDGE)
        ax.plot([100 * r["flops_ratio"] for r in rs], [100 * r["accuracy"] for r in rs], color=colors[method],
                label=f"this run: {method} ({judge} judge)", **style)


def accuracy_figure(results: list[dict]):
    """One panel per dataset: accuracy vs FLOPs % of the runs, one series per (method, judge), over the
    published points (each labelled with its method and kept tokens)."""
    from matplotlib import rcParams
    from matplotlib.figure import Figure  # a bare Figure renders with Agg: no pyplot, no global backend

    datasets = sorted({r.get("dataset") for r in results if r.get("dataset")}) or ["msvd"]
    cycle = rcParams["axes.prop_cycle"].by_key()["color"]
    methods = sorted({r.get("method") or "?" for r in results})
    colors = {m: cycle[i % len(cycle)] for i, m in enumerate(methods)}
    fig = Figure(figsize=(5.5 * len(datasets), 4.5))
    axes = fig.subplots(1, len(datasets), squeeze=False)
    for ax, ds in zip(axes[0], datasets, strict=True):
        _plot_refs(ax, ds)
        _plot_runs(ax, results, ds, colors)
        ax.set_title(ds)
        ax.set_xlabel("prefill FLOPs (% of unpruned)")
        ax.set_ylabel("accuracy (%)")
        ax.set_xlim(0, 105)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_accuracy_vs_flops(results: list[dict], png: str | Path) -> Path:
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    accuracy_figure(results).savefig(png, dpi=100)
    return png
