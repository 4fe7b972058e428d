"""Multiple-choice benchmarks: each published layout (fields as lmms-eval reads them) is read, asked with the
benchmark's prompt, scored by letter overall and per category beside blind baselines, and exported."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from helpers.clipgen import write_clip

from videoqa.batch.local import local_records
from videoqa.cli import main as cli_main
from videoqa.errors import InputError
from videoqa.eval.choice import extract_choice
from videoqa.eval.mc_run import load_mc_dataset, run_mc_eval

OPTS = ["red circle", "blue square", "green triangle", "yellow star"]


@pytest.mark.parametrize("reply,letter", [
    ("A", "A"), ("(B)", "B"), ("C. green triangle", "C"), ("D)", "D"), ("The best answer is: B", "B"),
    ("The best answer is (A) red circle", "A"), ("The answer is C.", "C"), ("Best option: (D", "D"),
    ("blue square", "B"), ("Green Triangle.", "C"),  # a bare option text
    ("E", None), ("Apple", None), ("", None), ("I do not know", None),  # no option: E is no option here
    ("the video shows a person walking slowly along the beach while the sun sets behind", None),  # > 10 words
])
def test_extract_choice(reply, letter):
    assert extract_choice(reply, OPTS) == letter


def test_letters_beyond_the_options_do_not_count():
    assert extract_choice("C", ["yes", "no", "maybe"]) == "C" and extract_choice("D", ["yes", "no", "maybe"]) is None


# -- the six layouts, each with 4 questions over 2 clips and a fifth whose clip is missing ------------------------

QUESTIONS = [  # (question, options, index of the right one, category)
    ("What colour is the ball?", ["red", "blue", "green", "white"], 0, "c1"),
    ("Where does it go?", ["left", "right", "up", "down"], 2, "c1"),
    ("How many cars?", ["one", "two", "three", "four"], 2, "c2"),
    ("What shape is it?", ["circle", "square", "star", "ring"], 1, "c2"),
    ("What falls?", ["snow", "rain", "leaves", "ash"], 3, "c2"),
]
CLIPS = ["v0", "v0", "v1", "v1", "gone"]  # "gone" is never written


def _clip(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_clip(path, n_frames=8, size=(64, 48), fmt="mp4-h264")


def make_videomme(root: Path) -> None:
    rows = [{"video_id": f"00{v[-1]}", "duration": "short" if i < 2 else "medium", "domain": "Knowledge",
             "sub_category": "Astronomy", "url": "", "videoID": v, "question_id": f"{v}-{i}", "task_type": cat,
             "question": q, "options": [f"{'ABCD'[k]}. {o}" for k, o in enumerate(opts)], "answer": "ABCD"[a]}
            for i, ((q, opts, a, cat), v) in enumerate(zip(QUESTIONS, CLIPS, strict=True))]
    (root / "videomme").mkdir(parents=True)
    (root / "videomme" / "test.json").write_text(json.dumps(rows))
    for v in ("v0", "v1"):
        _clip(root / "data" / f"{v}.mp4")


def make_mvbench(root: Path) -> None:
    tasks = {"action_antonym": "ssv2_video_mp4", "moving_direction": "clevrer/video_validation"}
    for task, folder in tasks.items():
        rows = [{"video": f"{v}.mp4", "question": q, "candidates": opts, "answer": opts[a]}
                for (q, opts, a, cat), v in zip(QUESTIONS, CLIPS, strict=True) if (cat == "c1") == (task[0] == "a")]
        (root / "json").mkdir(parents=True, exist_ok=True)
        (root / "json" / f"{task}.json").write_text(json.dumps(rows))
        for v in ("v0", "v1"):
            _clip(root / "video" / folder / f"{v}.mp4")


def make_egoschema(root: Path) -> None:
    rows = [{"q_uid": f"{v}-{i}", "google_drive_id": "x", "question": q,
             **{f"option {k}": o for k, o in enumerate([*opts, "none of these"])}}
            for i, ((q, opts, a, cat), v) in enumerate(zip(QUESTIONS, CLIPS, strict=True))]
    rows.append({"q_uid": "v0-unanswered", "google_drive_id": "x", "question": "Why?",
                 **{f"option {k}": str(k) for k in range(5)}})
    root.mkdir(parents=True)
    (root / "questions.json").write_text(json.dumps(rows))
    (root / "subset_answers.json").write_text(json.dumps({f"{v}-{i}": q[2] for i, (q, v) in
                                                          enumerate(zip(QUESTIONS, CLIPS, strict=True))}))
    for i, v in enumerate(CLIPS[:4]):
        _clip(root / "videos" / f"{v}-{i}.mp4")


def make_longvideobench(root: Path) -> None:
    rows = [{"id": f"{v}_{i}", "video_id": v, "video_path": f"{v}.mp4", "question": q, "candidates": opts,
             "correct_choice": a, "duration_group": 15 if i < 2 else 600, "question_category": cat,
             "duration": 8.0} for i, ((q, opts, a, cat), v) in enumerate(zip(QUESTIONS, CLIPS, strict=True))]
    root.mkdir(parents=True)
    (root / "lvb_val.json").write_text(json.dumps(rows))
    for v in ("v0", "v1"):
        _clip(root / "videos" / f"{v}.mp4")


def make_mlvu(root: Path) -> None:
    for stem, cat in (("1_plotQA", "c1"), ("4_count", "c2")):
        rows = [{"video": f"{v}.mp4", "duration": 8, "question": q, "candidates": opts, "answer": opts[a],
                 "question_type": stem[2:]} for (q, opts, a, c), v in zip(QUESTIONS, CLIPS, strict=True) if c == cat]
        (root / "json").mkdir(parents=True, exist_ok=True)
        (root / "json" / f"{stem}.json").write_text(json.dumps(rows))
        for v in ("v0", "v1"):
            _clip(root / "video" / stem / f"{v}.mp4")
    (root / "json" / "9_summary.json").write_text(json.dumps([{"video": "v0.mp4", "question": "Sum up."}]))


def make_nextqa(root: Path) -> None:
    root.mkdir(parents=True)
    with (root / "test.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["video", "frame_count", "width", "height", "question", "answer", "qid", "type",
                    "a0", "a1", "a2", "a3", "a4"])
        for i, ((q, opts, a, cat), v) in enumerate(zip(QUESTIONS, CLIPS, strict=True)):
            w.writerow([f"{v}id", 8, 64, 48, q, a, i, "CW" if cat == "c1" else "TN", *opts, "nothing"])
    (root / "map_vid_vidorID.json").write_text(json.dumps({"v0id": "0000/v0", "v1id": "0001/v1"}))
    for v, folder in (("v0", "0000"), ("v1", "0001")):
        _clip(root / "NExTVideo" / folder / f"{v}.mp4")


def _prompt(ds: str, q: str, opts: list[str]) -> str:
    """The prompt lmms-eval builds for the benchmark (its utils.py doc_to_text with the default kwargs)."""
    dot = [f"{'ABCDE'[k]}. {o}" for k, o in enumerate(opts)]
    paren = [f"({'ABCDE'[k]}) {o}" for k, o in enumerate(opts)]
    return {
        "videomme": "Select the best answer to the following multiple-choice question based on the video. Respond "
                    "with only the letter (A, B, C, or D) of the correct option.\n" + q + "\n" + "\n".join(dot)
                    + "\nThe best answer is:",
        "mvbench": "Question:" + q + "\nOption:\n" + "".join(p + "\n" for p in paren) + "Only give the best option.\n",
        "egoschema": q + "".join("\n" + d for d in dot)
                     + "\nAnswer with the option's letter from the given choices directly.",
        "longvideobench": q + "\n" + "\n".join(dot) + "\nAnswer with the option's letter from the given choices "
                          "directly.\n",
        "mlvu": q + "\n" + "\n".join(paren) + "\nOnly give the best option.\nBest option: (",
        "nextqa": "\n".join([q, *dot]),
    }[ds]


LAYOUTS = {  # dataset -> (builder, category key whose values follow c1/c2, the value for c1 and c2)
    "videomme": (make_videomme, "task_type", {"c1": "c1", "c2": "c2"}),
    "mvbench": (make_mvbench, "task", {"c1": "action_antonym", "c2": "moving_direction"}),
    "egoschema": (make_egoschema, None, None),
    "longvideobench": (make_longvideobench, "question_category", {"c1": "c1", "c2": "c2"}),
    "mlvu": (make_mlvu, "task_type", {"c1": "plotQA", "c2": "count"}),
    "nextqa": (make_nextqa, "group", {"c1": "causal", "c2": "temporal"}),
}


def _options(ds: str, opts: list[str]) -> list[str]:
    return [*opts, "none of these"] if ds == "egoschema" else [*opts, "nothing"] if ds == "nextqa" else opts


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_layout_is_read_as_lmms_eval_reads_it(tmp_path, name):
    build, key, values = LAYOUTS[name]
    build(tmp_path / name)
    ds = load_mc_dataset(name, tmp_path / name)
    by_question = {it.question: it for it in ds.items}
    assert set(by_question) == {q for q, *_ in QUESTIONS}  # EgoSchema's question without an answer is not scored
    for (q, opts, a, cat), clip in zip(QUESTIONS, CLIPS, strict=True):
        it = by_question[q]
        assert it.options == _options(name, opts) and it.answer == "ABCD"[a]
        assert it.prompt == _prompt(name, q, _options(name, opts))
        assert (it.video is None) == (clip == "gone")
        if key:
            assert it.categories[key] == values[cat]
    assert [it.question for it in ds.missing] == ["What falls?"]


class StandIn:
    """Answers in a different form per question: the right letter, a wrong letter, or no option at all."""

    def __init__(self, ds):
        self.reply = {}
        for i, it in enumerate(ds.items):
            right = it.answer
            wrong = "A" if right != "A" else "B"
            self.reply[it.prompt] = [f"({right})", f"{wrong}.", "I cannot tell", f"The best answer is {right}"][i % 4]
        self.calls = 0

    def __call__(self, video: str, question: str) -> dict:
        self.calls += 1
        return {"answer": self.reply[question], "kept": {"n_kept": 5, "n_visual": 10}, "flops": {"ratio": 0.5}}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_scores_per_category_with_blind_baselines_and_resumes(tmp_path, name):
    build, key, _ = LAYOUTS[name]
    build(tmp_path / name)
    ds = load_mc_dataset(name, tmp_path / name)
    model = StandIn(ds)
    out = tmp_path / "run"
    res = run_mc_eval(ds, out, lambda todo: local_records(todo, model), {"model": "stand-in"}, progress=False)
    # Independently: which of the present questions got the right letter, and the baselines over them.
    present = [it for it in ds.items if it.video is not None]
    got = {it.question_id: extract_choice(model.reply[it.prompt], it.options) for it in present}
    correct = sum(got[it.question_id] == it.answer for it in present)
    assert (res["scored"], res["correct"], res["missing_videos"], model.calls) == (4, correct, 1, 4)
    assert res["accuracy"] == pytest.approx(correct / 4) and res["accuracy_all"] == pytest.approx(correct / 5)
    assert res["no_option"] == sum(v is None for v in got.values()) == 1
    letters = Counter(it.answer for it in present)
    assert res["baselines"]["letter_baseline"] == pytest.approx(letters.most_common(1)[0][1] / 4)
    assert res["baselines"]["chance"] == pytest.approx(sum(1 / len(it.options) for it in present) / 4)
    if key:
        cells = res["categories"][key]
        for value, cell in cells.items():
            group = [it for it in present if it.categories[key] == value]
            assert cell["n"] == len(group) and cell["correct"] == sum(got[it.question_id] == it.answer for it in group)
    audit = [json.loads(x) for x in (out / "audit.jsonl").read_text().splitlines()]
    assert Counter(a["status"] for a in audit)["missing_video"] == 1 and len(audit) == 5
    assert run_mc_eval(ds, out, lambda todo: local_records(todo, model), {"model": "stand-in"},
                       progress=False)["correct"] == correct and model.calls == 4  # resumed: nothing asked again
    with pytest.raises(InputError, match="other options"):
        run_mc_eval(ds, out, lambda todo: local_records(todo, model), {"model": "other"}, progress=False)


def test_option_prior_baseline_is_leave_one_out():
    from videoqa.eval.choice import MCItem, Scored, score

    def item(opts, ans):
        return MCItem("q", "v", None, "?", opts, ans, "")

    # "red" is right in three questions, "green" in one: leaving each question's own answer out, the prior picks
    # red for the first three (right) and finds green and blue never right elsewhere for the fourth (a tie).
    items = [item(["red", "blue"], "A"), item(["blue", "red"], "B"), item(["red", "green"], "A"),
             item(["green", "blue"], "A")]
    s = score([Scored(it, None) for it in items], ())
    assert s["overall"]["option_prior"] == pytest.approx((1 + 1 + 1 + 0.5) / 4)


def test_exports_in_the_benchmarks_own_shapes(tmp_path):
    for name in ("videomme", "egoschema", "longvideobench"):
        LAYOUTS[name][0](tmp_path / name)
        ds = load_mc_dataset(name, tmp_path / name)
        model = StandIn(ds)
        res = run_mc_eval(ds, tmp_path / f"run-{name}", lambda todo, m=model: local_records(todo, m),
                          {"model": "stand-in"}, progress=False)
        data = json.loads(Path(res["official"]).read_text())
        if name == "videomme":  # eval_your_results.py: videos with their questions, each with a response
            assert [(v["video_id"], v["missing"]) for v in data] == [("000", False), ("001", False), ("00e", True)]
            q = data[0]["questions"][0]
            assert q["response"] == model.reply[ds.items[0].prompt] and q["options"][0] == "A. red"
        elif name == "egoschema":  # {q_uid: option index}, -1 for no option
            assert data == {"v0-0": 0, "v0-1": 0, "v1-2": -1, "v1-3": 1}
        else:
            assert data == {it.question_id: model.reply[it.prompt] for it in ds.present}


def test_egoschema_full_set_is_exported_unscored(tmp_path):
    make_egoschema(tmp_path / "ego")
    ds = load_mc_dataset("egoschema", tmp_path / "ego", split="full")
    assert len(ds.items) == 6 and sum(it.answer is None for it in ds.items) == 1


def test_videomme_splits_and_subtitles(tmp_path):
    make_videomme(tmp_path / "v")
    assert [it.categories["duration"] for it in load_mc_dataset("videomme", tmp_path / "v", "short").items] == \
        ["short", "short"]
    (tmp_path / "v" / "subtitle").mkdir()
    (tmp_path / "v" / "subtitle" / "v0.srt").write_text(
        '1\n00:00:00,000 --> 00:00:00,500\n<font color="white" size=".72c">hello there</font>\n\n'
        "2\n00:00:50,000 --> 00:00:51,000\nnever shown\n")
    items = load_mc_dataset("videomme", tmp_path / "v", subtitles=True).items
    assert items[0].prompt.startswith("This video's subtitles are listed below: \nhello there\nSelect the best "
                                      "answer to the following multiple-choice question based on the video and "
                                      "the subtitles.")
    assert items[2].prompt.startswith("This video's subtitles are listed below: \nNo subtitles available\n")


def test_judge_options_are_refused_for_a_multiple_choice_set(tmp_path, capsys):
    make_videomme(tmp_path / "v")
    code = cli_main(["eval", "--dataset", "videomme", "--root", str(tmp_path / "v"), "--judge", "gpt"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "videomme is scored by the option letter; the judge options apply to" in err, err


@pytest.mark.parametrize("name,edit,msg", [
    ("videomme", lambda p: p.unlink(), "no videomme/test-*.parquet or"),
    ("mvbench", None, "no json/*.json here (expected the MVBench layout"),
    ("nextqa", None, "no test.csv or"),
])
def test_an_unknown_layout_is_one_line(tmp_path, capsys, name, edit, msg):
    root = tmp_path / "d"
    root.mkdir()
    if edit:
        make_videomme(tmp_path / "v")
        edit(tmp_path / "v" / "videomme" / "test.json")
        root = tmp_path / "v"
    code = cli_main(["eval", "--dataset", name, "--root", str(root), "--model", "/nonexistent", "--no-progress",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and msg in err, err


def test_a_missing_field_names_the_file_the_entry_and_the_field(tmp_path, capsys):
    make_longvideobench(tmp_path / "l")
    rows = json.loads((tmp_path / "l" / "lvb_val.json").read_text())
    del rows[2]["video_path"]
    (tmp_path / "l" / "lvb_val.json").write_text(json.dumps(rows))
    code = cli_main(["eval", "--dataset", "longvideobench", "--root", str(tmp_path / "l"), "--no-progress",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith(f"{tmp_path / 'l' / 'lvb_val.json'}: entry 2 has no 'video_path'"), err


def test_bad_references_are_counted_and_scored_wrong(tmp_path):
    make_mvbench(tmp_path / "m")
    path = tmp_path / "m" / "json" / "action_antonym.json"
    rows = json.loads(path.read_text())
    rows[0]["answer"] = "purple"  # none of the candidates
    path.write_text(json.dumps(rows))
    ds = load_mc_dataset("mvbench", tmp_path / "m")
    res = run_mc_eval(ds, tmp_path / "run", lambda todo: local_records(todo, StandIn(ds)), {}, progress=False)
    assert res["bad_reference"] == 1 and res["scored"] == 4


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_eval_command_with_the_tiny_model_prints_tables_and_baselines(tmp_path, capsys, tiny_model_dir, name):
    LAYOUTS[name][0](tmp_path / name)
    out = tmp_path / "run"
    code = cli_main(["eval", "--dataset", name, "--root", str(tmp_path / name), "--model", str(tiny_model_dir),
                     "--max-new-tokens", "3", "--no-progress", "--out", str(out), "--prune", "fastv", "--r", "0.75"])
    printed = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    assert code == 0 and res["scored"] == 4 and res["missing_videos"] == 1, printed
    assert "blind baselines: most common letter" in printed and "missing: " in printed
    key = LAYOUTS[name][1]
    if key:
        assert f"| {key} | n | accuracy | no option | most common letter | option prior | chance |" in printed


def test_report_puts_runs_side_by_side(tmp_path, capsys, tiny_model_dir):
    make_videomme(tmp_path / "v")
    common = ["eval", "--dataset", "videomme", "--root", str(tmp_path / "v"), "--model", str(tiny_model_dir),
              "--max-new-tokens", "2", "--no-progress"]
    assert cli_main([*common, "--prune", "none", "--out", str(tmp_path / "none")]) == 0
    assert cli_main([*common, "--prune", "vispruner", "--r", "0.5", "--out", str(tmp_path / "vis")]) == 0
    capsys.readouterr()
    assert cli_main(["report", str(tmp_path / "none"), str(tmp_path / "vis"), "--plot", ""]) == 0
    printed = capsys.readouterr().out
    none, vis = (json.loads((tmp_path / r / "results.json").read_text()) for r in ("none", "vis"))
    assert "| accuracy % | none R=0.0 (FLOPs 100.0 %) | vispruner R=0.5 (FLOPs" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| task_type: c2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    want = [f"{100 * r['categories']['task_type']['c2']['accuracy']:.1f}" for r in (none, vis)]
    assert cells[1:3] == want and cells[3] == "2" and cells[4] == "50.0"  # n, and letter C in 1 of 2


@pytest.mark.slow
def test_the_synthetic_set_is_videomme_with_uniform_letters(tmp_path):
    from videoqa.synth.mc import write_videomme
    from videoqa.synth.short import test_scenes

    root, n = write_videomme(tmp_path / "mc", n=4)
    ds = load_mc_dataset("videomme", root)
    assert len(ds.items) == n == 12 and not ds.missing
    scenes = {s.name: s for s in test_scenes(4)}
    for it in ds.items:
        kind = {"Attribute Perception": "colour", "Object Recognition": "shape", "Temporal Perception": "direction"}
        truth = getattr(scenes[it.video_name], kind[it.categories["task_type"]])
        assert it.options["ABCD".index(it.answer)] == truth and len(set(it.options)) == 4
    assert Counter(it.answer for it in ds.items).most_common(1)[0][1] <= 6


def test_lmms_eval_row_forms_parquet_and_option_columns(tmp_path):
    """The Hugging Face copies lmms-eval reads: Video-MME as Parquet, LongVideoBench with option0..option4 ("N/A"
    for an absent option), EgoSchema with video_idx / option / answer."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    make_videomme(tmp_path / "v")
    rows = json.loads((tmp_path / "v" / "videomme" / "test.json").read_text())
    (tmp_path / "v" / "videomme" / "test.json").unlink()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "v" / "videomme" / "test-00000-of-00001.parquet")
    ds = load_mc_dataset("videomme", tmp_path / "v")
    assert [it.answer for it in ds.items] == [r["answer"] for r in rows] and len(ds.present) == 4

    make_longvideobench(tmp_path / "l")
    rows = json.loads((tmp_path / "l" / "lvb_val.json").read_text())
    for r in rows:
        cands = r.pop("candidates")
        r.update({f"option{k}": cands[k] if k < len(cands) else "N/A" for k in range(5)})
    (tmp_path / "l" / "lvb_val.json").write_text(json.dumps(rows))
    items = load_mc_dataset("longvideobench", tmp_path / "l").items
    assert [it.options for it in items] == [opts for _, opts, _, _ in QUESTIONS]

    (tmp_path / "e").mkdir()
    rows = [{"video_idx": "v0-0", "question": "Why?", "option": ["A. walk", "B. run", "C. sit", "D. jump", "E. fly"],
             "answer": "3", "question_idx": 0}]
    (tmp_path / "e" / "Subset").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "e" / "Subset" / "test-00000-of-00001.parquet")
    (it,) = load_mc_dataset("egoschema", tmp_path / "e").items
    assert (it.options, it.answer, it.video) == (["walk", "run", "sit", "jump", "fly"], "D", None)


