"""Evaluation on a generated dataset in the exact GPT_Zero_Shot_QA layout; reports and plots."""

from __future__ import annotations

import json
import os
import random
import struct
import time
from pathlib import Path

import pytest
from helpers.clipgen import write_clip, write_text

from videoqa.batch.local import local_records
from videoqa.cli import main as cli_main
from videoqa.errors import InputError, VideoError
from videoqa.eval.datasets import load_dataset, select
from videoqa.eval.judges import ExactJudge
from videoqa.eval.report import REFERENCES, load_results, markdown_table, plot_accuracy_vs_flops
from videoqa.eval.run import run_eval

# (question_id, video_name, question, answer). vid3 is never written (missing); vid4 is corrupt.
QA = [
    (101, "vid0", "what is the man doing?", "dancing"),
    (102, "vid0", "how many people are there?", "two"),
    (103, "vid1", "what colour is the car?", "red"),
    (104, "vid1", "what is on the table?", "a cup"),
    (105, "vid2", "who is talking?", "woman"),
    (106, "vid2", "where is the dog?", "park"),
    (107, "vid3", "what is falling?", "snow"),
    (108, "vid4", "what is flying?", "bird"),
]
UNANSWERED = (109, "vid0", "is it raining?")  # in test_q.json, not in test_a.json


def make_dataset(root: Path, name: str = "msvd", folder: str = "MSVD_Zero_Shot_QA", videos: str = "videos",
                 fmt: str = "avi-mpeg4", ext: str = ".avi", seed: int = 0) -> Path:
    """Write the Video-LLaVA layout: test_q.json, a shuffled test_a.json, clips; returns the dataset folder."""
    ds = root / folder
    (ds / videos).mkdir(parents=True)
    questions = [{"video_name": v, "question": q, "question_id": qid} for qid, v, q, _ in QA]
    questions.append({"video_name": UNANSWERED[1], "question": UNANSWERED[2], "question_id": UNANSWERED[0]})
    answers = [{"answer": a, "question_id": qid} for qid, _, _, a in QA]
    answers.append({"answer": "orphan", "question_id": 999})  # an answer without a question: ignored
    random.Random(seed).shuffle(answers)  # position never means anything
    assert [a["question_id"] for a in answers] != [q["question_id"] for q in questions[: len(answers)]]
    (ds / "test_q.json").write_text(json.dumps(questions))
    (ds / "test_a.json").write_text(json.dumps(answers))
    for i in range(3):
        write_clip(ds / videos / f"vid{i}{ext}", n_frames=10 + 4 * i, size=(64, 48), fmt=fmt)
    write_text(ds / videos / f"vid4{ext}")
    return ds


def test_questions_and_answers_are_joined_by_question_id(tmp_path):
    for seed in (0, 1):
        ds = load_dataset("msvd", make_dataset(tmp_path / str(seed), seed=seed).parent)  # the parent works too
        assert {it.question_id: it.answer for it in ds.items} == {str(qid): a for qid, _, _, a in QA}
        assert {it.question_id: it.question for it in ds.items} == {str(qid): q for qid, _, q, _ in QA}
        assert [it.question_id for it in ds.items] == [str(qid) for qid, *_ in QA]  # question-file order
    assert ds.n_questions == 9 and ds.unanswered == ["109"]
    assert [(it.question_id, it.video_name) for it in ds.missing] == [("107", "vid3")]
    assert {it.video.name for it in ds.present} == {"vid0.avi", "vid1.avi", "vid2.avi", "vid4.avi"}


