"""The long-clip generator (videoqa/synth/long.py): events are where it says, splits are disjoint,
output is deterministic and readable by the eval loader."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from videoqa.eval.datasets import load_dataset  # noqa: E402
from videoqa.synth import long as L
from videoqa.synth import short as synth
from videoqa.video import sample_frames  # noqa: E402


def short_scenes(split: str = "train", per_kind: int = 1, max_frames: int = 48) -> list[L.LongScene]:
    """A few cheap scenes of each kind (flash clips with 3 flashes included)."""
    picked: dict[str, list[L.LongScene]] = {}
    for s in L.make_split(split, 400):
        key = f"{s.kind}{len(s.events)}"
        if s.n_frames <= max_frames and len(picked.setdefault(key, [])) < per_kind:
            picked[key].append(s)
    assert {"object1", "order2", "flash1", "flash2", "flash3"} <= set(picked)
    return [s for group in picked.values() for s in group]


@pytest.fixture(scope="module")
def scenes() -> list[L.LongScene]:
    return short_scenes()


def event_frames(scene: L.LongScene) -> set[int]:
    return {i for e in scene.events for i in range(e.start, e.stop)}


def test_events_change_exactly_their_frames(scenes):
    for scene in scenes:
        frames = L.render(scene)
        plain = L.render(dataclasses.replace(scene, events=[]))
        changed = {i for i in range(scene.n_frames) if not np.array_equal(frames[i], plain[i])}
        assert changed == event_frames(scene), scene.name
        objects = {i for e in scene.events if e.kind == "object" for i in range(e.start, e.stop)}
        haloed = {i for i in range(scene.n_frames) if np.all(frames[i] == L.HALO_RGB, axis=-1).sum() > 20}
        assert haloed == objects, scene.name
        for e in scene.events:
            for i in range(scene.n_frames):
                if e.kind == "object":  # the object's own colour at its centre, only while it is shown
                    at = tuple(frames[i, int(e.centre[1]), int(e.centre[0])])
                    assert (at == synth.COLOURS[e.colour]) == (e.start <= i < e.stop), (scene.name, i)
                else:  # most of a flash frame is the flash colour; never in other frames
                    light = np.all(frames[i] == L.FLASH_RGB, axis=-1).mean()
                    in_any = any(f.start <= i < f.stop for f in scene.events)
                    assert (light > 0.4) == in_any and (light == 0) != in_any, (scene.name, i, light)


def test_decoded_samples_show_the_event_when_metadata_says(scenes, tmp_path):
    """Through mp4 + the pipeline's sampler: a sampled frame shows the event iff its index is inside it."""
    for scene in [s for s in scenes if s.kind == "object"][:1] + [s for s in scenes if s.kind == "flash"][:1]:
        path = synth.write_mp4(L.render(scene), tmp_path / f"{scene.name}.mp4", fps=scene.fps)
        for f in (4, 8, 13):
            clip = sample_frames(path, f)
            assert clip.indices == L.sample_indices(scene.n_frames, f)
            for frame, i in zip(clip.frames, clip.indices, strict=True):
                e = scene.events[0]
                if e.kind == "object":
                    x, y = int(e.centre[0]), int(e.centre[1])
                    seen = np.abs(frame[y - 2 : y + 3, x - 2 : x + 3].astype(int) - synth.COLOURS[e.colour]).max() < 40
                else:
                    seen = np.abs(frame.astype(int) - L.FLASH_RGB).max(-1).__lt__(20).mean() > 0.4
                assert seen == (i in event_frames(scene)), (scene.name, f, i)


def test_max_gap_and_guarantee():
    for n in (2, 16, 17, 40, 119, 240):
        for f in range(2, 40):
            idx = np.linspace(0, n - 1, f, dtype=int)
            assert np.diff(idx).max() == min(L.max_gap(n, f), n - 1) or f > n
    for scene in L.make_split("val", 60):
        assert L.MIN_EVENT_S * scene.fps <= min(e.stop - e.start for e in scene.events)
        assert max(e.stop - e.start for e in scene.events) <= L.MAX_EVENT_S * scene.fps
        assert all(L.resolved(scene, f) for f in range(L.GUARANTEE_FRAMES, 65)), scene.name
        assert L.frames_needed(scene) <= L.GUARANTEE_FRAMES
    long = [s for s in L.make_split("val", 150) if s.duration_s > 30]
    missed = np.mean([not L.resolved(s, 8) for s in long])
    assert missed > 0.5, missed  # 8 frames usually miss something on a > 30 s clip