@pytest.mark.slow
def test_the_fine_tune_sequences_ask_as_eval_asks_and_teach_the_letter():
    """train_demo.py --mc-share: a multiple-choice sequence is the prompt `videoqa eval --dataset videomme` builds
    (Video-MME's, in the demo's plain conversation, tokenized as its processor does) and only the right option's
    letter and </s> are learned."""
    import numpy as np
    from transformers import VideoLlavaProcessor

    from scripts import train_demo
    from videoqa.eval.mc_layouts import videomme_prompt
    from videoqa.models.tiny import EOS_ID, VIDEO_ID
    from videoqa.synth.short import make_split

    repo = Path(__file__).resolve().parents[1]

    tok = VideoLlavaProcessor.from_pretrained(repo / "samples" / "demo-model", trust_remote_code=False).tokenizer
    scene = make_split("train", 1)[0]
    ids, weights = train_demo.build_mc_sequence(tok, scene, np.random.default_rng(3), n_video=4)
    prompt = [i for i, w in zip(ids, weights, strict=True) if not w]
    learned = [i for i, w in zip(ids, weights, strict=True) if w]
    letter = tok.decode(learned[:-1]).strip()
    assert learned[-1] == EOS_ID and letter in ("A", "B", "C", "D") and prompt.count(VIDEO_ID) == 4
    text = tok.decode([i for i in prompt if i != VIDEO_ID][1:])  # without <s>; the video slots are one <video>
    body = text.removeprefix("USER: \n").removesuffix(" ASSISTANT:")
    lines = body.split("\n")
    question, listing = lines[1], "\n".join(lines[2:6])
    assert body == videomme_prompt(question, listing)
    options = [line[3:] for line in lines[2:6]]
    assert options["ABCD".index(letter)] in (scene.colour, scene.shape, scene.direction) and len(set(options)) == 4


