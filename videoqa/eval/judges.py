"""Judges: does a predicted answer match the reference? Each returns yes/no and a 0-5 score.

- `ExactJudge`: offline, normalized matching (case, punctuation, articles, number words).
- `GPTJudge`: the Video-ChatGPT judge protocol against any OpenAI-compatible chat endpoint (OpenAI, or a
  local vLLM / Vicuna server), over plain HTTP. The API key comes from the environment only and never
  appears in logs, errors or files. Failures are bounded: a reply that cannot be parsed after the retries
  is a counted judge failure, never an endless loop.

Judgments are cached on disk (`JudgmentCache`), keyed by judge model + question + answer + prediction, so a
re-run pays only for what it has not judged yet.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import InputError

# Video-ChatGPT's judge prompt (quantitative_evaluation/evaluate_activitynet_qa.py), as Video-LLaVA uses it.
SYSTEM_PROMPT = (
    "You are an intelligent chatbot designed for evaluating the correctness of generative outputs for "
    "question-answer pairs. Your task is to compare the predicted answer with the correct answer and "
    "determine if they match meaningfully. Here's how you can accomplish the task:\n------\n##INSTRUCTIONS:\n"
    "- Focus on the meaningful match between the predicted answer and the correct answer.\n"
    "- Consider synonyms or paraphrases as valid matches.\n"
    "- Evaluate the correctness of the prediction compared to the answer."
)
USER_PROMPT = (
    "Please evaluate the following video-based question-answer pair:\n\n"
    "Question: {question}\nCorrect Answer: {answer}\nPredicted Answer: {pred}\n\n"
    "Provide your evaluation only as a yes/no and score where the score is an integer value between 0 and 5, "
    "with 5 indicating the highest meaningful match. Please generate the response in the form of a Python "
    "dictionary string with keys 'pred' and 'score', where value of 'pred' is  a string of 'yes' or 'no' and "
    "value of 'score' is in INTEGER, not STRING.DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only "
    "provide the Python dictionary string. For example, your response should look like this: "
    "{{'pred': 'yes', 'score': 4.8}}."
)

API_KEY_ENV = ("VIDEOQA_JUDGE_API_KEY", "OPENAI_API_KEY")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_GPT_MODEL = "gpt-3.5-turbo-0125"  # pinned: judge versions move accuracy by points (DESIGN.md §6)


@dataclass
class Judgment:
    pred: str | None  # "yes" | "no"; None when the judge failed
    score: float | None
    judge_model: str  # the model that judged (as the endpoint reports it, when it does)
    failed: bool = False
    error: str | None = None
    attempts: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------- exact judge

_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_NUMBER_WORDS.update(
    {
        "thirty": "30",
        "forty": "40",
        "fifty": "50",
        "sixty": "60",
        "seventy": "70",
        "eighty": "80",
        "ninety": "90",
        "hundred": "100",
        "none": "0",
        "no one": "0",
    }
)
_ARTICLES = {"a", "an", "the"}


def normalize(text: str) -> list[str]:
    """Lower case, punctuation to spaces, articles dropped, number words as digits -> list of words."""
    words = re.sub(r"[^\w\s]|_", " ", text.lower()).split()
    return [_NUMBER_WORDS.get(w, w) for w in words if w not in _ARTICLES]


class ExactJudge:
    """Yes when the normalized answer equals the prediction or occurs in it as a run of whole words
    ("2" matches "there are two dogs."); score 5 for yes and 0 for no."""

    name = "exact"
    model = "exact-normalized-v1"

    def judge(self, question: str, answer: str, pred: str) -> Judgment:
        a, p = normalize(answer), normalize(pred)
        hit = bool(a) and any(p[i : i + len(a)] == a for i in range(len(p) - len(a) + 1))
        return Judgment(pred="yes" if hit else "no", score=5.0 if hit else 0.0, judge_model=self.model)


# --------------------------------------------------------------------------------------------- GPT judge


def parse_judgment(text: str) -> tuple[str, float]:
    """('yes'|'no', score) from a judge reply; tolerant of prose around the dict, JSON or Python quoting,
    code fences and string scores. Raises ValueError when the reply holds no usable verdict."""
    m = re.search(r"\{.*\}", text, re.S)
    if m:
        for parse in (ast.literal_eval, json.loads):
            try:
                d = parse(m.group(0))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(d, dict):
                d = {str(k).strip().lower(): v for k, v in d.items()}
                if "pred" in d and "score" in d:
                    return _check(d["pred"], d["score"], text)
    # Fallback: key/value pairs without a parsable dict, e.g. "pred: yes, score: 4" or a cut-off dict.
    mp = re.search(r"pred\W{0,4}(yes|no)\b", text, re.I)
    ms = re.search(r"score\W{0,4}(\d+(?:\.\d+)?)", text, re.I)
    if mp and ms:
        return _check(mp.group(1), ms.group(1), text)
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


class JudgeHTTPError(Exception):
    def __init__(self, status: int | None, message: str, retryable: bool):
        self.status, self.retryable = status, retryable
        super().__init__(message)


class GPTJudge:
    """The Video-ChatGPT judge over an OpenAI-compatible `/chat/completions` endpoint.

    Transient failures (connection errors, timeouts, HTTP 429 / 5xx, unparsable replies) are retried up to
    `retries` times with exponential backoff; then the item is a judge failure. A refused request (HTTP
    401/403/404: wrong key, URL or model) stops the run with an error, since every item would fail alike.
    """

    name = "gpt"

    def __init__(
        self,
        model: str = DEFAULT_GPT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
    ):
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    def __repr__(self) -> str:  # no key here, ever
        return f"GPTJudge(model={self.model!r}, base_url={self.base_url!r})"

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _post(self, question: str, answer: str, pred: str) -> tuple[str, str]:
        body = {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": USER_PROMPT.format(question=question, answer=answer, pred=pred)},
            ],
        }
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(
            self.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers=headers,
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            retryable = e.code == 429 or e.code >= 500
            raise JudgeHTTPError(e.code, f"HTTP {e.code} {e.reason}", retryable) from None
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise JudgeHTTPError(
                None, f"cannot reach {self.base_url}: {getattr(e, 'reason', e)}", True
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise JudgeHTTPError(None, "the endpoint did not return JSON", True) from None
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeHTTPError(None, "no choices[0].message.content in the reply", True) from None
        return str(content or ""), str(data.get("model") or self.model)

    def judge(self, question: str, answer: str, pred: str) -> Judgment:
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))
            try:
                content, model = self._post(question, answer, pred)
            except JudgeHTTPError as e:
                if not e.retryable:
                    raise InputError(
                        f"judge endpoint {self.base_url} refused the request ({e}); "
                        "check --judge-base-url, --judge-model and the API key variable"
                    ) from None
                error = self._redact(str(e))
                continue
            try:
                verdict, score = parse_judgment(content)
            except ValueError as e:
                error = self._redact(str(e))
                continue
            return Judgment(pred=verdict, score=score, judge_model=model, attempts=attempt + 1)
        return Judgment(
            pred=None, score=None, judge_model=self.model, failed=True, error=error, attempts=self.retries + 1
        )


def api_key_from_env() -> str | None:
    for name in API_KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


# ------------------------------------------------------------------------------------------------- cache


def cache_key(judge_model: str, question: str, answer: str, pred: str) -> str:
    return hashlib.sha256(json.dumps([judge_model, question, answer, pred]).encode()).hexdigest()


class JudgmentCache:
    """Successful judgments, one JSON line each; failures are not cached so a re-run retries them."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._entries: dict[str, dict] = {}
        if self.path.exists():
            data = self.path.read_bytes()
            for line in data.decode("utf-8", "replace").splitlines():
                try:
                    d = json.loads(line)
                    self._entries[d["key"]] = d
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line torn by a kill: that judgment is redone
            if data and not data.endswith(b"\n"):
                with open(self.path, "ab") as f:  # start the next record on a line of its own
                    f.write(b"\n")

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Judgment | None:
        d = self._entries.get(key)
        return None if d is None else Judgment(**{k: v for k, v in d.items() if k != "key"})

    def put(self, key: str, j: Judgment) -> None:
        if j.failed:
            return
        d = {"key": key, **j.to_dict()}
        self._entries[key] = d
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(d) + "\n")


