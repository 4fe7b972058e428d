"""Evaluating on a zero-shot QA set: predict (a resumable batch run), judge (cached), summarize.

A run folder holds everything a run produced, so a re-run with the same `--out` resumes it:

    predictions.jsonl   one batch record per question (key = question_id), appended as produced
    judgments.jsonl     the judge cache (judge model + question + answer + prediction -> verdict)
    missing_videos.txt  question_id and video_name of each question whose clip is not on disk
    config.json         model, prompt and pruning options (a resumed run must use the same ones)
    audit.jsonl         per question: question, reference answer, prediction, verdict, score, judge reply
    official/           merge.jsonl and results.json in the shapes of Video-LLaVA's scripts (protocol.py)
    results.json        the summary `videoqa report` reads
    run.lock            while a run works on the folder: one eval at a time, predicting and judging
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from pathlib import Path

from ..batch.lock import exclusive
from ..batch.run import BatchSummary, Produce, run_batch
from ..batch.store import latest_by_key, read_records, replace_file
from ..batch.worklist import WorkItem, prune_key
from ..errors import IncompleteError, InputError
from ..jsonio import dumps, read_json
from .datasets import QADataset, check_usable, missing_warning
from .judges import JudgeRequest, JudgmentCache, judge_all
from .protocol import OFFICIAL_DIR, audit_rows, write_audit, write_official
from .scoring import aggregate

# More judge failures than this share of the predicted answers and `videoqa eval` exits non-zero: the accuracy
# is then over a subset the judge chose, not comparable with published numbers (as with missing videos).
JUDGE_FAILURE_LIMIT = 0.05


def _mean(values: Iterable) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def work_items(ds: QADataset) -> list[WorkItem]:
    return [
        WorkItem(key=it.question_id, video=str(it.video), question=it.question, id=it.question_id)
        for it in ds.present
    ]


def prepare_run_folder(out: Path) -> None:
    """Check that `out` can be a run folder and create it."""
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is a file; --out of eval is a run folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create the run folder ({e.strerror})") from None


def check_config(out: Path, config: dict) -> None:
    """Refuse to resume a run folder whose predictions were made with other model or pruning options."""
    prepare_run_folder(out)
    path = out / "config.json"
    if path.exists():
        old, new = _comparable(read_json(path, InputError)), _comparable(config)
        if old != new:
            diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            raise InputError(
                f"{out} holds a run with other options ({', '.join(diff)} differ); "
                "use another --out, or the same options to resume it"
            )
    else:
        replace_file(path, dumps(config, indent=1).encode())


def _comparable(config: dict) -> dict:
    """A run's options as they bear on its answers: a folder written before the pruning registry recorded every
    method's fields, now only the chosen method's are."""
    if isinstance(config.get("prune"), dict):
        config = {**config, "prune": prune_key(config["prune"])}
    return config


def summarize(ds: QADataset, predictions: dict[str, dict], judgments: dict, judge, config: dict) -> dict:
    """Accuracy = yes / (yes + no) and the average score over judged questions, as the judge's scoring rule
    reads them (official by default), with every count that explains why a question was not judged
    (missing video, prediction error, judge failure)."""
    preds = [predictions.get(it.question_id) for it in ds.present]
    ok = [p for p in preds if p is not None and not p.get("error")]
    judged = [j for j in judgments.values() if not j.failed]
    return {
        "dataset": ds.spec.name,
        "root": str(ds.root),
        **run_options(config),
        "questions_in_file": ds.n_questions,
        "questions": len(ds.items),
        "unanswered_in_file": len(ds.unanswered),
        "missing_videos": len(ds.missing),
        "warning": missing_warning(ds),
        "predicted": len(ok),
        "prediction_errors": sum(1 for p in preds if p is not None and p.get("error")),
        "first_prediction_error": next((p["error"] for p in preds if p is not None and p.get("error")), None),
        "not_predicted": sum(1 for p in preds if p is None),
        **aggregate(judgments.values()),
        "first_judge_error": next((j.error for j in judgments.values() if j.failed), None),
        "judge": judge.name,
        "judge_model": sorted({j.judge_model for j in judged}) or [judge.model],
        "scoring": judge.scoring,
        **token_means(ok),
    }


def run_options(config: dict) -> dict:
    """The summary fields naming what ran: model, prompt, answer length, pruning method, K, R, frames."""
    prune = config.get("prune") or {}
    return {
        "model": config.get("model"),
        "prompt": config.get("prompt"),
        "max_new_tokens": config.get("max_new_tokens"),
        "method": (prune.get("method") or "") + ("+pos" if prune.get("keep_positions") else "") or None,
        "k": prune.get("k") if prune.get("method") == "fastv" else None,
        "r": 0.0 if prune.get("method") == "none" else prune.get("r"),
        "frames": config.get("frames"),
    }


def token_means(ok: list[dict]) -> dict:
    """Means over the answered records: R chosen, visual and kept tokens, FLOPs ratio, latency; and the time."""
    return {
        "r_mean": _mean((p.get("kept") or {}).get("r") for p in ok),
        "visual_tokens": _mean((p.get("kept") or {}).get("n_visual") for p in ok),
        "kept_tokens": _mean((p.get("kept") or {}).get("n_kept") for p in ok),
        "flops_ratio": _mean((p.get("flops") or {}).get("ratio") for p in ok),
        "latency_s": _mean((p.get("stats") or {}).get("t_total", p.get("seconds")) for p in ok),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run_eval(
    ds: QADataset,
    out: str | Path,
    produce: Produce,
    judge,
    config: dict,
    *,
    retry_errors: bool = False,
    judge_cache: str | Path | None = None,
    judge_workers: int = 4,
    progress: bool = True,
    wait: bool = False,
) -> dict:
    """Predict (resumable batch), judge (cached), and write results.json, the audit trail and the official
    files into the run folder `out`. A dataset with nothing to evaluate is refused before anything runs."""
    check_usable(ds)
    out = Path(out)
    prepare_run_folder(out)
    # One run at a time per folder, from reading the config to the last file written: a second eval would
    # otherwise judge (and pay for) the same questions while the first is judging them.
    with exclusive(out, wait=wait, lock=out / "run.lock"):
        return _run_locked(ds, out, produce, judge, config, retry_errors, judge_cache, judge_workers, progress,
                           wait)


def predict(out: Path, config: dict, missing: list, items: list[WorkItem], produce: Produce, retry_errors: bool,
            progress: bool, wait: bool) -> tuple[BatchSummary, dict[str, dict]]:
    """The prediction half of an eval run, inside its lock: check the options against the folder's, list the
    missing videos, run the batch (resumable) and return its summary and the latest record per key."""
    check_config(out, config)
    replace_file(out / "missing_videos.txt",
                 "".join(f"{it.question_id}\t{it.video_name}\n" for it in missing).encode())
    pred_path = out / "predictions.jsonl"
    batch = run_batch(items, pred_path, produce, retry_errors=retry_errors, progress=progress, wait=wait)
    return batch, latest_by_key(read_records(pred_path))


def _run_locked(ds: QADataset, out: Path, produce: Produce, judge, config: dict, retry_errors: bool,
                judge_cache: str | Path | None, judge_workers: int, progress: bool, wait: bool) -> dict:
    batch, predictions = predict(out, config, ds.missing, work_items(ds), produce, retry_errors, progress, wait)
    answers = {it.question_id: it for it in ds.present}
    requests = [
        JudgeRequest(
            key=qid, question=answers[qid].question, answer=answers[qid].answer, pred=str(p["answer"])
        )
        for qid, p in predictions.items()
        if qid in answers and not p.get("error")
    ]
    cache = JudgmentCache(judge_cache or out / "judgments.jsonl")
    judgments = judge_all(judge, requests, cache, workers=judge_workers, progress=progress)
    audit = audit_rows(ds.items, predictions, judgments)
    write_audit(out / "audit.jsonl", audit)
    write_official(out / OFFICIAL_DIR, audit)
    result = summarize(ds, predictions, judgments, judge, config)
    result["batch"] = {
        "ran": batch.ran,
        "already_done": batch.already_done,
        "seconds": round(batch.seconds, 3),
        "clips_per_s": round(batch.clips_per_s, 3),
    }
    replace_file(out / "results.json", dumps(result, indent=1).encode())
    return result


def check_judged(r: dict) -> None:
    """Raise IncompleteError (one line) when a run's result is not a result: nothing judged although there were
    questions with a video, or judge failures above JUDGE_FAILURE_LIMIT of the predicted answers. Missing videos
    and prediction errors alone are counted in the summary, not failed on (unless nothing is left)."""
    n_present = r["questions"] - r["missing_videos"]
    asked = r["judged"] + r["judge_failed"]
    why = f"first: {r.get('first_judge_error') or 'no error recorded'}"
    if n_present and r["judged"] == 0:
        if asked:
            raise IncompleteError(f"none of the {asked} predicted answers was judged ({why}); the predictions are "
                                  "kept: fix the judge and re-run to judge them")
        n_err = r["prediction_errors"]
        raise IncompleteError(
            f"none of the {n_present} questions with a video was judged: {n_err} prediction errors "
            f"(first: {r.get('first_prediction_error')}), {r['not_predicted']} not predicted; "
            "re-run with --retry-errors once the cause is fixed")
    if asked and r["judge_failed"] / asked > JUDGE_FAILURE_LIMIT:
        raise IncompleteError(
            f"{r['judge_failed']} of the {asked} predicted answers ({100 * r['judge_failed'] / asked:.1f}%) could "
            f"not be judged, more than the {100 * JUDGE_FAILURE_LIMIT:g}% allowed ({why}); re-run to retry them")


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def num(x: float | None, f: str = "{:.2f}") -> str:
    return "n/a" if x is None else f.format(x)


def tokens_line(r: dict) -> str:
    """The pruning setting of a run and what it kept, cost and took, in one line."""
    return (f"  {r['method']} K={r['k'] if r['k'] is not None else '-'} R={r['r']} "
            f"(mean {num(r['r_mean'])}): kept {num(r['kept_tokens'], '{:.1f}')} of "
            f"{num(r['visual_tokens'], '{:.0f}')} "
            f"visual tokens, FLOPs {pct(r['flops_ratio'])}, latency {num(r['latency_s'], '{:.3f}')}s")


def format_result(r: dict, missing: list[str] | None = None) -> str:
    lines = [
        f"{r['dataset']}: {r['questions']} questions ({r['questions_in_file']} in the file, "
        f"{r['unanswered_in_file']} without an answer entry)",
        f"  missing videos {r['missing_videos']}, prediction errors {r['prediction_errors']}, "
        f"judged {r['judged']}, judge failures {r['judge_failed']}",
        f"  accuracy {pct(r['accuracy'])} ({r['yes']} yes / {r['no']} no"
        + (f" / {r['neither']} neither" if r.get("neither") else "")
        + f"), score {num(r['score'])} [judge {r['judge']}: {', '.join(r['judge_model'])}; "
        f"{r.get('scoring')} scoring; prompt {r.get('prompt')}, max {r.get('max_new_tokens')} new tokens]",
        tokens_line(r),
    ]
    not_judged = r["questions"] - r["judged"]
    if not_judged:
        parts = [(r["missing_videos"], "missing video", "s"), (r["prediction_errors"], "prediction error", "s"),
                 (r.get("not_predicted", 0), "not predicted", ""), (r["judge_failed"], "judge failure", "s")]
        shown = ", ".join(f"{n} {what}{plural if n != 1 else ''}" for n, what, plural in parts if n)
        lines.append(f"  not judged: {not_judged} of {r['questions']} questions ({shown})")
    if r.get("warning"):
        lines.append(f"  {r['warning']}")
    if missing:
        shown = ", ".join(missing[:10]) + (f", ... ({len(missing) - 10} more)" if len(missing) > 10 else "")
        lines.append(f"  missing: {shown}")
    return "\n".join(lines)
