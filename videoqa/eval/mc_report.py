"""`videoqa report` for multiple-choice runs: per benchmark, one table whose rows are the overall score and
the benchmark's categories and whose columns are the runs (method, K, R) side by side, then the blind
baselines of the questions asked."""

from __future__ import annotations


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def run_label(r: dict) -> str:
    k = f" K={r['k']}" if r.get("k") is not None else ""
    r_value = r.get("r")
    shown = f"auto ({r['r_mean']:.2f})" if r_value == "auto" and r.get("r_mean") is not None else r_value
    return f"{r.get('method')}{k} R={shown}"


def _rows(r: dict) -> dict[str, dict]:
    """'overall' and 'key: value' -> that cell (accuracy, n and the baselines)."""
    b = r.get("baselines") or {}
    rows = {"overall": {"accuracy": r.get("accuracy"), "n": r.get("scored"), "letter": b.get("letter_baseline"),
                        "prior": b.get("option_prior"), "chance": b.get("chance")}}
    if r.get("macro_accuracy") is not None:
        rows["mean over categories"] = {"accuracy": r["macro_accuracy"], "n": r.get("scored")}
    for key, cells in (r.get("categories") or {}).items():
        for value, c in cells.items():
            rows[f"{key}: {value}"] = {"accuracy": c["accuracy"], "n": c["n"], "letter": c["letter_baseline"],
                                       "prior": c["option_prior"], "chance": c["chance"]}
    return rows


def mc_tables(results: list[dict]) -> str:
    """The tables, or '' when no run is a multiple-choice one."""
    by_dataset: dict[str, list[dict]] = {}
    for r in results:
        if r.get("kind") == "multiple-choice":
            by_dataset.setdefault(r["dataset"], []).append(r)
    out = []
    for ds, runs in sorted(by_dataset.items()):
        runs.sort(key=lambda r: (r.get("method") or "", -(r.get("flops_ratio") or 0)))
        tables = [_rows(r) for r in runs]
        base = tables[0]
        names = list(dict.fromkeys(name for t in tables for name in t))
        head = ["accuracy %", *(f"{run_label(r)} (FLOPs {_pct(r.get('flops_ratio'))} %)" for r in runs), "n",
                "most common letter", "option prior", "chance"]
        out += ["", f"{runs[0].get('title', ds)}: accuracy % per run, blind baselines of the questions "
                    f"of the first run ({runs[0].get('run')})", "",
                "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name in names:
            cells = [_pct(t.get(name, {}).get("accuracy")) for t in tables]
            b = base.get(name, {})
            out.append(f"| {name} | " + " | ".join(cells) + f" | {b.get('n', '–')} | {_pct(b.get('letter'))} | "
                       f"{_pct(b.get('prior'))} | {_pct(b.get('chance'))} |")
    return "\n".join(out)
