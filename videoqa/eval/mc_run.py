"""Evaluating on a multiple-choice benchmark: the same resumable, single-writer run as `run.py` (predictions by
the batch machinery, any back end, Ray included), scored by letter instead of by a judge.

The run folder holds:

    predictions.jsonl   one batch record per question (key = question id), appended as produced
    missing_videos.txt  question id and video of each question whose clip is not on disk
    config.json         model, prompt and pruning options (a resumed run must use the same ones)
    audit.jsonl         per question: the prompt, options, reference, reply, extracted letter, status
    official/           the benchmark's own result or submission file, where it has one
    results.json        the summary `videoqa report` reads (overall, per category, blind baselines)
    run.lock            while a run works on the folder
"""

from __future__ import annotations

import json
from pathlib import Path

from ..batch.lock import exclusive
from ..batch.run import Produce
from ..batch.store import replace_file
from ..batch.worklist import WorkItem
from ..errors import IncompleteError, InputError
from .choice import LETTERS, MCDataset, Scored, extract_choice, score
from .datasets import MISSING_WARN_FRACTION, select
from .mc_layouts import MC_BENCHMARKS
from .protocol import OFFICIAL_DIR, write_audit
from .run import pct, predict, prepare_run_folder, run_options, token_means, tokens_line


def load_mc_dataset(name: str, root: str | Path, split: str | None = None, subtitles: bool = False,
                    frames: int = 8, limit: int | None = None, seed: int | None = None) -> MCDataset:
    bench = MC_BENCHMARKS[name]
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a folder (--root is the {bench.title} folder)")
    if split is not None and split not in bench.splits:
        raise InputError(f"--split {split!r} is not a {bench.title} split; choose one of {', '.join(bench.splits)}")
    if subtitles and name != "videomme":
        raise InputError("--subtitles applies to --dataset videomme only")
    items, n = (bench.load(root, split, subtitles, frames) if name == "videomme" else bench.load(root, split))
    return MCDataset(name, root, select(items, limit, seed), n, bench.category_keys, bench.macro_key)


def check_usable(ds: MCDataset) -> None:
    if not ds.items:
        raise InputError(f"{ds.root}: no questions selected")
    if not ds.present:
        shown = ", ".join(it.video_name for it in ds.items[:3])
        raise InputError(f"{ds.root}: none of the {len(ds.items)} videos was found (e.g. {shown})")


def _work(ds: MCDataset) -> list[WorkItem]:
    return [WorkItem(key=it.question_id, video=str(it.video), question=it.prompt, id=it.question_id)
            for it in ds.present]


def audit_rows(ds: MCDataset, predictions: dict[str, dict]) -> list[dict]:
    rows = []
    for it in ds.items:
        rec = predictions.get(it.question_id)
        ok = rec is not None and not rec.get("error")
        reply = str(rec["answer"]) if ok else None
        letter = extract_choice(reply, it.options) if ok else None
        status = ("missing_video" if it.video is None else "not_predicted" if rec is None
                  else "prediction_error" if not ok else "no_reference" if it.answer is None
                  else "correct" if letter == it.answer else "no_option" if letter is None else "wrong")
        rows.append({"id": it.question_id, "video_name": it.video_name, "prompt": it.prompt, "options": it.options,
                     "answer": it.answer, "reply": reply, "pred": letter, "categories": it.categories,
                     "status": status, "error": (f"video {it.video_name!r} not found under {ds.root}: not asked, "
                                                 "not scored, counted as missing" if it.video is None
                                                 else (rec or {}).get("error"))})
    return rows


def summarize(ds: MCDataset, audit: list[dict], predictions: dict[str, dict], config: dict) -> dict:
    bench = MC_BENCHMARKS[ds.name]
    by_id = {it.question_id: it for it in ds.items}
    scored = [Scored(by_id[r["id"]], r["pred"]) for r in audit if r["reply"] is not None and r["answer"] is not None]
    table = score(scored, ds.category_keys, ds.macro_key)
    with_ref = sum(it.answer is not None for it in ds.items)
    ok = [predictions[r["id"]] for r in audit if r["reply"] is not None]
    n, k = len(ds.items), len(ds.missing)
    overall = table["overall"]
    return {
        "kind": "multiple-choice",
        "dataset": ds.name,
        "title": bench.title,
        "split": config.get("split"),
        "subtitles": config.get("subtitles"),
        "root": str(ds.root),
        **run_options(config),
        "questions_in_file": ds.n_questions,
        "questions": n,
        "missing_videos": k,
        "warning": (f"warning: {k} of {n} videos ({100 * k / n:.1f}%) are missing; scores are over the rest and "
                    "not comparable with published numbers") if n and k / n > MISSING_WARN_FRACTION else None,
        "predicted": len(ok),
        "prediction_errors": sum(r["status"] == "prediction_error" for r in audit),
        "first_prediction_error": next((r["error"] for r in audit if r["status"] == "prediction_error"), None),
        "not_predicted": sum(r["status"] == "not_predicted" for r in audit),
        "without_reference": n - with_ref,
        "bad_reference": sum(it.answer is not None and it.answer not in LETTERS[: len(it.options)]
                             for it in ds.items),
        "scored": overall["n"],
        "correct": overall["correct"],
        "no_option": overall["no_option"],
        "accuracy": overall["accuracy"],
        "accuracy_all": overall["correct"] / with_ref if with_ref else None,  # missing / errors counted wrong
        "macro_accuracy": overall.get("macro_accuracy"),
        "baselines": {key: overall.get(key) for key in ("letter_baseline", "most_common_letter",
                                                         "letter_baseline_per_category", "option_prior", "chance")},
        "categories": table["categories"],
        # the columns `videoqa report` shares with the judged sets
        "judged": overall["n"], "judge_failed": 0, "judge": "letter", "judge_model": ["extract_choice"],
        "score": None,
        **token_means(ok),
    }