@dataclass
class JudgeRequest:
    key: str  # the caller's id (question_id)
    question: str
    answer: str
    pred: str


def judge_all(
    judge,
    requests: Iterable[JudgeRequest],
    cache: JudgmentCache | None = None,
    workers: int = 4,
    progress: bool = True,
) -> dict[str, Judgment]:
    """Judge every request (cached ones for free); returns {request.key: Judgment}."""
    results: dict[str, Judgment] = {}
    todo: list[tuple[JudgeRequest, str]] = []
    for r in requests:
        ck = cache_key(judge.model, r.question, r.answer, r.pred)
        hit = cache.get(ck) if cache is not None else None
        if hit is not None:
            results[r.key] = hit
        else:
            todo.append((r, ck))
    if not todo:
        return results
    from tqdm import tqdm

    bar = tqdm(total=len(todo), unit="judgment", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        futures = {pool.submit(judge.judge, r.question, r.answer, r.pred): (r, ck) for r, ck in todo}
        for fut in as_completed(futures):
            r, ck = futures[fut]
            j = fut.result()  # InputError (endpoint refused) propagates and stops the run
            results[r.key] = j
            if cache is not None:
                cache.put(ck, j)  # written from this thread only, as each judgment arrives
            bar.update(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # on an error, queued requests are not sent
        bar.close()
    return results


def make_judge(
    name: str,
    model: str | None = None,
    base_url: str | None = None,
    retries: int = 3,
    backoff_s: float = 1.0,
    timeout_s: float = 60.0,
):
    if name == "exact":
        return ExactJudge()
    if name == "gpt":
        return GPTJudge(
            model=model or os.environ.get("VIDEOQA_JUDGE_MODEL") or DEFAULT_GPT_MODEL,
            base_url=base_url
            or os.environ.get("VIDEOQA_JUDGE_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or DEFAULT_BASE_URL,
            api_key=api_key_from_env(),
            retries=retries,
            backoff_s=backoff_s,
            timeout_s=timeout_s,
        )
    raise InputError(f"unknown judge {name!r}; choose exact or gpt")
