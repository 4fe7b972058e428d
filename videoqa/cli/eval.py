"""`videoqa eval` (predict + judge a GPT_Zero_Shot_QA dataset) and `videoqa report` (tables and plots)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..eval.datasets import DATASETS, load_dataset
from ..eval.judge_http import MAX_REPLY_BYTES
from ..eval.judges import make_judge
from ..eval.protocol import OFFICIAL_DIR
from ..eval.run import check_judged, format_result, run_eval
from ..pruning import PruneConfig
from .options import (
    add_backend_options,
    add_model_options,
    add_prune_options,
    backend_from_args,
    model_spec_from_args,
    non_negative_int,
    positive_int,
    positive_seconds,
)


def default_out(args: argparse.Namespace, prune: PruneConfig) -> Path:
    k = f"-k{prune.k}" if prune.method == "fastv" else ""
    pos = "-pos" if prune.keep_positions else ""
    return Path("runs") / f"{args.dataset}-{prune.method}{k}-r{prune.r}{pos}"


def run_eval_command(args: argparse.Namespace) -> int:
    ds = load_dataset(args.dataset, args.root, limit=args.limit, seed=args.subset_seed)
    judge = make_judge(
        args.judge,
        args.judge_model,
        args.judge_base_url,
        retries=args.judge_retries,
        timeout_s=args.judge_timeout,
        max_reply_bytes=args.judge_max_bytes,
        scoring=args.scoring,
    )
    spec = model_spec_from_args(args)  # the pruning options are checked here, once
    config = {key: value for key, value in spec.items() if key != "device"}  # where it ran changes no answer
    out = Path(args.out) if args.out else default_out(args, PruneConfig(**spec["prune"]))
    result = run_eval(
        ds,
        out,
        backend_from_args(args, spec),
        judge,
        {"dataset": args.dataset, **config},
        retry_errors=args.retry_errors,
        judge_cache=args.judge_cache,
        judge_workers=args.judge_workers,
        progress=not args.no_progress,
        wait=args.wait,
    )
    print(format_result(result, [f"{it.question_id}:{it.video_name}" for it in ds.missing]))
    print(f"-> {out / 'results.json'}; per question: {out / 'audit.jsonl'}; official files: "
          f"{out / OFFICIAL_DIR / 'merge.jsonl'}, {out / OFFICIAL_DIR / 'results.json'}")
    check_judged(result)  # after the summary: a run that judged (almost) nothing exits 2, saying why
    return 0


def run_report(args: argparse.Namespace) -> int:
    from ..eval.report import load_results, markdown_table, plot_accuracy_vs_flops

    results = load_results(args.runs)
    table = markdown_table(results)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    if args.plot:
        print(f"plot -> {plot_accuracy_vs_flops(results, args.plot)}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate on MSVD-QA / MSRVTT-QA / TGIF-QA (GPT_Zero_Shot_QA layout)",
                       description="Predict answers for a zero-shot QA set (resumable) and judge them.")
    p.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    p.add_argument("--root", required=True,
                   help="the dataset folder (with test_q.json, test_a.json) or the GPT_Zero_Shot_QA folder above it")
    p.add_argument("--out", help="run folder (default: runs/DATASET-METHOD[-kK]-rR); re-running resumes it")
    p.add_argument("--limit", type=non_negative_int, default=None, help="evaluate only N questions (quick runs)")
    p.add_argument("--subset-seed", type=int, default=None,
                   help="with --limit: a random subset drawn with this seed instead of the first N")
    add_judge_options(p)
    add_model_options(p)
    add_prune_options(p)
    add_backend_options(p)
    # The official protocol's answer length (Video-LLaVA's run_inference_video_qa.py); interactive commands keep
    # 64 tokens, which suit a chat and return sooner. The prompt is the model's own conversation (videoqa.json):
    # llava_v1 for Video-LLaVA, so the official protocol by default.
    p.set_defaults(func=run_eval_command, max_new_tokens=1024)

    r = sub.add_parser("report", help="markdown table and accuracy-vs-FLOPs plot of eval runs",
                       description="Summarize `videoqa eval` runs against the published FastV/VisPruner numbers.")
    r.add_argument("runs", nargs="+", metavar="RUN", help="run folders (or their results.json)")
    r.add_argument("--out", help="also write the markdown table to this file")
    r.add_argument("--plot", default="accuracy_vs_flops.png", help="PNG path ('' for none)")
    r.set_defaults(func=run_report)


def add_judge_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("judge")
    g.add_argument("--judge", default="exact", choices=["exact", "gpt"],
                   help="exact: normalized matching, offline; gpt: the Video-ChatGPT judge over an "
                        "OpenAI-compatible endpoint (key from $VIDEOQA_JUDGE_API_KEY or $OPENAI_API_KEY)")
    g.add_argument("--judge-model", default=None,
                   help="judge model (default: $VIDEOQA_JUDGE_MODEL or gpt-3.5-turbo-0125); recorded in results")
    g.add_argument("--judge-base-url", default=None,
                   help="chat endpoint base (default: $VIDEOQA_JUDGE_BASE_URL, $OPENAI_BASE_URL or OpenAI)")
    g.add_argument("--judge-retries", type=non_negative_int, default=3,
                   help="retries of a failed or unparsable judgment")
    g.add_argument("--judge-timeout", type=positive_seconds, default=60.0,
                   help="seconds allowed for one whole judge request, however slowly the server replies")
    g.add_argument("--scoring", default="official", choices=["official", "strict"],
                   help="official: the judge reply as Video-LLaVA's eval_video_qa.py reads it (ast.literal_eval, "
                        "int(score), 'yes'/'no' substrings); strict: our parser (dict found in prose, 'yes'/'no' "
                        "only, fractional scores kept, other replies asked again)")
    g.add_argument("--judge-max-bytes", type=positive_int, default=MAX_REPLY_BYTES,
                   help="bytes read of one judge reply at most; a longer one is a judge failure (default 4 MiB)")
    g.add_argument("--judge-workers", type=positive_int, default=4, help="judge requests in flight")
    g.add_argument("--judge-cache", default=None, help="judgment cache file (default: RUN/judgments.jsonl)")