def test_layouts_of_msrvtt_and_tgif_with_raw_gif(tmp_path):
    ds = load_dataset("msrvtt", make_dataset(tmp_path / "a", folder="MSRVTT_Zero_Shot_QA", videos="videos/all",
                                             fmt="mp4-h264", ext=".mp4"))
    assert len(ds.present) == 7 and ds.present[0].video.parent.name == "all"
    gt = make_dataset(tmp_path / "b", folder="TGIF_Zero_Shot_QA", videos="mp4", fmt="gif", ext=".gif")
    ds = load_dataset("tgif", gt)
    assert len(ds.present) == 7 and all(it.video.suffix == ".gif" for it in ds.present)
    # An mp4 next to the gif wins (the layout's converted clips), as in Video-LLaVA's lookup order.
    write_clip(gt / "mp4" / "vid0.mp4", n_frames=5)
    assert load_dataset("tgif", gt).items[0].video.name == "vid0.mp4"
    with pytest.raises(InputError, match="is the tgif folder"):
        load_dataset("msvd", gt)
    with pytest.raises(InputError, match="no test_q.json"):
        load_dataset("msvd", tmp_path)


def test_bad_files_are_reported(tmp_path):
    ds = make_dataset(tmp_path)
    q = json.loads((ds / "test_q.json").read_text())
    (ds / "test_q.json").write_text(json.dumps(q + [q[0]]))
    with pytest.raises(InputError, match="question_id 101 appears twice"):
        load_dataset("msvd", ds)
    (ds / "test_a.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_dataset("msvd", ds)


def test_limit_and_seeded_subset():
    items = list(range(100))
    assert select(items, 5, None) == [0, 1, 2, 3, 4]
    a, b = select(items, 10, 3), select(items, 10, 3)
    assert a == b == sorted(a) and len(set(a)) == 10 and a != select(items, 10, 4) and a != items[:10]
    assert select(items, 200, 1) == items


class Oracle:
    """Stand-in model: right (as a sentence) for the questions in `right`, wrong otherwise; counts calls."""

    def __init__(self, right: set[int]):
        self.answers = {q: (a if qid in right else "no idea") for qid, _, q, a in QA}
        self.calls = 0

    def __call__(self, video: str, question: str) -> dict:
        self.calls += 1
        if "vid4" in video:
            raise VideoError(video, "not a video file (it contains text)")
        return {"answer": f"I think it is {self.answers[question]}.", "kept": {"n_kept": 10, "n_visual": 40},
                "flops": {"ratio": 0.5}, "stats": {"t_total": 0.25}}


def test_run_eval_counts_everything_and_resumes(tmp_path):
    ds = load_dataset("msvd", make_dataset(tmp_path))
    oracle = Oracle(right={101, 102, 105})
    config = {"dataset": "msvd", "model": "stand-in", "prune": {"method": "fastv", "k": 2, "r": 0.5}}
    out = tmp_path / "run"
    res = run_eval(ds, out, lambda todo: local_records(todo, oracle), ExactJudge(), config, progress=False)
    assert oracle.calls == 7  # the missing video is never asked for
    # 5 predicted (vid4 is an error, vid3 is missing); 3 of them right.
    assert (res["questions"], res["missing_videos"], res["prediction_errors"], res["judged"]) == (8, 1, 1, 6)
    assert (res["yes"], res["no"], res["judge_failed"], res["unanswered_in_file"]) == (3, 3, 0, 1)
    assert res["accuracy"] == pytest.approx(3 / 6) and res["score"] == pytest.approx(5 * 3 / 6)
    assert (res["kept_tokens"], res["flops_ratio"], res["latency_s"]) == (10, 0.5, 0.25)
    assert (res["method"], res["k"], res["r"], res["judge_model"]) == ("fastv", 2, 0.5, ["exact-normalized-v1"])
    assert (out / "missing_videos.txt").read_text() == "107\tvid3\n"
    assert json.loads((out / "results.json").read_text()) == res

    # Resume: nothing is predicted again; errors are retried only when asked.
    again = run_eval(ds, out, lambda todo: local_records(todo, oracle), ExactJudge(), config, progress=False)
    assert oracle.calls == 7 and again["judged"] == 6
    run_eval(ds, out, lambda todo: local_records(todo, oracle), ExactJudge(), config, retry_errors=True,
             progress=False)
    assert oracle.calls == 8
    with pytest.raises(InputError, match="other options"):
        run_eval(ds, out, lambda todo: local_records(todo, oracle), ExactJudge(),
                 {**config, "prune": {"method": "fastv", "k": 2, "r": 0.75}}, progress=False)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_report_table_plot_and_references(tmp_path):
    ours = [
        {"dataset": "msvd", "method": "fastv", "k": 2, "r": 0.5, "kept_tokens": 1028.0, "visual_tokens": 2056.0,
         "flops_ratio": 0.523, "accuracy": 0.7012, "score": 3.91, "latency_s": 0.4321, "judged": 100,
         "missing_videos": 2, "judge_failed": 1, "judge": "gpt", "judge_model": ["gpt-3.5-turbo-0125"]},
        {"dataset": "msvd", "method": "vispruner", "k": None, "r": "auto", "r_mean": 0.78, "kept_tokens": 455.0,
         "visual_tokens": 2056.0, "flops_ratio": 0.22, "accuracy": 0.69, "score": 3.9, "latency_s": 0.3,
         "judged": 100, "missing_videos": 2, "judge_failed": 0, "judge": "exact", "judge_model": ["exact"]},
    ]
    runs = []
    for i, r in enumerate(ours):
        (tmp_path / f"run{i}").mkdir()
        (tmp_path / f"run{i}" / "results.json").write_text(json.dumps(r))
        runs.append(tmp_path / f"run{i}")
    table = markdown_table(load_results(runs))
    assert "| msvd | fastv | 2 | 0.50 | 1028 / 2056 | 52.3 | 70.1 | 3.91 | 0.432 | 100 (2 missing, 1 failed) |" in table
    assert "| msvd | vispruner | – | auto (0.78) | 455 / 2056 | 22.0 | 69.0 |" in table
    assert "| msvd | VisPruner paper: VisPruner | vispruner | – | 455 |" in table and "tgif" not in table
    # FastV's formula with the published setup reproduces the published FLOPs ratios.
    fastv = {p.layer: p.flops_pct for p in REFERENCES if p.series.startswith("FastV paper") and p.layer}
    assert fastv[2] == pytest.approx(52.3, abs=0.1) and fastv[5] == pytest.approx(57.1, abs=0.1)
    w, h = _png_size(plot_accuracy_vs_flops(load_results(runs), tmp_path / "plot.png"))
    assert (w, h) == (550, 450)
    with pytest.raises(InputError, match="no results.json"):
        load_results([tmp_path])


@pytest.mark.slow
def test_eval_and_report_commands_with_a_tiny_model(tmp_path, capsys):
    from videoqa.models.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    root = make_dataset(tmp_path / "data").parent
    common = ["eval", "--dataset", "msvd", "--root", str(root), "--model", str(model), "--max-new-tokens", "4",
              "--no-progress"]
    assert cli_main([*common, "--prune", "fastv", "--k", "2", "--r", "0.5", "--out", str(tmp_path / "fastv")]) == 0
    assert cli_main([*common, "--prune", "vispruner", "--r", "0.75", "--limit", "4", "--subset-seed", "1",
                     "--out", str(tmp_path / "vis")]) == 0
    out = capsys.readouterr().out
    assert "missing videos 1, prediction errors 1, judged 6" in out and "missing: 107:vid3" in out
    assert "warning: 1 of 8 videos (12.5%) are missing" in out  # more than 5 %
    fastv = json.loads((tmp_path / "fastv" / "results.json").read_text())
    preds = [json.loads(x) for x in (tmp_path / "fastv" / "predictions.jsonl").read_text().splitlines()]
    assert sorted(p["key"] for p in preds) == ["101", "102", "103", "104", "105", "106", "108"]
    # eval's defaults: the model's own conversation (tiny models declare plain, as the demo models; one without
    # a videoqa.json gets the official one: test_eval_protocol), recorded in every record and the summary, and
    # the official scoring.
    assert {p.get("prompt") for p in preds if not p["error"]} == {"plain"}
    assert (fastv["prompt"], fastv["max_new_tokens"], fastv["scoring"]) == ("plain", 4, "official")
    audit = [json.loads(x) for x in (tmp_path / "fastv" / "audit.jsonl").read_text().splitlines()]
    assert [a["status"] for a in audit].count("judged") == 6 and len(audit) == 8
    official = json.loads((tmp_path / "fastv" / "official" / "results.json").read_text())
    assert len(official) == 6 and len((tmp_path / "fastv" / "official" / "merge.jsonl").read_text().splitlines()) == 6
    assert (fastv["kept_tokens"], fastv["visual_tokens"]) == (260, 520)
    assert fastv["judged"] == 6 and 0 < fastv["flops_ratio"] < 1
    vis = json.loads((tmp_path / "vis" / "results.json").read_text())
    assert vis["questions"] == 4 and vis["kept_tokens"] == 130 and vis["flops_ratio"] < fastv["flops_ratio"]

    md, png = tmp_path / "report.md", tmp_path / "report.png"
    assert cli_main(["report", str(tmp_path / "fastv"), str(tmp_path / "vis"), "--out", str(md),
                     "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert md.read_text().strip() in printed and "| msvd | fastv | 2 | 0.50 | 260 / 520 |" in printed
    assert _png_size(png) == (550, 450)


@pytest.mark.parametrize("file,index,edit,msg", [
    ("test_q.json", 2, lambda d: d.pop("video_name"), "entry 2 (question_id 103) has no 'video_name'"),
    ("test_q.json", 0, lambda d: d.pop("question"), "entry 0 (question_id 101) has no 'question'"),
    ("test_q.json", 4, lambda d: d.update(question=None), "entry 4 (question_id 105): 'question' is null"),
    ("test_q.json", 1, lambda d: d.update(video_name=["a"]), "entry 1 (question_id 102): 'video_name' is a list"),
    ("test_a.json", 3, lambda d: d.pop("answer"), "has no 'answer'"),
    ("test_a.json", 0, lambda d: d.update(answer=None), "'answer' is null"),
    ("test_a.json", 5, lambda d: d.pop("question_id"), "entry 5 has no 'question_id'"),
    ("test_q.json", 6, lambda d: d.update(question_id=None), "entry 6: 'question_id' is null"),
])
def test_malformed_entries_name_the_file_the_entry_and_the_field(tmp_path, capsys, file, index, edit, msg):
    ds = make_dataset(tmp_path)
    entries = json.loads((ds / file).read_text())
    edit(entries[index])
    (ds / file).write_text(json.dumps(entries))
    with pytest.raises(InputError) as e:
        load_dataset("msvd", ds)
    assert str(e.value).startswith(f"{ds / file}: ") and msg in str(e.value), str(e.value)
    # The command: one line, exit 2, before any model is looked at.
    code = cli_main(["eval", "--dataset", "msvd", "--root", str(ds), "--model", "/nonexistent", "--no-progress",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and msg in err, err


def _dead_port() -> int:
    import socket

    with socket.socket() as s:  # a port nobody listens on (bound, never listening, then freed)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_eval_with_nothing_judged_fails_in_one_line(tmp_path, capsys):
    from videoqa.models.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    root = make_dataset(tmp_path / "data").parent
    out = tmp_path / "run"
    capsys.readouterr()  # making the model may show a progress bar
    code = cli_main(["eval", "--dataset", "msvd", "--root", str(root), "--model", str(model), "--max-new-tokens",
                     "2", "--no-progress", "--out", str(out), "--judge", "gpt", "--judge-retries", "0",
                     "--judge-base-url", f"http://127.0.0.1:{_dead_port()}/v1"])
    got = capsys.readouterr()
    assert code == 2 and "judged 0, judge failures 6" in got.out, got
    err = got.err.strip().splitlines()
    assert len(err) == 1 and "none of the 6 predicted answers was judged" in err[0] and "cannot reach" in err[0], err
    assert json.loads((out / "results.json").read_text())["judged"] == 0  # what ran is kept for a re-run


class FlakyJudge(ExactJudge):
    """The exact judge, failing on the answers listed in `fail`."""

    def __init__(self, fail: set[str]):
        super().__init__()
        self.fail = fail

    def judge(self, question, answer, pred):
        if answer in self.fail:
            from videoqa.eval.judges import Judgment

            return Judgment(pred=None, score=None, judge_model="flaky", failed=True, error="HTTP 500 boom")
        return super().judge(question, answer, pred)


def test_unjudged_questions_are_counted_and_past_the_limit_fail(tmp_path):
    from videoqa.errors import VideoQAError
    from videoqa.eval.run import JUDGE_FAILURE_LIMIT, check_judged, format_result

    ds = load_dataset("msvd", make_dataset(tmp_path))
    config = {"model": "stand-in"}
    oracle = Oracle(right={101})
    # One judge failure of 6 requests (17 % > the 5 % limit): counted, and a failure.
    res = run_eval(ds, tmp_path / "a", lambda todo: local_records(todo, oracle), FlakyJudge({"two"}), config,
                   progress=False)
    assert (res["judged"], res["judge_failed"], res["prediction_errors"], res["missing_videos"]) == (5, 1, 1, 1)
    assert "not judged: 3 of 8 questions (1 missing video, 1 prediction error, 1 judge failure)" in format_result(res)
    assert 1 / 6 > JUDGE_FAILURE_LIMIT
    with pytest.raises(VideoQAError, match=r"1 of the 6 predicted answers \(16.7%\) could not be judged.*HTTP 500"):
        check_judged(res)
    # No judge failure: a missing video and a broken clip are reported, not a failure.
    res = run_eval(ds, tmp_path / "b", lambda todo: local_records(todo, oracle), ExactJudge(), config, progress=False)
    check_judged(res)
    # Every prediction failed: nothing could be judged, which is a failure too.
    def broken(video, question):
        raise VideoError(video, "cannot decode")

    res = run_eval(ds, tmp_path / "c", lambda todo: local_records(todo, broken), ExactJudge(), config, progress=False)
    with pytest.raises(VideoQAError, match=r"none of the 7 questions with a video was judged: 7 prediction errors "
                                           r"\(first: VideoError: .*cannot decode\)"):
        check_judged(res)


class GatedJudge(ExactJudge):
    """The exact judge, holding each judgment until `go` is set; counts the requests it gets."""

    def __init__(self):
        super().__init__()
        import threading

        self.go, self.started, self.calls, self._lock = threading.Event(), threading.Event(), 0, threading.Lock()

    def judge(self, question, answer, pred):
        with self._lock:
            self.calls += 1
        self.started.set()
        assert self.go.wait(60), "never released"
        return super().judge(question, answer, pred)


def test_one_writer_per_run_folder_judging_included(tmp_path):
    import threading

    from videoqa.errors import BusyError

    ds = load_dataset("msvd", make_dataset(tmp_path))
    config, out = {"model": "stand-in"}, tmp_path / "run"
    oracle, judge = Oracle(right={101, 102}), GatedJudge()

    def evaluate(results: dict, name: str, **kw) -> None:
        try:
            results[name] = run_eval(ds, out, lambda todo: local_records(todo, oracle), judge, config,
                                     progress=False, judge_workers=2, **kw)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            results[name] = e

    results: dict = {}
    first = threading.Thread(target=evaluate, args=(results, "first"))
    first.start()
    try:
        assert judge.started.wait(60)  # the first run has predicted and is judging now
        evaluate(results, "second")  # a second eval on the same folder stops at once, naming the first
        assert isinstance(results["second"], BusyError), results["second"]
        assert f"{out} is being written by another run (pid {os.getpid()}" in str(results["second"])
        waiting = threading.Thread(target=evaluate, args=(results, "waiting"), kwargs={"wait": True})
        waiting.start()
        time.sleep(0.5)
        assert "waiting" not in results  # it waits for the whole run, judging included
    finally:
        judge.go.set()
        first.join(60)
    waiting.join(60)
    assert results["first"]["judged"] == 6 and results["waiting"]["judged"] == 6, results
    assert judge.calls == 6 and oracle.calls == 7  # each question predicted once and judged (paid) once
    assert len((out / "judgments.jsonl").read_text().splitlines()) == 6
