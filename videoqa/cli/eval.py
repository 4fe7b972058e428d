"""`videoqa eval` (predict + judge a GPT_Zero_Shot_QA dataset) and `videoqa report` (tables and plots)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..eval.datasets import DATASETS, load_dataset
from ..eval.judge_http import MAX_REPLY_BYTES
from ..eval.judges import make_judge
from ..eval.mc_layouts import MC_BENCHMARKS
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

# settings that change no answer, left out of a run's recorded config (resuming with others is fine): where it
# ran, and the prefix cache's memory (the same answers with it as without: tests/test_prefix_cache.py)
NO_ANSWER_CHANGE = ("device", "prefix_cache_bytes")


def default_out(args: argparse.Namespace, prune: PruneConfig) -> Path:
    k = f"-k{prune.k}" if prune.method == "fastv" else ""
    pos = "-pos" if prune.keep_positions else ""
    return Path("runs") / f"{args.dataset}-{prune.method}{k}-r{prune.r}{pos}"


def answer_length(args: argparse.Namespace) -> int:
    """--max-new-tokens, or the dataset's protocol: 1024 for the judged sets (Video-LLaVA's
    run_inference_video_qa.py), lmms-eval's generation_kwargs for a multiple-choice one (16; LongVideoBench 32)."""
    if args.max_new_tokens is not None:
        return args.max_new_tokens
    return MC_BENCHMARKS[args.dataset].max_new_tokens if args.dataset in MC_BENCHMARKS else 1024


def run_eval_command(args: argparse.Namespace) -> int:
    if args.dataset in MC_BENCHMARKS:
        return run_mc_command(args)
    if args.split is not None or args.subtitles:
        raise InputError(f"--split and --subtitles apply to the multiple-choice sets, not {args.dataset}")
    args.max_new_tokens = answer_length(args)
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
    config = {key: value for key, value in spec.items() if key not in NO_ANSWER_CHANGE}
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


def run_mc_command(args: argparse.Namespace) -> int:
    """A multiple-choice benchmark: predicted by the same batch run, scored by the option letter (no judge)."""
    from ..eval.mc_run import check_scored, format_mc_result, load_mc_dataset, run_mc_eval

    if args.judge != "exact" or args.judge_model or args.judge_base_url or args.judge_cache:
        raise InputError(f"{args.dataset} is scored by the option letter; the judge options apply to "
                         f"{', '.join(sorted(DATASETS))}")
    args.max_new_tokens = answer_length(args)
    spec = model_spec_from_args(args)
    ds = load_mc_dataset(args.dataset, args.root, args.split, args.subtitles, args.frames or 8, args.limit,
                         args.subset_seed)
    config = {"dataset": args.dataset, "split": args.split, "subtitles": args.subtitles,
              **{key: value for key, value in spec.items() if key not in NO_ANSWER_CHANGE}}
    out = Path(args.out) if args.out else default_out(args, PruneConfig(**spec["prune"]))
    result = run_mc_eval(ds, out, backend_from_args(args, spec), config, retry_errors=args.retry_errors,
                         progress=not args.no_progress, wait=args.wait)
    print(format_mc_result(result, [f"{it.question_id}:{it.video_name}" for it in ds.missing]))
    print(f"-> {out / 'results.json'}; per question: {out / 'audit.jsonl'}"
          + (f"; official file: {result['official']}" if result.get("official") else ""))
    check_scored(result)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from ..eval.mc_report import mc_tables
    from ..eval.report import load_results, markdown_table, plot_accuracy_vs_flops

    results = load_results(args.runs)
    table = markdown_table(results) + mc_tables(results)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    if args.plot:
        print(f"plot -> {plot_accuracy_vs_flops(results, args.plot)}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate on MSVD-QA / MSRVTT-QA / TGIF-QA (GPT_Zero_Shot_QA layout) or a "
                                    "multiple-choice benchmark (Video-MME, MVBench, EgoSchema, LongVideoBench, MLVU, "
                                    "NExT-QA)",
                       description="Predict answers for a QA set (resumable); judge them (open-ended sets) or score "
                                   "the option letter (multiple-choice sets).")
    p.add_argument("--dataset", required=True, choices=sorted(DATASETS) + sorted(MC_BENCHMARKS))
    p.add_argument("--root", required=True,
                   help="the dataset folder (with test_q.json, test_a.json) or the GPT_Zero_Shot_QA folder above it; "
                        "for a multiple-choice set its own folder, as distributed (docs/evaluation.md)")
    p.add_argument("--split", default=None,
                   help="multiple-choice sets: videomme short/medium/long; egoschema subset (default) / full; "
                        "longvideobench val / test; nextqa test / val; mvbench or mlvu: one task")
    p.add_argument("--subtitles", action="store_true",
                   help="videomme: the subtitles at the sampled frames go before the question (lmms-eval's "
                        "videomme_w_subtitle)")
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
    # The multiple-choice sets take lmms-eval's per-task length (16; LongVideoBench 32). None: not given.
    p.set_defaults(func=run_eval_command, max_new_tokens=None)

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
