"""`videoqa bench long`: every figure of the table comes from the run folders' records, recomputed here."""

from __future__ import annotations

import json

import pytest

from videoqa.batch.store import read_records
from videoqa.bench.long import Row, evaluate_rows, format_table, plot
from videoqa.cli import main
from videoqa.pruning import PruneConfig
from videoqa.pruning.flops import layer_flops
from videoqa.synth import long as synth_long

ROWS = [
    Row("8 frames, unpruned", PruneConfig(method="none"), 8),
    Row("8 frames, FastV R=0.5", PruneConfig(method="fastv", k=2, r=0.5), 8),
    Row("max frames, unpruned", PruneConfig(method="none"), "max"),
    Row("adaptive FastV", PruneConfig(method="fastv", k=2, r="auto")),
    Row("adaptive FastV, floor 1", PruneConfig(method="fastv", k=2, r="auto", frame_floor=1.0)),
    Row("random R=0.75", PruneConfig(method="random", r=0.75)),  # fixed R at the adaptive row's frames
]


@pytest.fixture(scope="module")
def long_split(tmp_path_factory):
    """A 49 s clip (> 30 s) and an 8.25 s one (<= 10 s) of the held-out stream, in the eval layout."""
    scenes = synth_long.make_split("test", 3)
    root, _ = synth_long.write_eval_split(tmp_path_factory.mktemp("long") / "split", [scenes[0], scenes[2]])
    # Two questions a clip keep the test fast: the moving shape's colour and the last (an event) question.
    answers = json.loads((root / "test_a.json").read_text())
    keep = {a["question_id"] for a in answers if a["type"] == "colour"}
    keep |= {[a for a in answers if a["question_id"].startswith(s.name)][-1]["question_id"] for s in scenes[::2]}
    for name in ("test_q.json", "test_a.json"):
        items = json.loads((root / name).read_text())
        (root / name).write_text(json.dumps([it for it in items if it["question_id"] in keep]))
    return root


def records(runs, row):
    folder = runs / row.folder("tiny", "test")
    return {r["key"]: r for r in read_records(folder / "predictions.jsonl")}


def test_table_figures_are_recomputed_from_the_records(tiny_qa, long_split, tmp_path):
    runs = tmp_path / "runs"
    results = evaluate_rows(tiny_qa, long_split, runs, ROWS, "tiny", "test")
    recs = [records(runs, row) for row in ROWS]
    answers = {a["question_id"]: a for a in json.loads((long_split / "test_a.json").read_text())}
    assert all(set(r) == set(answers) for r in recs) and not any(x.get("error") for r in recs for x in r.values())
    d = tiny_qa.dims
    ref, fastv8, maxf, auto, floor, rand = recs
    for key, rec in ref.items():
        n_text = rec["flops"]["n_tokens"] - rec["kept"]["n_visual"]
        assert rec["stats"]["frames"] == 8 and fastv8[key]["kept"]["n_kept"] == 260
        assert maxf[key]["stats"]["frames"] == (d.context - n_text - 8) // d.tokens_per_frame
        assert rand[key]["stats"]["frames"] == auto[key]["stats"]["frames"]
        assert rand[key]["kept"]["n_kept"] == round(auto[key]["stats"]["frames"] * 65 * 0.25)
        per_frame = floor[key]["kept"]["per_frame"]
        assert min(per_frame) == floor[key]["kept"]["n_kept"] // len(per_frame)
    long_keys = [k for k in ref if k.startswith(synth_long.make_split("test", 1)[0].name)]
    assert auto[long_keys[0]]["stats"]["frames"] > 8  # a 49 s clip gets more frames

    for res, rec in zip(results, recs, strict=True):
        kept = [r["kept"]["n_kept"] for r in rec.values()]
        assert res.kept == pytest.approx(sum(kept) / len(kept))
        # FLOPs by FastV's layer formula, against 8 unpruned frames of the same prompt, over the > 30 s clip
        cost = sum(r["flops"]["pruned"] for k, r in rec.items() if k in long_keys)
        full8 = sum(d.n_layers * layer_flops(r["flops"]["n_tokens"] - r["kept"]["n_visual"] + 520, d.hidden, d.ffn)
                    for k, r in rec.items() if k in long_keys)
        assert res.flops[">30 s"] == pytest.approx(cost / full8)
        hits = sum(r["answer"].strip().lower() == answers[k]["answer"] for k, r in rec.items())
        assert res.groups["all"] == (hits, len(answers))
        assert res.groups["≤10 s"][1] == res.groups[">30 s"][1] == len(answers) // 2
    assert results[0].prefill_ratio == 1.0 and results[0].flops == {"all": 1.0, "≤10 s": 1.0, ">30 s": 1.0}
    assert results[2].flops[">30 s"] > 1.0 > results[3].flops[">30 s"]  # max frames cost more; the cap holds

    table = format_table(results, synth_long.QUESTION_TYPES)
    lines = table.splitlines()
    assert len(lines) == 2 + len(ROWS) and all(line.count("|") == lines[0].count("|") for line in lines)
    assert "| 8 frames, unpruned | 8.0 / – / 8.0 | 520 | 100 / – / 100 |" in table and "event first" in lines[0]
    assert plot(results, tmp_path / "long.png").stat().st_size > 1000

    again = evaluate_rows(tiny_qa, long_split, runs, ROWS, "tiny", "test")  # resumed: nothing re-run
    assert [r.groups for r in again] == [r.groups for r in results]
    assert all(len(read_records(runs / row.folder("tiny", "test") / "predictions.jsonl")) == len(answers)
               for row in ROWS)


