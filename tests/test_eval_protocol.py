"""The official evaluation protocol: judge prompt bytes, official scoring, the audit trail and the official
files (checked by running the official aggregation, transcribed below, on them), dataset layouts and the
report plot."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from helpers.fake_judge import FakeJudge

from videoqa.errors import InputError
from videoqa.eval.datasets import DatasetSpec, QADataset, QAItem, check_usable, load_dataset, missing_warning
from videoqa.eval.judges import SYSTEM_PROMPT, USER_PROMPT, GPTJudge, JudgeRequest, judge_all
from videoqa.eval.protocol import audit_rows, write_audit, write_official
from videoqa.eval.report import REFERENCES, accuracy_figure
from videoqa.eval.scoring import aggregate, official_verdict, parse_official, verdict

# Copied from Video-LLaVA videollava/eval/video/eval_video_qa.py (identical in Video-ChatGPT's
# quantitative_evaluation/evaluate_activitynet_qa.py), literal by literal, as the protocol's fixed text.
OFFICIAL_SYSTEM = (
    "You are an intelligent chatbot designed for evaluating the correctness of generative outputs for question-answer pairs. "  # noqa: E501
    "Your task is to compare the predicted answer with the correct answer and determine if they match meaningfully. Here's how you can accomplish the task:"  # noqa: E501
    "------"
    "##INSTRUCTIONS: "
    "- Focus on the meaningful match between the predicted answer and the correct answer.\n"
    "- Consider synonyms or paraphrases as valid matches.\n"
    "- Evaluate the correctness of the prediction compared to the answer."
)


def official_user(question, answer, pred) -> str:
    return (
        "Please evaluate the following video-based question-answer pair:\n\n"
        f"Question: {question}\n"
        f"Correct Answer: {answer}\n"
        f"Predicted Answer: {pred}\n\n"
        "Provide your evaluation only as a yes/no and score where the score is an integer value between 0 and 5, with 5 indicating the highest meaningful match. "  # noqa: E501
        "Please generate the response in the form of a Python dictionary string with keys 'pred' and 'score', where value of 'pred' is  a string of 'yes' or 'no' and value of 'score' is in INTEGER, not STRING."  # noqa: E501
        "DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only provide the Python dictionary string. "
        "For example, your response should look like this: {'pred': 'yes', 'score': 4.8}."
    )


def official_aggregate(combined_contents: dict) -> tuple[int, int, float, float]:
    """The aggregation of eval_video_qa.py over its combined results.json, transcribed step for step."""
    score_sum = 0
    count = 0
    yes_count = 0
    no_count = 0
    for _key, result in combined_contents.items():
        try:
            count += 1
            score_match = result[0]["score"]
            score = int(score_match)
            score_sum += score
            pred = result[0]["pred"]
            if "yes" in pred.lower():
                yes_count += 1
            elif "no" in pred.lower():
                no_count += 1
        except Exception:
            pass
    average_score = score_sum / count
    accuracy = yes_count / (yes_count + no_count)
    return yes_count, no_count, accuracy, average_score


def official_prediction_set(merge_jsonl: Path) -> dict:
    """How eval_video_qa.py reads merge.jsonl (it uses eval(); literal_eval reads these lines alike)."""
    rows = [ast.literal_eval(line.strip()) for line in merge_jsonl.read_text().splitlines()]
    return {r["id"]: {"q": r["question"], "a": r["answer"], "pred": r["pred"]} for r in rows}


def test_judge_prompt_is_byte_identical_to_the_official_one():
    assert SYSTEM_PROMPT == OFFICIAL_SYSTEM
    for q, a, p in [("what is {x}?", "a 'cat'", 'it is "{pred}"\nsecond line'), ("", "", "")]:
        assert USER_PROMPT.format(question=q, answer=a, pred=p) == official_user(q, a, p)


def test_the_request_carries_the_official_messages():
    server = FakeJudge({})
    try:
        GPTJudge(model="m", base_url=server.url, retries=0).judge("what is {it}?", "a dog", "dog")
    finally:
        server.close()
    (body,) = server.bodies
    assert body["messages"] == [
        {"role": "system", "content": OFFICIAL_SYSTEM},
        {"role": "user", "content": official_user("what is {it}?", "a dog", "dog")},
    ]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("{'pred': 'yes', 'score': 4.8}", ("yes", 4.0)),  # int(4.8) == 4
        ("{'pred': 'Yes', 'score': '3'}", ("yes", 3.0)),  # int('3') reads a string too
        ("{'pred': 'not sure', 'score': 2}", ("no", 2.0)),  # contains "no"
        ("{'pred': 'yes, no', 'score': 2}", ("yes", 2.0)),  # "yes" is looked for first
        ("{'pred': 'maybe', 'score': 3}", (None, 3.0)),  # neither: score kept, no verdict
        ("{'pred': 'yes', 'score': '4.8'}", (None, None)),  # int('4.8') fails: the verdict is not read
        ("{'pred': 'yes', 'score': 9}", ("yes", 9.0)),  # no range check
        ("{'score': 1}", (None, 1.0)),
        ("['yes', 4]", (None, None)),
        ("  {'pred': 'no', 'score': 0}\n", ("no", 0.0)),  # literal_eval strips surrounding blanks
    ],
)
def test_official_scoring(reply, expected):
    assert verdict(reply, "official") == expected == official_verdict(parse_official(reply))


@pytest.mark.parametrize("reply", ["Sure! {'pred': 'yes', 'score': 4}", "```\n{'pred': 'yes', 'score': 4}\n```",
                                   "pred: yes, score: 4", "{'pred': 'yes', 'score': 4", "{'pred': {1, 2}}"])
def test_official_scoring_asks_again_for_what_literal_eval_cannot_read(reply):
    with pytest.raises(ValueError, match="not a Python literal"):
        verdict(reply, "official")


# What the scripted judge answers, by predicted answer; under official scoring -> (verdict, score).
SCRIPT = {
    "p-exact": ("{'pred': 'yes', 'score': 5}", ("yes", 5)),
    "p-frac": ("{'pred': 'yes', 'score': 4.8}", ("yes", 4)),
    "p-notsure": ("{'pred': 'not sure', 'score': 2}", ("no", 2)),
    "p-strscore": ("{'pred': 'Yes', 'score': '3'}", ("yes", 3)),
    "p-badscore": ("{'pred': 'yes', 'score': '4.8'}", (None, 0)),
    "p-maybe": ("{'pred': 'maybe', 'score': 3}", (None, 3)),
    "p-chatty": ("Sure: {'pred': 'yes', 'score': 4}", None),  # never readable: a judge failure
    "p-no": ("{'pred': 'no', 'score': 0}", ("no", 0)),
}


def _run(tmp_path: Path, scoring: str):
    """Items (one missing video, one prediction error, the rest predicted as SCRIPT's keys), judged by the
    scripted server; returns audit rows, aggregate and the official files."""
    clip = tmp_path / "v.mp4"
    clip.write_bytes(b"x")
    preds = list(SCRIPT)
    items = [QAItem(f"v_{i}", f"question {i}?", f"answer {i}", f"vid{i}", clip) for i in range(len(preds))]
    items += [QAItem("v_missing", "q?", "a", "gone", None), QAItem("v_err", "q?", "a", "bad", clip)]
    predictions = {it.question_id: {"answer": p} for it, p in zip(items, preds, strict=False)}
    predictions["v_err"] = {"error": "VideoError: not a video"}
    server = FakeJudge({p: [reply] for p, (reply, _) in SCRIPT.items()})
    try:
        judge = GPTJudge(model="m", base_url=server.url, retries=1, backoff_s=0.01, scoring=scoring)
        reqs = [JudgeRequest(it.question_id, it.question, it.answer, predictions[it.question_id]["answer"])
                for it in items[: len(preds)]]
        judgments = judge_all(judge, reqs, workers=2, progress=False)
    finally:
        server.close()
    audit = audit_rows(items, predictions, judgments)
    return audit, aggregate(judgments.values()), write_official(tmp_path / "official", audit)


def test_official_files_give_the_official_numbers(tmp_path):
    audit, ours, (merge, results) = _run(tmp_path, "official")
    expected = {p: v for p, (_, v) in SCRIPT.items() if v is not None}
    # Ours, against the hand-worked table above.
    assert (ours["judged"], ours["judge_failed"], ours["yes"], ours["no"], ours["neither"]) == (7, 1, 3, 2, 2)
    assert ours["accuracy"] == pytest.approx(3 / 5)
    assert ours["score"] == pytest.approx(sum(s for _, s in expected.values()) / 7)
    # The official aggregation on the exported results.json gives the same numbers.
    combined = json.loads(results.read_text())
    yes, no, acc, avg = official_aggregate(combined)
    assert (yes, no) == (ours["yes"], ours["no"])
    assert acc == pytest.approx(ours["accuracy"]) and avg == pytest.approx(ours["score"])
    # merge.jsonl is what the official judge script reads; results.json pairs each reply with its qa_set.
    lines = merge.read_text().splitlines()
    assert list(json.loads(lines[0])) == ["id", "question", "answer", "pred"] and len(lines) == 8
    prediction_set = official_prediction_set(merge)
    assert sorted(combined) == sorted(k for k, qa in prediction_set.items() if qa["pred"] != "p-chatty")
    for key, (reply, qa_set) in combined.items():
        assert qa_set == prediction_set[key]
        assert reply == ast.literal_eval(SCRIPT[qa_set["pred"]][0])


def test_audit_rows_record_every_question(tmp_path):
    audit, _, _ = _run(tmp_path, "official")
    by_id = {r["id"]: r for r in audit}
    assert [r["id"] for r in audit] == [f"v_{i}" for i in range(8)] + ["v_missing", "v_err"]
    assert by_id["v_1"] == {
        "id": "v_1", "video_name": "vid1", "question": "question 1?", "answer": "answer 1", "pred": "p-frac",
        "verdict": "yes", "score": 4.0, "judge_reply": "{'pred': 'yes', 'score': 4.8}",
        "judge_model": "judge-served", "scoring": "official", "status": "judged", "error": None,
    }
    assert by_id["v_6"]["status"] == "judge_failed" and "not a Python literal" in by_id["v_6"]["error"]
    assert (by_id["v_missing"]["status"], by_id["v_missing"]["pred"]) == ("missing_video", None)
    assert (by_id["v_err"]["status"], by_id["v_err"]["error"]) == ("prediction_error", "VideoError: not a video")
    path = write_audit(tmp_path / "audit.jsonl", audit)
    assert [json.loads(x) for x in path.read_text().splitlines()] == audit


def test_strict_scoring_reads_more_replies_and_keeps_fractions(tmp_path):
    _, ours, (_, results) = _run(tmp_path, "strict")
    # strict reads the chatty and the string-4.8 replies, refuses "not sure" and "maybe".
    assert (ours["judged"], ours["judge_failed"], ours["yes"], ours["no"]) == (6, 2, 5, 1)
    assert ours["score"] == pytest.approx((5 + 4.8 + 3 + 4.8 + 4 + 0) / 6)
    yes, no, acc, avg = official_aggregate(json.loads(results.read_text()))
    assert (yes, no, acc) == (5, 1, ours["accuracy"])
    assert avg == pytest.approx((5 + 4 + 3 + 4 + 4 + 0) / 6)  # the official script floors each score


def _layout(root: Path, folder: str, videos: str, n: int, answered: bool = True) -> Path:
    ds = root / folder
    (ds / videos).mkdir(parents=True)
    (ds / "test_q.json").write_text(json.dumps(
        [{"video_name": f"vid{i}", "question": f"q{i}?", "question_id": f"v_{i}"} for i in range(n)]))
    (ds / "test_a.json").write_text(json.dumps(
        [{"answer": f"a{i}", "question_id": f"v_{i}" if answered else f"other_{i}"} for i in range(n)]))
    return ds


def test_video_chatgpt_tgif_folder_and_unusable_runs(tmp_path):
    ds = _layout(tmp_path / "tgif", "TGIF_Zero_Shot_QA", "videos_mp4", 3)
    for i in range(2):
        (ds / "videos_mp4" / f"vid{i}.mp4").write_bytes(b"x")
    loaded = load_dataset("tgif", ds)
    assert [it.video.relative_to(ds).as_posix() for it in loaded.present] == ["videos_mp4/vid0.mp4",
                                                                              "videos_mp4/vid1.mp4"]
    check_usable(loaded)
    assert "1 of 3 videos (33.3%) are missing" in missing_warning(loaded)

    none = load_dataset("msvd", _layout(tmp_path / "a", "MSVD_Zero_Shot_QA", "videos", 3))
    with pytest.raises(InputError, match=r"none of the 3 videos was found \(looked in videos/ for VIDEO_NAME"):
        check_usable(none)
    unanswered = load_dataset("msvd", _layout(tmp_path / "b", "MSVD_Zero_Shot_QA", "videos", 3, answered=False))
    with pytest.raises(InputError, match="none of the 3 questions in test_q.json has an entry in test_a.json"):
        check_usable(unanswered)


@pytest.mark.parametrize(("missing", "warned"), [(0, False), (1, False), (2, True)])
def test_missing_videos_warn_above_5_percent(missing, warned):
    spec = DatasetSpec("msvd", "MSVD_Zero_Shot_QA", ("videos",))
    items = [QAItem(str(i), "q", "a", "v", None if i < missing else Path("v.mp4")) for i in range(20)]
    ds = QADataset(spec=spec, root=Path("."), items=items, n_questions=20)
    assert (missing_warning(ds) is not None) == warned


def test_plot_keeps_judges_apart_and_labels_published_points():
    run = {"dataset": "msvd", "method": "fastv", "flops_ratio": 0.5, "accuracy": 0.6}
    results = [{**run, "judge": "exact"}, {**run, "judge": "gpt"},
               {**run, "judge": "exact", "flops_ratio": 0.3, "accuracy": 0.5},
               {**run, "judge": "gpt", "flops_ratio": 0.3, "accuracy": 0.5}]
    (ax,) = accuracy_figure(results).axes
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    exact, gpt = lines["this run: fastv (exact judge)"], lines["this run: fastv (gpt judge)"]
    assert list(exact.get_xdata()) == list(gpt.get_xdata()) == [30.0, 50.0]  # both series, same points
    # ... drawn so that both show: a large hollow marker around a small filled one, same colour (method).
    assert exact.get_markerfacecolor() == "none" and gpt.get_markerfacecolor() != "none"
    assert exact.get_markersize() > 2 * gpt.get_markersize() and exact.get_color() == gpt.get_color()
    assert exact.get_linestyle() != gpt.get_linestyle()
    labels = [t.get_text() for t in ax.texts]
    refs = [p for p in REFERENCES if p.dataset == "msvd"]
    assert len(labels) == len(refs)
    assert {"FastV all", "FastV K=2 1024", "FastV K=5 1024", "VP: all", "VP: FastV K=2 455",
            "VP: VisPruner 114"} <= set(labels)


def llava_v1_prompt(turns: list[tuple[str, str | None]]) -> str:
    """Video-LLaVA's conv_llava_v1.get_prompt() (SeparatorStyle.TWO), transcribed: system, then each message
    as 'ROLE: message' followed by sep (after USER) or sep2 (after ASSISTANT), the open turn as 'ROLE:'."""
    system = ("A chat between a curious human and an artificial intelligence assistant. "
              "The assistant gives helpful, detailed, and polite answers to the human's questions.")
    seps = [" ", "</s>"]
    messages = []
    for i, (q, a) in enumerate(turns):
        messages += [("USER", ("<image>" * 8 + "\n" if i == 0 else "") + q), ("ASSISTANT", a)]
    ret = system + seps[0]
    for i, (role, message) in enumerate(messages):
        ret += role + ": " + message + seps[i % 2] if message else role + ":"
    return ret


def test_official_prompt_is_the_llava_v1_conversation():
    from videoqa.models import VideoLlava

    def ours(question, history=None, template="official"):  # the 8 per-frame image slots are one <video> here
        return VideoLlava().prompt(question, history, template).replace("<video>", "<image>" * 8)

    assert ours("what is {x}?") == llava_v1_prompt([("what is {x}?", None)])
    assert ours("and then?", [("what is it?", "a cat.")]) == llava_v1_prompt([("what is it?", "a cat."),
                                                                              ("and then?", None)])
    assert VideoLlava().prompt("q?", template="plain") == "USER: <video>\nq? ASSISTANT:"
    with pytest.raises(InputError, match="unknown prompt template 'vicuna'"):
        VideoLlava().prompt("q?", template="vicuna")


def test_eval_defaults_to_the_models_own_conversation_and_official_length(tiny_model_dir, tmp_path):
    """The prompt defaults to the conversation the model was trained on: official (llava_v1) for a checkpoint
    without a videoqa.json, as the real Video-LLaVA; the demo models declare plain."""
    from videoqa.cli import build_parser
    from videoqa.cli.eval import answer_length
    from videoqa.cli.options import model_spec_from_args

    parse = build_parser().parse_args
    ev = parse(["eval", "--dataset", "msvd", "--root", "x"])
    assert (ev.prompt, answer_length(ev), ev.scoring) == (None, 1024, "official")
    # the multiple-choice sets take lmms-eval's lengths; a given --max-new-tokens wins everywhere
    assert [answer_length(parse(["eval", "--dataset", d, "--root", "x"])) for d in ("videomme", "longvideobench")] \
        == [16, 32]
    assert answer_length(parse(["eval", "--dataset", "videomme", "--root", "x", "--max-new-tokens", "1024"])) == 1024
    bare = tmp_path / "bare"  # a checkpoint without videoqa.json, as the real Video-LLaVA
    shutil.copytree(tiny_model_dir, bare)
    (bare / "videoqa.json").unlink()
    assert (parse(["ask", "v.mp4", "q"]).prompt, parse(["ask", "v.mp4", "q"]).max_new_tokens) == (None, 64)
    for cmd in (["eval", "--dataset", "msvd", "--root", "x"], ["ask", "v.mp4", "q"]):
        assert model_spec_from_args(parse([*cmd, "--model", str(bare)]))["prompt"] == "official"
        assert model_spec_from_args(parse([*cmd, "--model", str(tiny_model_dir)]))["prompt"] == "plain"
        assert model_spec_from_args(parse([*cmd, "--model", "demo"]))["prompt"] == "plain"
        assert model_spec_from_args(parse([*cmd, "--model", "demo", "--prompt", "official"]))["prompt"] == "official"
    assert parse(["eval", "--dataset", "msvd", "--root", "x", "--prompt", "plain", "--scoring", "strict"]).prompt == \
        "plain"


@pytest.mark.parametrize("answered", [True, False])
def test_eval_with_nothing_to_evaluate_exits_2_with_one_line(tmp_path, capsys, answered):
    from videoqa.cli import main as cli_main

    ds = _layout(tmp_path, "MSVD_Zero_Shot_QA", "videos", 3, answered=answered)  # no video files at all
    assert cli_main(["eval", "--dataset", "msvd", "--root", str(ds), "--out", str(tmp_path / "run"),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("videoqa: error: ")
    assert ("none of the 3 videos was found" if answered else "has an entry in test_a.json") in err
