"""Judges: does a predicted answer match the reference? Each gives a reply in the judge protocol's format,
read into yes/no and a 0-5 score by the chosen scoring rule (`scoring.py`).

- `ExactJudge`: offline, normalized matching (case, punctuation, articles, number words).
- `GPTJudge`: the Video-ChatGPT judge protocol against any OpenAI-compatible chat endpoint (OpenAI, or a
  local vLLM / Vicuna server). The API key comes from the environment only and never appears in logs, errors
  or files. Failures are bounded: each request ends within its timeout, and a reply that cannot be read after
  the retries is a counted judge failure, never an endless loop.

Judgments are cached on disk (`JudgmentCache`), keyed by judge model + question + answer + prediction, so a
re-run pays only for what it has not judged yet; the cached reply is re-read when the scoring rule changes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import ssl
import sys
import time
import unicodedata
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..batch.store import open_for_append, read_no_follow, write_error
from ..errors import InputError
from ..jsonio import JSONProblem, dumps, parse_json
from .judge_http import MAX_REPLY_BYTES, HTTPFailure, post_json
from .scoring import SCORINGS, verdict

# Video-ChatGPT's judge prompt (quantitative_evaluation/evaluate_activitynet_qa.py), byte for byte as
# Video-LLaVA's eval_video_qa.py sends it: the source joins adjacent string literals, so "task:" "------"
# "##INSTRUCTIONS: " run together without newlines.
SYSTEM_PROMPT = (
    "You are an intelligent chatbot designed for evaluating the correctness of generative outputs for "
    "question-answer pairs. Your task is to compare the predicted answer with the correct answer and "
    "determine if they match meaningfully. Here's how you can accomplish the task:------##INSTRUCTIONS: "
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
DEFAULT_GPT_MODEL = "gpt-3.5-turbo-0125"  # pinned: another judge version moves accuracy by points


@dataclass(frozen=True)
class Judgment:
    pred: str | None  # "yes" | "no"; None when the judge failed, or (official scoring) the verdict says neither
    score: float | None  # None when the judge failed, or (official scoring) int() could not read it
    judge_model: str  # the model that judged (as the endpoint reports it, when it does)
    failed: bool = False
    error: str | None = None
    attempts: int = 1
    reply: str | None = None  # the judge's text, as received
    scoring: str = "strict"  # the rule that read `reply` into pred/score (entries cached before it: strict)

    def to_dict(self) -> dict:
        return asdict(self)


def rescore(j: Judgment, scoring: str) -> Judgment | None:
    """`j` read under another scoring rule; None when its reply is not usable under that rule."""
    if j.scoring == scoring:
        return j
    if j.failed or j.reply is None:
        return None
    try:
        pred, score = verdict(j.reply, scoring)
    except ValueError:
        return None
    return replace(j, pred=pred, score=score, scoring=scoring)


def _check_scoring(scoring: str) -> str:
    if scoring not in SCORINGS:
        raise InputError(f"unknown scoring {scoring!r}; choose {' or '.join(SCORINGS)}")
    return scoring


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
    """Unicode format characters (U+200B zero width space, U+202E right-to-left override, ...: invisible, so
    never a difference a reader sees) removed, lower case, punctuation to spaces, articles dropped, number
    words as digits -> list of words."""
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    words = re.sub(r"[^\w\s]|_", " ", text.lower()).split()
    return [_NUMBER_WORDS.get(w, w) for w in words if w not in _ARTICLES]


class ExactJudge:
    """Yes when the normalized answer equals the prediction or occurs in it as a run of whole words
    ("2" matches "there are two dogs."); score 5 for yes and 0 for no. Its reply has the official format, so
    both scoring rules read it alike."""

    name = "exact"
    model = "exact-normalized-v1"

    def __init__(self, scoring: str = "official"):
        self.scoring = _check_scoring(scoring)

    def judge(self, question: str, answer: str, pred: str) -> Judgment:
        a, p = normalize(answer), normalize(pred)
        hit = bool(a) and any(p[i : i + len(a)] == a for i in range(len(p) - len(a) + 1))
        reply = "{'pred': 'yes', 'score': 5}" if hit else "{'pred': 'no', 'score': 0}"
        v, score = verdict(reply, self.scoring)
        return Judgment(pred=v, score=score, judge_model=self.model, reply=reply, scoring=self.scoring)


# --------------------------------------------------------------------------------------------- GPT judge


class GPTJudge:
    """The Video-ChatGPT judge over an OpenAI-compatible `/chat/completions` endpoint.

    Each request ends within `timeout_s`, however slowly the server sends. Transient failures (connection
    errors, timeouts, HTTP 429 / 5xx, replies the scoring rule cannot read) are retried up to `retries` times,
    after the server's Retry-After when it sends one, else with exponential backoff; then the item is a judge
    failure. A refused request (HTTP 401/403/404: wrong key, URL or model) stops the run with an error, since
    every item would fail alike.
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
        scoring: str = "official",
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ):
        self.model = model
        self.max_reply_bytes = max_reply_bytes
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.scoring = _check_scoring(scoring)
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
            raise InputError(f"the judge timeout must be a number of seconds > 0, got {timeout_s!r}")
        if not isinstance(retries, int) or retries < 0:  # -1 would send no request and count a silent failure
            raise InputError(f"judge retries must be a whole number >= 0, got {retries!r}")
        if not isinstance(max_reply_bytes, int) or isinstance(max_reply_bytes, bool) or max_reply_bytes < 1:
            raise InputError(f"the judge reply limit must be a whole number of bytes >= 1, got {max_reply_bytes!r}")
        self._tls = ssl.create_default_context() if self.base_url.startswith("https:") else None

    def __repr__(self) -> str:  # no key here, ever
        return f"GPTJudge(model={self.model!r}, base_url={self.base_url!r})"

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _post(self, question: str, answer: str, pred: str) -> tuple[str, str]:
        body = {
            "model": self.model,
            "temperature": 0,  # the official script leaves OpenAI's default (1); 0 makes a re-run repeatable
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": USER_PROMPT.format(question=question, answer=answer, pred=pred)},
            ],
        }
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        data = post_json(self.base_url + "/chat/completions", body, headers, self.timeout_s, self._tls,
                         self.max_reply_bytes)
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):  # not a chat completion: a judge failure, never a verdict
            raise HTTPFailure("no choices[0].message.content in the reply")
        return content, str(data.get("model") or self.model)

    _sleep = staticmethod(time.sleep)

    def _wait(self, attempt: int, retry_after: float | None) -> None:
        if retry_after is not None:
            self._sleep(min(retry_after, 120.0))  # the server's word, within reason
        else:
            self._sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))

    def judge(self, question: str, answer: str, pred: str) -> Judgment:
        error, retry_after = "", None
        for attempt in range(self.retries + 1):
            if attempt:
                self._wait(attempt, retry_after)
            try:
                content, model = self._post(question, answer, pred)
            except HTTPFailure as e:
                if not e.retryable:
                    raise InputError(
                        f"judge endpoint {self.base_url} refused the request ({e}); "
                        "check --judge-base-url, --judge-model and the API key variable"
                    ) from None
                error, retry_after = self._redact(str(e)), e.retry_after
                continue
            try:
                v, score = verdict(content, self.scoring)
            except ValueError as e:
                error, retry_after = self._redact(str(e)), None
                continue
            return Judgment(pred=v, score=score, judge_model=model, attempts=attempt + 1, reply=content,
                            scoring=self.scoring)
        return Judgment(pred=None, score=None, judge_model=self.model, failed=True, error=error,
                        attempts=self.retries + 1, scoring=self.scoring)


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
            data = read_no_follow(self.path)
            for line in data.decode("utf-8", "replace").splitlines():
                try:
                    d = parse_json(line)
                    self._entries[d["key"]] = d
                except (JSONProblem, KeyError, TypeError):
                    continue  # a line torn by a kill: that judgment is redone
            if data and not data.endswith(b"\n"):
                self._append(b"\n")  # start the next record on a line of its own

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> Judgment | None:
        d = self._entries.get(key)
        if d is None:
            return None
        try:
            return Judgment(**{k: v for k, v in d.items() if k != "key"})
        except TypeError:  # an entry of another shape: judged again
            return None

    def put(self, key: str, j: Judgment) -> None:
        if j.failed:
            return
        d = {"key": key, **j.to_dict()}
        self._entries[key] = d
        self._append((dumps(d) + "\n").encode())

    def _append(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_for_append(self.path)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:  # a full disk: one line; the judgments cached before are kept
            raise write_error(self.path, e) from None


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
        hit = None if hit is None else rescore(hit, judge.scoring)
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
    scoring: str = "official",
    max_reply_bytes: int = MAX_REPLY_BYTES,
):
    if name == "exact":
        return ExactJudge(scoring)
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
            scoring=scoring,
            max_reply_bytes=max_reply_bytes,
        )
    raise InputError(f"unknown judge {name!r}; choose exact or gpt")
