"""How a judge's reply becomes a verdict and a score, and how verdicts become accuracy and average score.

Two rules, chosen with `--scoring`:

- `official` (the default): what Video-LLaVA's `eval_video_qa.py` does. The whole reply must be a Python
  literal (`ast.literal_eval`); a reply that is not is asked again. Its score counts as `int(score)` (4.8
  counts 4, no range check); a verdict whose lower-case text contains "yes" is yes, else one containing "no"
  is no ("not sure" is no), else neither. A reply whose score `int()` cannot read counts 0 towards the
  average score and is neither yes nor no; one whose verdict is unreadable keeps its score. The average score
  is over every judged question; accuracy = yes / (yes + no).
- `strict`: our parser. It finds the dict inside prose or code fences, also reads JSON and `pred: yes,
  score: 4`, requires 'yes' or 'no' and a score in 0-5, keeps fractional scores, and asks again otherwise
  (also when the reply holds two verdicts that disagree).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable

from ..jsonio import parse_json

SCORINGS = ("official", "strict")


def parse_official(reply: str) -> object:
    """The reply as the official script reads it: `ast.literal_eval` of the whole text, which must also be
    storable as JSON (the official script writes it with `json.dump`; we write no NaN or infinity, so a score
    of 1e400 is unreadable, asked again). Raises ValueError otherwise."""
    try:
        value = ast.literal_eval(reply)
        json.dumps(value, allow_nan=False)  # not storable either: NaN / Infinity are not JSON
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"the reply is not a Python literal: {reply[:120]!r}") from None
    return value


def official_verdict(value: object) -> tuple[str | None, float | None]:
    """(verdict, score) of a parsed reply, step for step as the official aggregation: the score first, and
    if that fails the verdict is not looked at."""
    try:
        score = float(int(value["score"]))  # type: ignore[index]
    except Exception:  # the official loop catches everything here and moves on
        return None, None
    try:
        text = value["pred"].lower()  # type: ignore[index]
        return ("yes" if "yes" in text else "no" if "no" in text else None), score
    except Exception:
        return None, score


def parse_strict(text: str) -> tuple[str, float]:
    """('yes'|'no', score) from a judge reply; tolerant of prose around the dict, JSON or Python quoting,
    code fences and string scores. Raises ValueError when the reply holds no usable verdict, or two that
    disagree (taking the first would be a guess)."""
    found = set()
    for m in re.finditer(r"\{[^{}]*\}", text):  # every flat dict in the reply, not only the first
        for parse in (ast.literal_eval, parse_json):
            try:
                d = parse(m.group(0))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(d, dict):
                d = {str(k).strip().lower(): v for k, v in d.items()}
                if "pred" in d and "score" in d:
                    found.add(_check(d["pred"], d["score"], text))
                break
    if not found:
        # Fallback: key/value pairs without a parsable dict, e.g. "pred: yes, score: 4" or a cut-off dict.
        preds = {p.lower() for p in re.findall(r"pred\W{0,4}(yes|no)\b", text, re.I)}
        scores = {float(s) for s in re.findall(r"score\W{0,4}(\d+(?:\.\d+)?)", text, re.I)}
        if len(preds) > 1 or len(scores) > 1:
            raise ValueError(f"contradictory verdicts in the reply: {text[:120]!r}")
        if preds and scores:
            found = {_check(preds.pop(), scores.pop(), text)}
    if len(found) > 1:
        raise ValueError(f"contradictory verdicts in the reply: {text[:120]!r}")
    if found:
        return found.pop()
    raise ValueError(f"no {{'pred', 'score'}} in the reply: {text[:120]!r}")


def _check(pred, score, text: str) -> tuple[str, float]:
    p = str(pred).strip().lower()
    if p not in ("yes", "no"):
        raise ValueError(f"'pred' is neither yes nor no: {text[:120]!r}")
    try:
        s = float(score)
    except (TypeError, ValueError):
        raise ValueError(f"'score' is not a number: {text[:120]!r}") from None
    if not 0.0 <= s <= 5.0:
        raise ValueError(f"'score' {s} is outside 0-5")
    return p, s


def verdict(reply: str, scoring: str) -> tuple[str | None, float | None]:
    """(verdict, score) of a reply under a rule; ValueError when the rule would ask the judge again."""
    if scoring == "official":
        return official_verdict(parse_official(reply))
    if scoring == "strict":
        return parse_strict(reply)
    raise ValueError(f"unknown scoring {scoring!r}; choose {' or '.join(SCORINGS)}")


def aggregate(judgments: Iterable) -> dict:
    """Counts, accuracy and average score of judgments (objects with .failed, .pred, .score).

    `judged` are the questions with a usable reply; a failed judgment (no usable reply after the retries) is
    counted apart and left out, as the official script has no file for it."""
    judgments = list(judgments)
    judged = [j for j in judgments if not j.failed]
    yes = sum(j.pred == "yes" for j in judged)
    no = sum(j.pred == "no" for j in judged)
    return {
        "judged": len(judged),
        "judge_failed": len(judgments) - len(judged),
        "yes": yes,
        "no": no,
        "neither": len(judged) - yes - no,
        "accuracy": yes / (yes + no) if yes + no else None,
        "score": sum(j.score or 0.0 for j in judged) / len(judged) if judged else None,
    }