def test_bad_clip_count_is_one_line(capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's own error
        main(["bench", "long", "--clips", "0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--clips" in err and "must be >= 1" in err and len(err.strip().splitlines()) == 1


def test_sweep_goal_names_what_fails():
    from videoqa.bench.long import RowResult
    from videoqa.bench.long.sweep import format_sweep, goal

    def result(label, short, long_, flops):
        groups = {"all": (short + long_, 200), "≤10 s": (short, 100), ">30 s": (long_, 100), "event >30 s": (5, 10)}
        return RowResult(label, groups, {"all": 8.0, "≤10 s": 8.0, ">30 s": 8.0}, 260.0,
                         {"all": flops, "≤10 s": 0.5, ">30 s": flops}, {}, 0.1, 0)

    ref = result("8 frames, unpruned", 90, 50, 1.0)
    assert goal(result("a", 90, 60, 1.0), ref) == "yes"
    assert goal(result("b", 89, 60, 1.0), ref) == "yes"  # one point lost is allowed
    assert goal(result("c", 88, 59, 1.01), ref) == "no: > 30 s +9.0 < +10, ≤ 10 s -2.0 < −1, FLOPs > 100 %"
    table = format_sweep([ref, result("a", 90, 60, 1.0)])
    assert "| a | 8.0 / – / 8.0 | 260 | 50 / – / 100 | 75.0 | 90.0 | – | 60.0 | 50.0 | +10.0 | +0.0 | yes |" in table


@pytest.fixture(scope="module")
def reads_split(tmp_path_factory):
    """Short held-out clips, one of each kind (object, flash, order), as they are and with their events erased;
    event and direction questions only, to stay fast."""
    scenes, kinds = [], set()
    for s in synth_long.test_scenes(60):
        if s.n_frames <= 40 and s.kind not in kinds:
            scenes.append(s)
            kinds.add(s.kind)
    assert kinds == set(synth_long.KINDS)
    base = tmp_path_factory.mktemp("reads")
    roots = []
    for erase in (False, True):
        root, _ = synth_long.write_eval_split(base / ("erased" if erase else "clips"), scenes, erase=erase)
        answers = json.loads((root / "test_a.json").read_text())
        keep = {a["question_id"] for a in answers if a["type"] not in ("colour", "shape")}
        for name in ("test_q.json", "test_a.json"):
            items = json.loads((root / name).read_text())
            (root / name).write_text(json.dumps([it for it in items if it["question_id"] in keep]))
        roots.append(root)
    return scenes, *roots


def test_reads_the_event_is_what_asking_both_clips_gives(reads_split, tmp_path):
    """The bench's counterfactual figures for the shipped demo-long equal an independent re-run: each event
    question asked on the clip and on its erased twin, shown-ness from the scene itself."""
    from videoqa.bench.long.reads import ReadsRow, evaluate_reads, format_reads
    from videoqa.pipeline import VideoQA

    scenes, root, erased_root = reads_split
    qa = VideoQA.from_pretrained("demo-long", max_new_tokens=8)
    rows = evaluate_reads(qa, root, erased_root, tmp_path / "runs", "demo-long", "test", counts=(8, 24))
    by_name = {s.name: s for s in scenes}
    questions = json.loads((root / "test_q.json").read_text())
    answers = {a["question_id"]: a for a in json.loads((root / "test_a.json").read_text())}
    event = {t for ts in synth_long.KIND_TYPES.values() for t in ts}
    blind = {}
    for t in event | {"direction"}:
        got = sorted(a["answer"] for a in answers.values() if a["type"] == t)
        blind[t] = sorted(set(got), key=lambda x: (-got.count(x), x))[0] if got else None
    none = PruneConfig(method="none")
    for frames, row in zip((8, 24), rows, strict=True):
        want = ReadsRow(frames, frames_used=(frames, frames))
        direction = [0, 0]
        for q in questions:
            a = answers[q["question_id"]]
            scene = by_name[q["video_name"]]
            said = qa.ask(root / "videos" / f"{scene.name}.mp4", q["question"], prune=none, frames=frames,
                          sampler="uniform").text
            right = said.strip(" .").lower() == a["answer"]
            if a["type"] == "direction":
                direction = [direction[0] + right, direction[1] + 1]
                continue
            blind_right = blind[a["type"]] == a["answer"]
            if synth_long.shows(scene, synth_long.sample_indices(scene.n_frames, frames)):
                other = qa.ask(erased_root / "videos" / f"{scene.name}.mp4", q["question"], prune=none,
                               frames=frames, sampler="uniform").text
                changed = other.strip(" .").lower() != said.strip(" .").lower()
                want.shown, want.right_shown, want.blind_shown = (want.shown + 1, want.right_shown + right,
                                                                   want.blind_shown + blind_right)
                want.changed, want.reads = want.changed + changed, want.reads + (changed and right)
            else:
                want.hidden, want.right_hidden = want.hidden + 1, want.right_hidden + right
                want.blind_hidden += blind_right
        want.direction = tuple(direction)
        assert row == want
    assert rows[1].shown == len([a for a in answers.values() if a["type"] in event])  # 24 frames show all
    # the shipped model's figure (4 of 4 when measured): it reads the events it is shown; the demo-long before
    # issue 24 read 1 in 17 at 24 frames (5.8 % of 52 questions)
    assert rows[1].reads >= rows[1].shown - 1 and rows[1].changed >= rows[1].shown - 1
    table = format_reads(rows).splitlines()
    assert len(table) == 4 and table[3].startswith(f"| 24 | {rows[1].shown} |")
