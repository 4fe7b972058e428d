"""`videoqa eval` (predict + judge a GPT_Zero_Shot_QA dataset) and `videoqa report` (tables and plots).

A run folder holds everything a run produced, so a re-run with the same `--out` resumes it:

    predictions.jsonl   one batch record per question (key = question_id), appended as produced
    judgments.jsonl     the judge cache (judge model + question + answer + prediction -> verdict)
    missing_videos.txt  question_id and video_name of each question whose clip is not on disk
    config.json         model and pruning options (a resumed run must use the same ones)
    results.json        the summary `videoqa report` reads
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..batch import WorkItem, latest_by_key, read_records, run_batch
from ..errors import InputError
from .datasets import DATASETS, QADataset, load_dataset
from .judges import JudgeRequest, JudgmentCache, judge_all, make_judge


def _mean(values: Iterable) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def work_items(ds: QADataset) -> list[WorkItem]:
    return [
        WorkItem(key=it.question_id, video=str(it.video), question=it.question, id=it.question_id)
        for it in ds.present
    ]


def check_config(out: Path, config: dict) -> None:
    """Refuse to resume a run folder whose predictions were made with other model or pruning options."""
    path = out / "config.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old != config:
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            raise InputError(
                f"{out} holds a run with other options ({', '.join(diff)} differ); "
                "use another --out, or the same options to resume it"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=1))


def summarize(ds: QADataset, predictions: dict[str, dict], judgments: dict, judge, config: dict) -> dict:
    """Accuracy = yes / (yes + no) and mean score over judged questions, with every count that explains
    why a question was not judged (missing video, prediction error, judge failure)."""
    preds = [predictions.get(it.question_id) for it in ds.present]
    ok = [p for p in preds if p is not None and not p.get("error")]
    judged = [j for j in judgments.values() if not j.failed]
    yes = sum(j.pred == "yes" for j in judged)
    prune = config.get("prune") or {}
    return {
        "dataset": ds.spec.name,
        "root": str(ds.root),
        "model": config.get("model"),
        "method": (prune.get("method") or "") + ("+pos" if prune.get("keep_positions") else "") or None,
        "k": prune.get("k") if prune.get("method") == "fastv" else None,
        "r": 0.0 if prune.get("method") == "none" else prune.get("r"),
        "frames": config.get("frames"),
        "questions_in_file": ds.n_questions,
        "questions": len(ds.items),
        "unanswered_in_file": len(ds.unanswered),
        "missing_videos": len(ds.missing),
        "predicted": len(ok),
        "prediction_errors": sum(1 for p in preds if p is not None and p.get("error")),
        "not_predicted": sum(1 for p in preds if p is None),
        "judged": len(judged),
        "judge_failed": sum(1 for j in judgments.values() if j.failed),
        "yes": yes,
        "no": len(judged) - yes,
        "accuracy": yes / len(judged) if judged else None,
        "score": _mean(j.score for j in judged),
        "judge": judge.name,
        "judge_model": sorted({j.judge_model for j in judged}) or [judge.model],
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
    produce: Callable[[list[WorkItem]], Iterable[dict]],
    judge,
    config: dict,
    *,
    retry_errors: bool = False,
    judge_cache: str | Path | None = None,
    judge_workers: int = 4,
    progress: bool = True,
) -> dict:
    """Predict (resumable batch), judge (cached), and write results.json into the run folder `out`."""
    out = Path(out)
    check_config(out, config)
    (out / "missing_videos.txt").write_text(
        "".join(f"{it.question_id}\t{it.video_name}\n" for it in ds.missing), encoding="utf-8"
    )
    pred_path = out / "predictions.jsonl"
    batch = run_batch(work_items(ds), pred_path, produce, retry_errors=retry_errors, progress=progress)
    predictions = latest_by_key(read_records(pred_path))
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
    result = summarize(ds, predictions, judgments, judge, config)
    result["batch"] = {
        "ran": batch.ran,
        "already_done": batch.already_done,
        "seconds": round(batch.seconds, 3),
        "clips_per_s": round(batch.clips_per_s, 3),
    }
    (out / "results.json").write_text(json.dumps(result, indent=1))
    return result


def format_result(r: dict, missing: list[str] | None = None) -> str:
    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    def num(x, f="{:.2f}"):
        return "n/a" if x is None else f.format(x)

    lines = [
        f"{r['dataset']}: {r['questions']} questions ({r['questions_in_file']} in the file, "
        f"{r['unanswered_in_file']} without an answer entry)",
        f"  missing videos {r['missing_videos']}, prediction errors {r['prediction_errors']}, "
        f"judged {r['judged']}, judge failures {r['judge_failed']}",
        f"  accuracy {pct(r['accuracy'])} ({r['yes']} yes / {r['no']} no), score {num(r['score'])} "
        f"[judge {r['judge']}: {', '.join(r['judge_model'])}]",
        f"  {r['method']} K={r['k'] if r['k'] is not None else '-'} R={r['r']} "
        f"(mean {num(r['r_mean'])}): kept {num(r['kept_tokens'], '{:.1f}')} of "
        f"{num(r['visual_tokens'], '{:.0f}')} "
        f"visual tokens, FLOPs {pct(r['flops_ratio'])}, latency {num(r['latency_s'], '{:.3f}')}s",
    ]
    if missing:
        shown = ", ".join(missing[:10]) + (f", ... ({len(missing) - 10} more)" if len(missing) > 10 else "")
        lines.append(f"  missing: {shown}")
    return "\n".join(lines)


def default_out(args: argparse.Namespace) -> Path:
    k = f"-k{args.k}" if args.prune == "fastv" else ""
    pos = "-pos" if getattr(args, "keep_positions", False) else ""
    return Path("runs") / f"{args.dataset}-{args.prune}{k}-r{args.r}{pos}"


def eval_main(args: argparse.Namespace) -> int:
    from ..batch import make_produce
    from ..options import model_kwargs_from_args

    ds = load_dataset(args.dataset, args.root, limit=args.limit, seed=args.subset_seed)
    judge = make_judge(
        args.judge,
        args.judge_model,
        args.judge_base_url,
        retries=args.judge_retries,
        timeout_s=args.judge_timeout,
    )
    config = model_kwargs_from_args(args)
    config.pop("device")  # where it ran does not change what it answers
    out = Path(args.out) if args.out else default_out(args)
    result = run_eval(
        ds,
        out,
        make_produce(args),
        judge,
        {"dataset": args.dataset, **config},
        retry_errors=args.retry_errors,
        judge_cache=args.judge_cache,
        judge_workers=args.judge_workers,
        progress=not args.no_progress,
    )
    print(format_result(result, [f"{it.question_id}:{it.video_name}" for it in ds.missing]))
    print(f"-> {out / 'results.json'}")
    return 0


def report_main(args: argparse.Namespace) -> int:
    from .report import load_results, markdown_table, plot_accuracy_vs_flops

    results = load_results(args.runs)
    table = markdown_table(results)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    if args.plot:
        print(f"plot -> {plot_accuracy_vs_flops(results, args.plot)}")
    return 0


def register(sub) -> None:
    from ..batch import add_engine_options
    from ..options import add_model_options, add_prune_options

    p = sub.add_parser(
        "eval",
        help="evaluate on MSVD-QA / MSRVTT-QA / TGIF-QA (GPT_Zero_Shot_QA layout)",
        description="Predict answers for a zero-shot QA set (resumable) and judge them.",
    )
    p.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    p.add_argument(
        "--root",
        required=True,
        help="the dataset folder (with test_q.json, test_a.json) or the GPT_Zero_Shot_QA folder above it",
    )
    p.add_argument("--out", help="run folder (default: runs/DATASET-METHOD[-kK]-rR); re-running resumes it")
    p.add_argument("--limit", type=int, default=None, help="evaluate only N questions (quick runs)")
    p.add_argument(
        "--subset-seed",
        type=int,
        default=None,
        help="with --limit: a random subset drawn with this seed instead of the first N",
    )
    g = p.add_argument_group("judge")
    g.add_argument(
        "--judge",
        default="exact",
        choices=["exact", "gpt"],
        help="exact: normalized matching, offline; gpt: the Video-ChatGPT judge over an "
        "OpenAI-compatible endpoint (key from $VIDEOQA_JUDGE_API_KEY or $OPENAI_API_KEY)",
    )
    g.add_argument(
        "--judge-model",
        default=None,
        help="judge model (default: $VIDEOQA_JUDGE_MODEL or gpt-3.5-turbo-0125); recorded in results",
    )
    g.add_argument(
        "--judge-base-url",
        default=None,
        help="chat endpoint base (default: $VIDEOQA_JUDGE_BASE_URL, $OPENAI_BASE_URL or OpenAI)",
    )
    g.add_argument("--judge-retries", type=int, default=3, help="retries of a failed or unparsable judgment")
    g.add_argument("--judge-timeout", type=float, default=60.0, help="seconds per judge request")
    g.add_argument("--judge-workers", type=int, default=4, help="judge requests in flight")
    g.add_argument("--judge-cache", default=None, help="judgment cache file (default: RUN/judgments.jsonl)")
    add_model_options(p)
    add_prune_options(p)
    add_engine_options(p)
    p.set_defaults(func=eval_main)

    r = sub.add_parser(
        "report",
        help="markdown table and accuracy-vs-FLOPs plot of eval runs",
        description="Summarize `videoqa eval` runs against the published FastV/VisPruner numbers.",
    )
    r.add_argument("runs", nargs="+", metavar="RUN", help="run folders (or their results.json)")
    r.add_argument("--out", help="also write the markdown table to this file")
    r.add_argument("--plot", default="accuracy_vs_flops.png", help="PNG path ('' for none)")
    r.set_defaults(func=report_main)
