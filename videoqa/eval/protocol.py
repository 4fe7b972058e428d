"""The audit trail of an eval run, and its export in the official files' shapes.

Per question, `audit.jsonl` holds the id, video, question, reference answer, prediction, verdict, score, the
judge's reply and why a question was not judged (missing video, prediction error, judge failure).

The official files are those Video-LLaVA's scripts pass between inference and judging:

    merge.jsonl    one `{"id", "question", "answer", "pred"}` line per predicted question
                   (run_inference_video_qa.py; the run scripts concatenate the chunks into merge.jsonl)
    results.json   `{id: [judge_dict, {"q", "a", "pred"}]}` for every judged question
                   (eval_video_qa.py combines its per-question `{id}.json` files into this)

so the official aggregation, or the official judge script on merge.jsonl, can be run on our predictions.
Ids are written as strings: the official judge keys its work by file name, so an int id would not be found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ..batch.store import replace_file
from ..jsonio import dumps
from .scoring import parse_official

OFFICIAL_DIR = "official"  # under the run folder, beside our own results.json (which `videoqa report` reads)


def _status(item, record: dict | None, judgment) -> str:
    if item.video is None:
        return "missing_video"
    if record is None:
        return "not_predicted"
    if record.get("error"):
        return "prediction_error"
    if judgment is None:
        return "not_judged"
    return "judge_failed" if judgment.failed else "judged"


def audit_rows(items: Iterable, predictions: Mapping[str, dict], judgments: Mapping) -> list[dict]:
    """One row per question (QAItem), in dataset order; `predictions` are batch records and `judgments`
    Judgments, both by question_id."""
    rows = []
    for it in items:
        rec, j = predictions.get(it.question_id), judgments.get(it.question_id)
        ok = rec is not None and not rec.get("error")
        rows.append(
            {
                "id": it.question_id,
                "video_name": it.video_name,
                "question": it.question,
                "answer": it.answer,
                "pred": str(rec["answer"]) if ok else None,
                "verdict": j.pred if ok and j else None,
                "score": j.score if ok and j else None,
                "judge_reply": j.reply if ok and j else None,
                "judge_model": j.judge_model if ok and j else None,
                "scoring": j.scoring if ok and j else None,
                "status": _status(it, rec, j),
                "error": (rec or {}).get("error") or (j.error if ok and j else None),
            }
        )
    return rows


def merge_rows(audit: Iterable[dict]) -> list[dict]:
    """merge.jsonl rows: every question with a prediction, keys in the official order."""
    return [
        {"id": str(r["id"]), "question": r["question"], "answer": r["answer"], "pred": r["pred"]}
        for r in audit
        if r["pred"] is not None
    ]


def results_json(audit: Iterable[dict]) -> dict[str, list]:
    """results.json: every judged question -> [the judge's dict, {"q", "a", "pred"}].

    Under official scoring the dict is the judge's reply read with `ast.literal_eval`, as the official script
    stores it; under strict scoring (whose replies need not be literals) it is our reading of the reply,
    `{'pred', 'score'}`, with the fractional score kept."""
    out = {}
    for r in audit:
        if r["status"] != "judged":
            continue
        if r["scoring"] == "official":
            judged = parse_official(r["judge_reply"])
        else:
            judged = {"pred": r["verdict"], "score": r["score"]}
        out[str(r["id"])] = [judged, {"q": r["question"], "a": r["answer"], "pred": r["pred"]}]
    return out


def _write(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so a killed run never leaves half a file."""
    replace_file(path, text.encode("utf-8"))


def write_audit(path: str | Path, audit: Iterable[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, "".join(dumps(r, ensure_ascii=False) + "\n" for r in audit))
    return path


def write_official(folder: str | Path, audit: list[dict]) -> tuple[Path, Path]:
    """merge.jsonl and results.json in `folder`, serialized as the official scripts write them
    (`json.dumps` / `json.dump` with their default separators and ASCII escapes)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    merge, results = folder / "merge.jsonl", folder / "results.json"
    _write(merge, "".join(dumps(r) + "\n" for r in merge_rows(audit)))
    _write(results, dumps(results_json(audit)))
    return merge, results
