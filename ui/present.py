"""Answers turned into what the page shows: the stats table, a one-line summary, the export document."""

from __future__ import annotations

from datetime import datetime, timezone

from videoqa.errors import VideoQAError
from videoqa.pruning import format_r


def reason(error: VideoQAError) -> str:
    """The error's message; for a VideoError only the reason (the path is Gradio's long temp path)."""
    return str(getattr(error, "reason", error))


def answer_warnings(answer) -> list[str]:
    """Warnings the pipeline attached to an answer (e.g. fewer distinct frames than asked); none if the
    pipeline does not report any."""
    return [str(w) for w in (getattr(answer, "warnings", None) or [])]


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def r_text(answer) -> str:
    """The stats' R row: the share dropped and who chose it; a method that prunes nothing says an R the user
    set is ignored, rather than showing 0 as if it were theirs."""
    prune, r = answer.prune, answer.kept.r
    if not prune.method_spec.uses_r:
        ignored = prune.r != "auto" and float(prune.r) > 0
        return (f"0 ({answer.kept.method} keeps every visual token"
                + (f"; the R you set, {format_r(float(prune.r))}, is ignored)" if ignored else ")"))
    return f"{format_r(r)} ({'auto' if prune.adaptive else 'set by you'})"


def where_pruned(layer: int | None) -> str:
    return {None: "no pruning", 0: "before the LLM"}.get(layer, f"at LLM layer K={layer}")


def encode_label(answer, follow_up: bool) -> str:
    """How the clip's encoding was obtained, told from this conversation's point of view. The shared cache
    may hold a clip another tab encoded: saying so would tell this user what someone else uploaded, so only
    this conversation's own follow-ups are called cached."""
    s = answer.stats
    return "cached (follow-up, no re-encode)" if s.encode_cached and follow_up else f"{s.t_encode:.3f} s"


def stats_rows(answer, follow_up: bool = False) -> list[tuple[str, str]]:
    """The stats of one Answer as (name, value) rows: the table under each answer and the API's stats."""
    s, k, fl = answer.stats, answer.kept, answer.flops
    share = 100 * k.n_kept / k.n_visual if k.n_visual else 100.0
    r_line = r_text(answer)
    if answer.decision is not None and answer.decision.reason:
        r_line += f": {answer.decision.reason}"
    for warning in getattr(answer.decision, "warnings", None) or []:
        r_line += f" ⚠️ {warning}"
    merged = f", {len(k.merged_dropped())} more merged into them" if k.absorbed is not None else ""
    return [
        ("frames", f"{s.frames} sampled by the {s.sampler} sampler ({s.t_sample:.3f} s to decode)"),
        ("visual tokens", f"{k.n_visual} → {k.n_kept} kept ({share:.1f}%){merged}"),
        ("method", f"{k.method}, {where_pruned(k.layer)}"),
        ("R (dropped share)", r_line),
        ("FLOPs (prefill)", f"{fl.ratio:.3f}× of unpruned ({fl.n_tokens} → {fl.n_tokens_pruned} tokens)"),
        ("time", f"decode {s.t_sample:.3f} s · encode {encode_label(answer, follow_up)} · prefill "
                 f"{s.t_prefill:.3f} s · generate {s.t_generate:.3f} s · total {s.t_total:.3f} s"),
        ("speed", f"{s.tokens_per_s:.1f} tokens/s ({s.new_tokens} new tokens, prompt {s.prompt_tokens})"),
        *([("conversation", f"the oldest {s.history_dropped} turns left out: with them the frames would not fit "
                            f"the context")] if getattr(s, "history_dropped", 0) else []),
        ("peak memory", f"{fmt_bytes(s.peak_memory_bytes)} ({s.peak_memory_kind}) · {s.device}, {s.dtype}"),
    ]


def format_stats(answer, follow_up: bool = False) -> str:
    """The stats panel for one Answer, as a Markdown table (the API's stats output)."""
    table = "| answer | |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in stats_rows(answer, follow_up))
    # One line shown, the nine rows on demand: on a phone the table was a screen tall.
    return f"{summary_line(answer)}\n\n<details><summary>All stats</summary>\n\n{table}\n\n</details>"


def plain_summary(answer) -> str:
    """What pruning did for one answer, in words: "kept 260 of 520 visual tokens — 30 % less compute"."""
    k, fl = answer.kept, answer.flops
    saved = round(100 * (1 - fl.ratio))
    compute = (f"{saved} % less compute than" if saved > 0 else f"{-saved} % more compute than" if saved < 0
               else "the same compute as")
    return (f"Kept {k.n_kept} of {k.n_visual} visual tokens ({where_pruned(k.layer)}) — {compute} unpruned in "
            f"the prefill (FLOPs {fl.ratio:.3f}×)")


def compare_line(answer) -> str:
    """One method's result in Compare: what pruning did in words, then frames and time."""
    s = answer.stats
    return (f"{plain_summary(answer)} · {s.frames} frames ({s.sampler} sampler) · R={format_r(answer.kept.r)} · "
            f"{s.new_tokens} token{'s' if s.new_tokens != 1 else ''} in {s.t_total:.2f} s")


def hit_length_limit(answer, max_new_tokens: int) -> str | None:
    """A note when the answer used every token it was allowed: it was cut off, not finished (a model repeating
    itself, "blue blue blue …", is not sure of its answer)."""
    if answer.stats.new_tokens < max_new_tokens:
        return None
    return f"⚠️ cut off at the length limit ({max_new_tokens} tokens)"


def summary_line(answer) -> str:
    """One answer in a line (the chat's stats line, each method's in compare mode): kept tokens, the frames and
    the sampler that placed them (its frame times are in the heatmaps' captions), FLOPs, time."""
    k, fl, s = answer.kept, answer.flops, answer.stats
    return (f"**{k.n_kept}/{k.n_visual}** visual tokens kept ({where_pruned(k.layer)}, R={format_r(k.r)}) · "
            f"{s.frames} frames ({s.sampler} sampler) · **FLOPs {fl.ratio:.3f}×** of unpruned · "
            f"prefill {s.t_prefill:.3f} s · "
            f"{s.new_tokens} token{'s' if s.new_tokens != 1 else ''} in {s.t_total:.3f} s")


def exchange_record(answer, shown: str, status: str) -> dict:
    """An answered question as exported: what the chat showed plus the pipeline's full record
    (pruning settings, kept-token indices per frame, FLOPs, timings, warnings)."""
    return {"status": status, "shown": shown, "warnings": answer_warnings(answer), **answer.to_dict()}


def export_document(model: str, clip_name: str, records: list[dict]) -> dict:
    return {
        "videoqa_conversation": 1,
        "exported": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": model,
        "clip": clip_name,
        "turns": records,
    }


def answers_differ(answers: dict[str, str], width: int = 40) -> str:
    """Compare mode's one line on where the methods' answers differ (by answer, the methods that gave it)."""
    by_answer: dict[str, list[str]] = {}
    for method, text in answers.items():
        by_answer.setdefault(" ".join(text.split()), []).append(method)
    if len(by_answer) <= 1:
        return f"All {len(answers)} give the same answer."
    parts = [f"“{a if len(a) <= width else a[:width - 1] + '…'}”: {', '.join(m)}" for a, m in by_answer.items()]
    return "Answers differ — " + " · ".join(parts)
