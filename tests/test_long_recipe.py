"""The frozen-tower long-clip recipe (scripts/train_long_frozen_tower.py) supervises only what its frames show:
event labels only when the sampled frames see the event, "none" on erased clips, curriculum windows that see
every event, and frame counts drawn evenly by sequences."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import REPO

from videoqa.synth import long as synth_long

recipe = pytest.importorskip("scripts.train_long_frozen_tower")


@pytest.fixture(scope="module")
def scenes():
    return synth_long.make_split("train", 60)


def test_event_questions_only_when_shown_and_none_when_erased(scenes):
    rng = np.random.default_rng(0)
    for scene in scenes:
        events = set(synth_long.KIND_TYPES[scene.kind])
        for f in (8, 24):
            idx = synth_long.sample_indices(scene.n_frames, f)
            asked = {t for _, _, t, _ in recipe.questions(scene, rng, idx, erased=False)} & events
            assert asked == (events if synth_long.shows(scene, idx) else set()), (scene.name, f)
            gone = recipe.questions(scene, rng, idx, erased=True)
            assert {a for _, a, t, ev in gone if ev} == ({"zero"} if scene.kind == "flash" else {"none"})
        assert "direction" not in {t for _, _, t, _ in recipe.questions(scene, rng, [0], True, direction=False)}


def test_curriculum_windows_show_every_event(scenes):
    rng = np.random.default_rng(1)
    for scene in scenes:
        for _ in range(5):
            idx = recipe.window(scene, rng)
            assert 1 <= len(idx) <= 8 and idx == sorted(set(idx)) and synth_long.shows(scene, idx), scene.name


def test_frame_counts_are_drawn_evenly_by_sequences(scenes):
    """A step holds one frame count; over many steps every count gets about the same number of sequences."""
    from transformers import AutoTokenizer

    a = recipe.LongArgs(short_frac=0.0, window_frac=0.0, curriculum=0.0)
    tok = AutoTokenizer.from_pretrained(REPO / "samples" / "demo-model")
    feats = [torch.zeros(s.n_frames, 17, 1) for s in scenes]
    data = recipe.Data(a, tok, 17, scenes, feats, [], [], [])
    rng = np.random.default_rng(2)
    per_count: Counter = Counter()
    for step in range(1, 1501):
        seqs, views, kind = data.step(step, rng)
        f = int(kind.split()[0])
        assert all(v.shape[0] == f for v in views) and all(len(ids) <= a.context for ids, _ in seqs)
        assert all(ids.count(5) == f * 17 for ids, _ in seqs)  # the video slot holds every frame's tokens
        per_count[f] += len(seqs)
    assert data.counts[0] == 8 and data.counts[-1] == data.max_frames == (a.context - recipe.TEXT_ROOM) // 17
    # expected sequences per count: as even as whole sequences per step allow
    per_step = [max(1, a.tokens_per_step // (f * 17 + 80)) for f in data.counts]
    expected = data.p_count * np.array(per_step)
    assert expected.max() < 1.4 * expected.min(), expected
    # drawn: each quarter of the range gets a quarter of the sequences (the old recipe: 1,536 of its 3,054 long
    # sequences at 8 frames, 72 at 31)
    quarters = np.array_split(np.array([per_count[f] for f in data.counts]), 4)
    shares = np.array([q.sum() for q in quarters]) / sum(per_count.values())
    assert np.all(np.abs(shares - 0.25) < 0.06), shares


def test_the_tower_is_checked_on_clips_it_never_saw():
    """The tower's held-back accuracy once held back frames of its training clips, whose neighbours look alike:
    99 % on them, 65 % on new clips. Every held-back frame must come from a clip with no frame in training."""
    from scripts import long_tower

    clips = np.repeat(np.arange(50), np.random.default_rng(0).integers(4, 30, size=50))
    train, held = long_tower.split_by_clip(clips, np.random.default_rng(1))
    assert len(train) + len(held) == len(clips) and not set(train) & set(held)
    assert not set(clips[train]) & set(clips[held])
    assert len(set(clips[held])) == 5  # a tenth of the clips, whole


def test_a_continued_run_records_every_run_before_it(tmp_path):
    """Both trainers keep the runs a run continues under `stages` (the web chat counts their clips from it):
    the folder's own stages first, then its record, without the evaluation history."""
    from scripts import train_demo

    assert train_demo.earlier_stages("") == {}
    record = {"args": {"train_clips": 3000}, "step": 150, "history": [{"step": 50}],
              "stages": {"stage1": {"args": {"train_clips": 6000}, "step": 1750}}}
    (tmp_path / "training.json").write_text(json.dumps(record))
    assert train_demo.earlier_stages(str(tmp_path)) == {"stage1": {"args": {"train_clips": 6000}, "step": 1750},
                                                         "stage2": {"args": {"train_clips": 3000}, "step": 150}}


def test_checkpoints_are_chosen_on_clips_neither_trained_on_nor_tested():
    """--select-long adds validation clips for choosing the checkpoint: past the base validation set, none of them a
    training clip (any the recipe's stages draw) or a clip of the held-out test split the benchmark reports."""
    a = recipe.LongArgs(val_long=30, select_long=90, val_counts="8,16,24,max")
    more = recipe.select_scenes(a)
    keys = {s.key() for s in more}
    # each against the whole stream its split is drawn from (a superset of the split)
    assert len(more) == 60 and not keys & {s.key() for s in synth_long.make_split("val", a.val_long, a.seed)}
    assert not keys & {s.key() for s in synth_long.make_split("train", 600 + 4800, a.seed)}  # stage 4's clips
    assert not keys & {s.key() for s in synth_long.make_split("test", 120, a.seed)}
    assert recipe.val_counts(a, 58) == [8, 16, 24, 58]
    assert recipe.select_scenes(recipe.LongArgs()) == []


def test_a_feature_cache_is_made_once_and_read_back(tmp_path):
    """The trainer's caches (extra clips, extra short clips, selection clips) are made on first use and then read,
    never remade: a continued run must see the features the run before it trained on."""
    calls, logged = [], []

    def make():
        calls.append(1)
        return {"feats": [torch.arange(3.0)]}

    file = tmp_path / "features_x.val30-150.pt"
    first = recipe.cached(file, make, logged.append, "validation clips 30-150")
    again = recipe.cached(file, make, logged.append, "validation clips 30-150")
    assert len(calls) == 1 and torch.equal(first["feats"][0], again["feats"][0])
    assert [p.name for p in tmp_path.iterdir()] == [file.name]  # no temporary left beside it
    assert len(logged) == 1 and logged[0].startswith("validation clips 30-150: featurised in")