@pytest.mark.slow
def test_the_fine_tune_can_teach_the_option_text_which_extraction_reads_as_its_letter():
    """train_demo.py --mc-text: the same prompt, answered by the right option's text; `videoqa eval`'s answer
    extraction reads that reply as the right option's letter (and the other options' texts as theirs)."""
    import numpy as np
    from transformers import VideoLlavaProcessor

    from scripts import train_demo
    from videoqa.eval.choice import extract_choice
    from videoqa.models.tiny import EOS_ID
    from videoqa.synth.short import make_split

    repo = Path(__file__).resolve().parents[1]
    tok = VideoLlavaProcessor.from_pretrained(repo / "samples" / "demo-model", trust_remote_code=False).tokenizer
    scene = make_split("train", 1)[0]
    for seed in range(6):
        ids, weights = train_demo.build_mc_sequence(tok, scene, np.random.default_rng(seed), n_video=4, text=True)
        _, letter, _, answer = train_demo.mc_question(scene, np.random.default_rng(seed))
        learned = [i for i, w in zip(ids, weights, strict=True) if w]
        reply = tok.decode(learned[:-1]).strip()
        text = tok.decode([i for i, w in zip(ids, weights, strict=True) if not w])
        options = [line[3:] for line in text.split("\n") if line[:3] in ("A. ", "B. ", "C. ", "D. ")]
        assert learned[-1] == EOS_ID and reply == answer in (scene.colour, scene.shape, scene.direction)
        assert extract_choice(reply, options) == letter and len(options) == 4
        assert [extract_choice(o, options) for o in options] == ["A", "B", "C", "D"]


