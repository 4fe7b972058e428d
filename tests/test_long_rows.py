"""`videoqa bench long`'s oracle, content-sampler and many-frames fidelity rows, recomputed from the run folders'
records and the scenes' metadata."""

from __future__ import annotations

import json

import pytest

from videoqa.batch.store import read_records
from videoqa.bench.long import Row, evaluate_rows
from videoqa.bench.long.rows import (
    FIDELITY_R,
    fidelity_lines,
    fidelity_rows,
    format_fidelity,
    oracle_indices,
    sampler_rows,
)
from videoqa.pruning import PruneConfig, keep_count
from videoqa.pruning.flops import estimate_flops
from videoqa.synth import long as synth_long
from videoqa.video import sample_frames

K = 2


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Two held-out clips (49 s and 8.25 s), one question each (the last, about the event)."""
    scenes = synth_long.make_split("test", 3)
    root, _ = synth_long.write_eval_split(tmp_path_factory.mktemp("rows") / "split", [scenes[0], scenes[2]])
    answers = json.loads((root / "test_a.json").read_text())
    keep = {[a for a in answers if a["question_id"].startswith(s.name)][-1]["question_id"] for s in scenes[::2]}
    for name in ("test_q.json", "test_a.json"):
        items = json.loads((root / name).read_text())
        (root / name).write_text(json.dumps([it for it in items if it["question_id"] in keep]))
    return root


def test_oracle_frames_show_every_event_within_the_budget():
    for scene in synth_long.test_scenes(40):
        meta = synth_long.metadata(scene)
        idx = oracle_indices(meta, 8)
        assert len(idx) == len(set(idx)) == 8 and idx == sorted(idx) and 0 <= idx[0] and idx[-1] < scene.n_frames
        assert synth_long.shows(scene, idx)
        if synth_long.resolved(scene, 8):  # uniform frames already show it: nothing moves
            assert idx == synth_long.sample_indices(scene.n_frames, 8)


def recs(runs, row):
    return {r["key"]: r for r in read_records(runs / row.folder("tiny", "test") / "predictions.jsonl")}


def test_rows_recomputed_from_the_records(tiny_qa, split, tmp_path):
    fastv = PruneConfig(method="fastv", k=K, r="auto")
    rows = [Row("8 frames, unpruned", PruneConfig(method="none"), 8),
            Row("max frames, unpruned", PruneConfig(method="none"), "max"),
            *sampler_rows(fastv), *fidelity_rows(K)]
    runs = tmp_path / "runs"
    results = evaluate_rows(tiny_qa, split, runs, rows, "tiny", "test")
    by = {row.label: recs(runs, row) for row in rows}
    assert all(not r.get("error") for rec in by.values() for r in rec.values())
    scenes = {s["name"]: s for s in json.loads((split / "scenes.json").read_text())}
    d = tiny_qa.dims
    for key, ref in by["8 frames, unpruned"].items():
        video = split / "videos" / f"{ref['video'].split('/')[-1]}"
        scene = scenes[video.stem]
        oracle = by["8 frames, oracle, unpruned"][key]
        assert oracle["frames"]["indices"] == oracle_indices(scene, 8) and oracle["frames"]["sampler"] == "oracle"
        content = by["8 frames, content, unpruned"][key]
        assert content["frames"]["indices"] == sample_frames(video, 8, sampler="content").indices
        assert content["flops"]["pruned"] == ref["flops"]["pruned"]  # same frames, same tokens, same FLOPs
        adaptive = by["adaptive FastV, content"][key]
        assert adaptive["frames"]["sampler"] == "content" and adaptive["decision"] is not None

        n_text = ref["flops"]["n_tokens"] - ref["kept"]["n_visual"]
        max_frames = by["max frames, unpruned"][key]["stats"]["frames"]
        cap = estimate_flops(d, n_text, 8 * d.tokens_per_frame, 8 * d.tokens_per_frame, None).full
        for label, rec in by.items():
            if label.startswith("max frames, ") and "R=" in label:
                assert rec[key]["stats"]["frames"] == max_frames
                assert rec[key]["kept"]["n_kept"] == keep_count(max_frames * d.tokens_per_frame, FIDELITY_R)
            if label.startswith("8-frame FLOPs"):  # within the cap, and one more kept token would not be
                f, kept, layer = rec[key]["stats"]["frames"], rec[key]["kept"]["n_kept"], rec[key]["flops"]["layer"]
                n_vis = f * d.tokens_per_frame
                assert estimate_flops(d, n_text, n_vis, kept, layer).pruned <= cap
                assert kept == n_vis or estimate_flops(d, n_text, n_vis, kept + 1, layer).pruned > cap
                assert f <= max_frames and kept >= round(n_vis * 0.1)

    lines = fidelity_lines(results, K, "all")
    res = {r.label: r for r in results}
    fastv_line = lines[0]
    assert fastv_line.method == "FastV"
    assert fastv_line.pruned == res[f"max frames, FastV R={FIDELITY_R:g}"].accuracy("all")
    assert fastv_line.unpruned == res["max frames, unpruned"].accuracy("all")
    assert fastv_line.base == res["8 frames, unpruned"].accuracy("all")
    table = format_fidelity(results, K)
    assert len(table.splitlines()) == 2 + 2 * len(lines) and "| all | FastV |" in table


def test_bench_long_methods_rows_put_each_method_at_three_ratios_beside_the_reference():
    from videoqa.bench.long.rows import method_rows

    rows = method_rows(["none", "fastv", "pool"], k=3)
    assert [r.label for r in rows] == ["8 frames, unpruned", "fastv R=0.5", "fastv R=0.75", "fastv R=0.9",
                                       "pool R=0.5", "pool R=0.75", "pool R=0.9"]
    assert all(r.frames == 8 and r.sampler == "uniform" for r in rows)
    assert [r.prune.k for r in rows[1:4]] == [3, 3, 3] and rows[4].prune.r == 0.5