def write_export(ds: MCDataset, audit: list[dict], folder: Path) -> Path | None:
    bench = MC_BENCHMARKS[ds.name]
    if bench.export is None:
        return None
    answered = {r["id"]: (r["pred"] if bench.export_letters else r["reply"]) for r in audit if r["reply"] is not None}
    name, data = bench.export(ds.items, answered)
    folder.mkdir(parents=True, exist_ok=True)
    replace_file(folder / name, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))
    return folder / name


def run_mc_eval(ds: MCDataset, out: str | Path, produce: Produce, config: dict, *, retry_errors: bool = False,
                progress: bool = True, wait: bool = False) -> dict:
    """Predict (resumable batch), score by letter, write results.json, audit.jsonl and the official file."""
    check_usable(ds)
    out = Path(out)
    prepare_run_folder(out)
    with exclusive(out, wait=wait, lock=out / "run.lock"):
        batch, predictions = predict(out, config, ds.missing, _work(ds), produce, retry_errors, progress, wait)
        audit = audit_rows(ds, predictions)
        write_audit(out / "audit.jsonl", audit)
        exported = write_export(ds, audit, out / OFFICIAL_DIR)
        result = summarize(ds, audit, predictions, config)
        result["official"] = str(exported) if exported else None
        result["batch"] = {"ran": batch.ran, "already_done": batch.already_done, "seconds": round(batch.seconds, 3)}
        replace_file(out / "results.json", json.dumps(result, indent=1).encode())
    return result


def check_scored(r: dict) -> None:
    """IncompleteError when questions with a video and a reference were asked and none could be scored."""
    if r["scored"] == 0 and r["questions"] - r["missing_videos"] - r["without_reference"] > 0:
        raise IncompleteError(
            f"none of the questions with a video was scored: {r['prediction_errors']} prediction errors (first: "
            f"{r.get('first_prediction_error')}), {r['not_predicted']} not predicted; re-run with --retry-errors "
            "once the cause is fixed")


def _cell_row(name: str, c: dict) -> str:
    return (f"| {name} | {c['n']} | {pct(c['accuracy'])} | {c['no_option']} | {c['most_common_letter'] or '-'} "
            f"{pct(c['letter_baseline'])} | {pct(c['option_prior'])} | {pct(c['chance'])} |")


def category_tables(r: dict) -> list[str]:
    head = ["| {key} | n | accuracy | no option | most common letter | option prior | chance |",
            "|---|---|---|---|---|---|---|"]
    lines = []
    for key, cells in (r.get("categories") or {}).items():
        lines += ["", head[0].format(key=key), head[1], *(_cell_row(v, c) for v, c in cells.items())]
    return lines


def format_mc_result(r: dict, missing: list[str] | None = None) -> str:
    b = r["baselines"]
    lines = [
        f"{r['title']}{' (' + r['split'] + ')' if r.get('split') else ''}"
        f"{' with subtitles' if r.get('subtitles') else ''}: {r['questions']} questions "
        f"({r['questions_in_file']} in the files)",
        f"  missing videos {r['missing_videos']}, prediction errors {r['prediction_errors']}, scored {r['scored']}, "
        f"no option named {r['no_option']}, bad references {r['bad_reference']}, "
        f"without a published answer {r['without_reference']}",
        f"  accuracy {pct(r['accuracy'])} ({r['correct']} / {r['scored']}; over every question with an answer, "
        f"missing and errors wrong: {pct(r['accuracy_all'])})"
        + (f", mean over categories {pct(r['macro_accuracy'])}" if r.get("macro_accuracy") is not None else ""),
        f"  blind baselines: most common letter ({b['most_common_letter'] or '-'}) {pct(b['letter_baseline'])}"
        + (f", per category {pct(b['letter_baseline_per_category'])}"
           if b.get("letter_baseline_per_category") is not None else "")
        + f", option prior {pct(b['option_prior'])}, chance {pct(b['chance'])}",
        f"  [prompt {r.get('prompt')}, max {r.get('max_new_tokens')} new tokens, frames "
        f"{r.get('frames') or 'as the model says'}]",
        tokens_line(r),
    ]
    if r.get("warning"):
        lines.append(f"  {r['warning']}")
    if missing:
        shown = ", ".join(missing[:10]) + (f", ... ({len(missing) - 10} more)" if len(missing) > 10 else "")
        lines.append(f"  missing: {shown}")
    return "\n".join(lines + category_tables(r))