def test_demo_set_missing_video_no_option_and_bad_layout(tmp_path, capsys):
    """Issue 35's bad input on the demo's own set: a missing clip's questions are error records (not asked, not
    scored, counted apart), a reply that names no option is scored wrong and counted, and a row without a field the
    layout needs is one line naming the file and the field."""
    from videoqa.synth.mc import write_videomme

    root, _ = write_videomme(tmp_path / "mc", n=2)
    gone = json.loads((root / "videomme" / "test.json").read_text())[0]["videoID"]
    (root / "data" / f"{gone}.mp4").unlink()
    ds = load_mc_dataset("videomme", root)
    present = [it for it in ds.items if it.video is not None]
    replies = {it.prompt: ("hexagon" if i == 0 else it.answer) for i, it in enumerate(present)}  # no option

    def produce(todo):
        return local_records(todo, lambda video, question: {"answer": replies[question]})

    res = run_mc_eval(ds, tmp_path / "run", produce, {"model": "stand-in"}, progress=False)
    assert (res["questions"], res["missing_videos"], res["scored"]) == (6, 3, 3)
    assert (res["no_option"], res["correct"], res["accuracy"]) == (1, 2, pytest.approx(2 / 3))
    audit = [json.loads(x) for x in (tmp_path / "run" / "audit.jsonl").read_text().splitlines()]
    lost = [a for a in audit if a["video_name"] == gone]
    assert len(lost) == 3 and all(a["status"] == "missing_video" and a["reply"] is None for a in lost)
    assert all(gone in a["error"] and str(root) in a["error"] for a in lost), lost[0]["error"]
    recorded = {json.loads(x)["key"] for x in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()}
    assert recorded == {it.question_id for it in present}  # nothing was asked about the missing clip

    rows = json.loads((root / "videomme" / "test.json").read_text())
    del rows[1]["options"]
    (root / "videomme" / "test.json").write_text(json.dumps(rows))
    code = cli_main(["eval", "--dataset", "videomme", "--root", str(root), "--no-progress",
                     "--out", str(tmp_path / "run2")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith(f"{root / 'videomme' / 'test.json'}: entry 1 has no 'options'"), err