def test_splits_disjoint_and_deterministic():
    train = {s.key() for s in L.make_split("train", 600)}
    val, test = L.val_scenes(60, train_n=600), L.test_scenes(60, train_n=600, val_n=60)
    assert len(val) == 60 and len(test) == 60
    vk, tk = {s.key() for s in val}, {s.key() for s in test}
    assert not (train & vk) and not (train & tk) and not (vk & tk)
    assert L.make_split("test", 20) == L.make_split("test", 20)
    assert L.make_split("test", 20, seed=1) != L.make_split("test", 20)
    kinds = {s.kind for s in test}
    assert kinds == set(L.KINDS)
    durations = [s.duration_s for s in test]
    assert min(durations) >= 4 and max(durations) <= 60 and sum(d > 30 for d in durations) > 10


def test_questions_answers_and_layout(tmp_path):
    scenes = short_scenes("test", max_frames=24)[:3]
    out, nq = L.write_eval_split(tmp_path / "split", scenes, seed=0)
    again, _ = L.write_eval_split(tmp_path / "again", scenes, seed=0)
    assert (out / "test_a.json").read_text() == (again / "test_a.json").read_text()
    for s in scenes:
        assert (out / "videos" / f"{s.name}.mp4").read_bytes() == (again / "videos" / f"{s.name}.mp4").read_bytes()
    ds = load_dataset("msvd", out)
    assert len(ds.items) == nq and not ds.missing
    answers = json.loads((out / "test_a.json").read_text())
    meta = {m["name"]: m for m in json.loads((out / "scenes.json").read_text())}
    by_scene = {s.name: s for s in scenes}
    for item, a in zip(ds.items, answers, strict=True):
        scene = by_scene[item.video_name]
        want = {"colour": scene.main.colour, "shape": scene.main.shape, "direction": scene.main.direction,
                "event_colour": scene.events[0].colour, "event_shape": scene.events[0].shape,
                "count": L.COUNT_WORDS[len(scene.events) - 1], "order": scene.events[0].shape}[a["type"]]
        assert item.answer == want
        assert a["type"] in L.KIND_TYPES[scene.kind] + ["colour", "shape", "direction"]
    for s in scenes:
        m = meta[s.name]
        assert m["duration_s"] == s.n_frames / L.FPS and m["event_third"] in ("first", "middle", "last")
        assert [(e["start"], e["stop"]) for e in m["events"]] == [(e.start, e.stop) for e in s.events]
        assert sample_frames(out / "videos" / f"{s.name}.mp4", 4).info.total_frames == s.n_frames


def test_erased_clip_is_the_same_clip_without_its_events(scenes, tmp_path):
    """The counterfactual: only the event frames change, to what they would show without the event; the
    erased split keeps the original questions, answers and metadata, so the two pair up by question id."""
    for scene in scenes:
        frames, gone = L.render(scene), L.render(L.erased(scene))
        changed = {i for i in range(scene.n_frames) if not np.array_equal(frames[i], gone[i])}
        assert changed == event_frames(scene), scene.name
        assert not np.any(np.all(gone == L.HALO_RGB, axis=-1)) and not np.any(np.all(gone == L.FLASH_RGB, axis=-1))
    picked = scenes[:3]
    out, _ = L.write_eval_split(tmp_path / "clips", picked)
    erased, _ = L.write_eval_split(tmp_path / "erased", picked, erase=True)
    for name in ("test_q.json", "test_a.json", "scenes.json"):
        assert (out / name).read_text() == (erased / name).read_text()
    for s in picked:
        a = sample_frames(out / "videos" / f"{s.name}.mp4", s.n_frames).frames.astype(int)
        b = sample_frames(erased / "videos" / f"{s.name}.mp4", s.n_frames).frames.astype(int)
        diff = np.abs(a - b).max(axis=(1, 2, 3))
        assert {i for i in range(s.n_frames) if diff[i] > 40} == event_frames(s), s.name


def test_shows_is_resolved_for_any_frames(scenes):
    for scene in scenes:
        for f in range(1, 30):
            assert L.shows(scene, L.sample_indices(scene.n_frames, f)) == L.resolved(scene, f)
        e = scene.events
        inside = [x.start for x in e] + [x.stop for x in e[:-1]]  # each event and each gap after it
        assert L.shows(scene, sorted(inside)) and not L.shows(scene, sorted(inside)[1:])
        assert L.shows(L.erased(scene), [0])  # nothing to see: nothing missed


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to compare with one")
def test_rendered_clip_bytes_do_not_depend_on_the_cpus(tmp_path):
    """x264 encodes differently with one thread than with several: a clip rendered on a one-CPU container (or a
    trainer pinned to a core) must be the clip the benchmark and the feature caches were made from."""
    scene = L.make_split("train", 1, 0)[0]
    here = synth.write_mp4(L.render(scene), tmp_path / "here.mp4", fps=scene.fps).read_bytes()
    code = ("import os, sys; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
            "from videoqa.synth import long as L, short as S; s = L.make_split('train', 1, 0)[0];"
            "S.write_mp4(L.render(s), sys.argv[1], fps=s.fps)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "one.mp4")], check=True)
    assert (tmp_path / "one.mp4").read_bytes() == here
