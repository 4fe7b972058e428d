"""Judges: normalized exact matching, and the GPT judge against a real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers.fake_judge import FakeJudge

from videoqa.errors import InputError
from videoqa.eval.judges import (
    ExactJudge,
    GPTJudge,
    JudgeRequest,
    JudgmentCache,
    judge_all,
    make_judge,
    normalize,
)
from videoqa.eval.scoring import parse_strict

KEY = "sk-test-7f3a9c-SECRET"
SERVED_MODEL = "judge-served-0613"

# What the fake judge replies, by the predicted answer it is asked about (None: HTTP 500).
REPLIES = {
    "well-formed": ["{'pred': 'yes', 'score': 4}"],
    "json": ['{"pred": "no", "score": 1}'],
    "chatty": ["Sure! Here is my evaluation:\n```python\n{'pred': 'Yes', 'score': '3'}\n```"],
    "keyvalue": ["pred: no, score: 2"],
    "garbage": ["I cannot evaluate this."],
    "out-of-range": ["{'pred': 'yes', 'score': 9}"],
    "flaky": [None, "{'pred': 'yes', 'score': 5}"],  # fails once, then answers
    "down": [None],
}


@pytest.fixture
def server():
    s = FakeJudge(REPLIES, SERVED_MODEL)
    yield s
    s.close()


def test_normalize_and_exact_judge():
    assert normalize("The Two  dogs, running!") == ["2", "dogs", "running"]
    assert normalize("An apple") == normalize("apple") == ["apple"]
    j = ExactJudge()
    assert j.judge("how many dogs?", "two", "There are 2 dogs.").pred == "yes"
    assert j.judge("what is it?", "a guitar", "the GUITAR").score == 5.0
    assert j.judge("what is it?", "guitar", "a piano").pred == "no"
    assert j.judge("what is it?", "cat", "category").pred == "no"  # whole words only
    assert j.judge("what is it?", "", "anything").pred == "no"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("{'pred': 'yes', 'score': 4}", ("yes", 4.0)),
        ('{"pred": "no", "score": 0}', ("no", 0.0)),
        ("Evaluation: {'pred': 'YES', 'score': 4.8} done", ("yes", 4.8)),
        ("{'score': '3', 'pred': ' no '}", ("no", 3.0)),
        ("```\n{'pred': 'yes', 'score': 5}\n```", ("yes", 5.0)),
        ("'pred': 'yes', 'score': 2", ("yes", 2.0)),  # no braces
        ("{'pred': 'no', 'score': 1", ("no", 1.0)),  # cut off
        ("{'pred': 'yes', 'score': 4} (again: {'pred': 'yes', 'score': 4})", ("yes", 4.0)),  # repeated alike
    ],
)
def test_parse_strict_tolerates_reply_shapes(reply, expected):
    assert parse_strict(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "I cannot evaluate this.",
        "{'pred': 'maybe', 'score': 3}",
        "{'pred': 'yes', 'score': 7}",
        "{'pred': 'yes'}",
        "",
        # Two verdicts that disagree: unreadable, not whichever comes first.
        "{'pred': 'yes', 'score': 5} Actually, on reflection: {'pred': 'no', 'score': 0}",
        "{'pred': 'no', 'score': 1}\n{'pred': 'no', 'score': 4}",
        "pred: yes, score: 5. Correction: pred: no, score: 0",
    ],
)
def test_parse_strict_rejects_unusable_replies(reply):
    with pytest.raises(ValueError):
        parse_strict(reply)


def test_gpt_judge_parses_retries_and_fails_bounded(server):
    judge = GPTJudge(model="test-judge", base_url=server.url, api_key=KEY, retries=2, backoff_s=0.01,
                     scoring="strict")
    q, a = "What is the man doing?", "playing guitar"
    expect = {
        "well-formed": ("yes", 4.0),
        "json": ("no", 1.0),
        "chatty": ("yes", 3.0),
        "keyvalue": ("no", 2.0),
        "flaky": ("yes", 5.0),
    }
    for pred, (verdict, score) in expect.items():
        j = judge.judge(q, a, pred)
        assert (j.pred, j.score, j.failed, j.judge_model) == (verdict, score, False, SERVED_MODEL), pred
    assert server.counts["flaky"] == 2 and judge.judge(q, a, "well-formed").attempts == 1

    for pred, why in (
        ("garbage", "no {'pred', 'score'}"),
        ("out-of-range", "outside 0-5"),
        ("down", "HTTP 500"),
    ):
        j = judge.judge(q, a, pred)
        assert j.failed and j.pred is None and j.score is None and why in j.error, (pred, j.error)
        assert server.counts[pred] == 3 == j.attempts  # 1 + 2 retries, then it stops
    assert server.auth == {f"Bearer {KEY}"} and server.models == {"test-judge"}
    assert KEY not in repr(judge)


def test_unreachable_endpoint_is_a_failure_not_a_hang():
    judge = GPTJudge(
        model="m", base_url="http://127.0.0.1:9/v1", api_key=KEY, retries=1, backoff_s=0.01, timeout_s=2
    )
    j = judge.judge("q", "a", "p")
    assert j.failed and "cannot reach" in j.error and KEY not in j.error


def test_refused_request_stops_the_run_without_leaking_the_key(server):
    judge = GPTJudge(
        model="m", base_url=server.url.replace("/v1", "/denied"), api_key=KEY, retries=3, backoff_s=0.01
    )
    with pytest.raises(InputError, match="HTTP 401") as e:
        judge_all(
            judge, [JudgeRequest(str(i), "q", "a", f"p{i}") for i in range(5)], workers=1, progress=False
        )
    assert KEY not in str(e.value)


def test_judge_all_caches_successes_and_retries_failures(server, tmp_path):
    judge = GPTJudge(model="test-judge", base_url=server.url, api_key=KEY, retries=1, backoff_s=0.01,
                     scoring="strict")
    reqs = [
        JudgeRequest(str(i), f"question {i}", "answer", pred)
        for i, pred in enumerate(["well-formed", "json", "garbage", "chatty"])
    ]
    cache = JudgmentCache(tmp_path / "cache.jsonl")
    first = judge_all(judge, reqs, cache, workers=3, progress=False)
    assert {k: (j.pred, j.failed) for k, j in first.items()} == {
        "0": ("yes", False),
        "1": ("no", False),
        "2": (None, True),
        "3": ("yes", False),
    }
    before = Counter(server.counts)

    # A new process reading the same cache: successes are free, the failure is asked again.
    again = judge_all(judge, reqs, JudgmentCache(tmp_path / "cache.jsonl"), workers=3, progress=False)
    spent = server.counts - before
    assert spent == Counter({"garbage": 2})
    assert {k: (j.pred, j.score) for k, j in again.items()} == {
        k: (j.pred, j.score) for k, j in first.items()
    }
    assert KEY not in (tmp_path / "cache.jsonl").read_text()

    # Another scoring rule re-reads the cached replies: only the chatty one, which the official rule cannot
    # read, is asked again (and fails again: the fake server always answers it the same way).
    before = Counter(server.counts)
    official = GPTJudge(model="test-judge", base_url=server.url, api_key=KEY, retries=0, scoring="official")
    third = judge_all(official, reqs, JudgmentCache(tmp_path / "cache.jsonl"), workers=1, progress=False)
    assert server.counts - before == Counter({"garbage": 1, "chatty": 1})
    assert {k: (j.pred, j.score, j.scoring) for k, j in third.items() if not j.failed} == {
        "0": ("yes", 4.0, "official"), "1": ("no", 1.0, "official")}

    # Another judge model does not reuse these judgments.
    before = Counter(server.counts)
    other = GPTJudge(model="other-judge", base_url=server.url, api_key=KEY, retries=0)
    judge_all(other, reqs[:1], JudgmentCache(tmp_path / "cache.jsonl"), progress=False)
    assert server.counts - before == Counter({"well-formed": 1})


def test_eval_with_the_gpt_judge_records_the_model_and_never_writes_the_key(server, tmp_path, capsys):
    from videoqa.batch.local import local_records
    from videoqa.eval.datasets import DatasetSpec, QADataset, QAItem
    from videoqa.eval.run import format_result, run_eval

    clip = tmp_path / "v.mp4"
    clip.write_bytes(b"x")
    preds = ["well-formed", "json", "garbage", "flaky"]
    ds = QADataset(spec=DatasetSpec("msvd", "MSVD_Zero_Shot_QA", ("videos",)), root=tmp_path, n_questions=4,
                   items=[QAItem(str(i), f"question {i}", "answer", "v", clip) for i in range(4)])

    def answer_fn(video, question):
        return {"answer": preds[int(question.split()[-1])]}

    judge = GPTJudge(model="test-judge", base_url=server.url, api_key=KEY, retries=1, backoff_s=0.01)
    res = run_eval(ds, tmp_path / "run", lambda todo: local_records(todo, answer_fn), judge, {"model": "m"},
                   progress=False)
    assert (res["judged"], res["judge_failed"], res["yes"], res["no"]) == (3, 1, 2, 1)
    assert res["accuracy"] == pytest.approx(2 / 3) and res["score"] == pytest.approx((4 + 1 + 5) / 3)
    assert res["judge_model"] == [SERVED_MODEL]
    print(format_result(res))
    out = capsys.readouterr()
    assert "judge failures 1" in out.out and KEY not in out.out + out.err
    files = [f for f in (tmp_path / "run").rglob("*") if f.is_file()]
    assert {f.relative_to(tmp_path / "run").as_posix() for f in files} >= {"audit.jsonl", "official/results.json"}
    for f in files:
        assert KEY not in f.read_text(), f


def test_make_judge_reads_model_url_and_key_from_env(monkeypatch, server):
    monkeypatch.setenv("VIDEOQA_JUDGE_MODEL", "env-model")
    monkeypatch.setenv("VIDEOQA_JUDGE_BASE_URL", server.url)
    monkeypatch.delenv("VIDEOQA_JUDGE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    judge = make_judge("gpt", retries=0)
    assert (judge.model, judge.base_url) == ("env-model", server.url)
    assert judge.judge("q", "a", "well-formed").pred == "yes"
    assert server.auth == {f"Bearer {KEY}"} and server.models == {"env-model"}
    assert make_judge("gpt", model="flag-model").model == "flag-model"  # a flag beats the environment
    assert isinstance(make_judge("exact"), ExactJudge)
    with pytest.raises(InputError):
        make_judge("nope")
