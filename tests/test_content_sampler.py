"""The content-aware frame sampler: brief events found, the uniform floor kept, static clips left uniform."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
from helpers import clipgen

from videoqa.errors import InputError
from videoqa.synth import long, short
from videoqa.video import changes, frame_indices, sample, sample_frames, scan_changes
from videoqa.video.changes import MAX_THUMBS, SCAN_FPS, THUMB_SIZE, ChangeScan, content_indices

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def _event_clips(n: int) -> list[long.LongScene]:
    """The first n seeded long scenes (30-60 s) whose events 8 uniform frames do not all see."""
    out, seed = [], 0
    while len(out) < n:
        scene = long.make_scene(np.random.default_rng([25, seed]), f"event{seed}")
        if scene.duration_s >= 30 and not long.resolved(scene, 8):
            out.append(scene)
        seed += 1
    return out


def _sees_every_event(scene: long.LongScene, indices: list[int]) -> bool:
    return all(any(e.start <= i < e.stop for i in indices) for e in scene.events)


def _max_floor_gap(n_frames: int, num_frames: int) -> int:
    """The floor keeps every other uniform frame: two uniform spacings at most."""
    return 2 * math.ceil((n_frames - 1) / (num_frames - 1))


@pytest.fixture(scope="module")
def event_clips(tmp_path_factory):
    folder = tmp_path_factory.mktemp("events")
    return [(scene, short.write_mp4(long.render(scene), folder / f"{scene.name}.mp4", fps=scene.fps))
            for scene in _event_clips(6)]


def test_content_frames_find_brief_events_that_uniform_frames_miss(event_clips):
    seen = 0
    for scene, path in event_clips:
        start = time.perf_counter()
        clip = sample_frames(path, 8, sampler="content")
        content_s = time.perf_counter() - start
        start = time.perf_counter()
        uniform = sample_frames(path, 8)
        uniform_s = time.perf_counter() - start
        assert uniform.sampler == "uniform" and not _sees_every_event(scene, uniform.indices)  # how they were drawn
        assert clip.sampler == "content" and clip.info.total_frames == scene.n_frames
        assert len(clip.indices) == 8 and clip.indices == sorted(set(clip.indices))
        assert clip.timestamps == pytest.approx([i / scene.fps for i in clip.indices], abs=1e-3)
        seen += _sees_every_event(scene, clip.indices)
        events = [(e.start, e.stop) for e in scene.events]
        print(f"{scene.kind} {scene.duration_s:g} s events {events}: content {clip.indices} ({content_s:.2f} s), "
              f"uniform {uniform.indices} ({uniform_s:.2f} s)")
    assert seen >= 5, f"the content sampler saw every event in only {seen} of {len(event_clips)} clips"


def test_the_floor_holds_and_the_choice_is_deterministic(event_clips, tmp_path):
    counting = clipgen.write_clip(tmp_path / "counting.mp4", n_frames=150, gop=10)  # every frame differs
    paths = [p for _, p in event_clips] + [counting]
    for num_frames in (8, 16):
        for path in paths:
            clip = sample_frames(path, num_frames, sampler="content")
            n = clip.info.total_frames
            uniform = frame_indices(n, num_frames)
            assert set(uniform[::2]) | {uniform[-1]} <= set(clip.indices)  # every other uniform frame stays
            assert clip.indices[0] == 0 and clip.indices[-1] == n - 1
            assert max(np.diff(clip.indices)) <= _max_floor_gap(n, num_frames)
            again = sample_frames(path, num_frames, sampler="content")
            assert again.indices == clip.indices and np.array_equal(again.frames, clip.frames)
    # the frames returned are the frames named: each counting frame shows its own number
    clip = sample_frames(counting, 8, sampler="content")
    assert clip.indices != frame_indices(150, 8)
    assert [clipgen.read_index(f) for f in clip.frames] == clip.indices
    decord = sample_frames(counting, 8, backend="decord", sampler="content")
    assert decord.backend == "decord" and decord.indices == clip.indices
    assert [clipgen.read_index(f) for f in decord.frames] == clip.indices


def test_clips_without_change_get_exactly_the_uniform_frames(tmp_path):
    scene = long.make_scene(np.random.default_rng([25, 0]), "quiet")
    frames = long.render(replace(scene, events=[]))
    still = short.write_mp4(np.repeat(frames[:1], 200, axis=0), tmp_path / "still.mp4", fps=4)
    moving = short.write_mp4(frames, tmp_path / "moving.mp4", fps=4)  # steady motion is no event
    for path in (still, moving):
        for num_frames in (8, 16):
            clip = sample_frames(path, num_frames, sampler="content")
            assert clip.sampler == "content"
            assert clip.indices == sample_frames(path, num_frames).indices == frame_indices(
                clip.info.total_frames, num_frames)
    # shorter than the budget: repeats exactly as the uniform sampler does
    few = clipgen.write_clip(tmp_path / "few.mp4", n_frames=5)
    assert sample_frames(few, 8, sampler="content").indices == frame_indices(5, 8)


def _scan(n: int, events: list[tuple[int, int, float]]) -> ChangeScan:
    """A scan of n thumbnails at 4 a second: flat grey, plus (start, stop, brightness) events."""
    thumbs = np.full((n, 8, 8), 100.0, dtype=np.float32)
    for start, stop, level in events:
        thumbs[start:stop, 2:6, 2:6] = level
    return ChangeScan(np.arange(n), thumbs, n, 4.0)


def test_one_frame_per_event_the_most_novel_first():
    uniform = frame_indices(240, 8)  # [0, 34, 68, 102, 136, 170, 204, 239]; free: 34, 102, 170
    floor = [0, 68, 136, 204, 239]
    events = [(10, 20, 250.0), (110, 118, 200.0), (150, 160, 180.0), (220, 228, 160.0)]
    chosen = content_indices(_scan(240, events), uniform)
    assert len(chosen) == 8 and set(floor) <= set(chosen)
    moved = [i for i in chosen if i not in floor]
    # three free frames, four events: the three brightest get one frame each, the faintest none
    assert [next(k for k, (a, b, _) in enumerate(events) if a <= i < b) for i in moved] == [0, 1, 2]
    # an event a floor frame already shows needs no second frame
    covered = content_indices(_scan(240, [(60, 75, 250.0)]), uniform)
    assert covered == uniform


def test_unknown_sampler_is_one_clear_error(tmp_path):
    path = clipgen.write_clip(tmp_path / "c.mp4", n_frames=20)
    with pytest.raises(InputError, match="unknown frame sampler 'smart'; choose uniform or content"):
        sample_frames(path, 8, sampler="smart")
    data = json.loads(json.dumps(sample_frames(path, 8, sampler="content").to_dict()))
    assert data["sampler"] == "content"


def test_a_frame_count_the_backend_disagrees_with_falls_back_to_uniform(tmp_path, monkeypatch):
    path = clipgen.write_clip(tmp_path / "c.mp4", n_frames=60)
    real = scan_changes(path)
    monkeypatch.setattr(sample, "scan_changes", lambda p, **kw: replace(real, n_frames=real.n_frames + 1))
    clip = sample_frames(path, 8, sampler="content")
    assert clip.sampler == "uniform" and clip.indices == frame_indices(60, 8)
    assert clip.warnings == ["frames chosen uniformly: the change scan decoded 61 frames, pyav 60"]


def _scan_of_every_frame(path: Path, max_thumbs: int = MAX_THUMBS) -> ChangeScan:
    """The scan as first written (main before issue 37's fast scan): PyAV decodes every frame, each step-th one
    is scaled to a grey thumbnail by its own to_ndarray call, the step doubled whenever too many are held."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        rate = float(stream.average_rate)
        step = max(1, round(rate / SCAN_FPS))
        thumbs, indices, count = [], [], 0
        for frame in container.decode(stream):
            if count % step == 0:
                thumbs.append(frame.to_ndarray(width=THUMB_SIZE, height=THUMB_SIZE, format="gray"))
                indices.append(count)
                if len(thumbs) > max_thumbs:
                    thumbs, indices, step = thumbs[::2], indices[::2], 2 * step
            count += 1
    return ChangeScan(np.asarray(indices), np.stack(thumbs).astype(np.float32), count, rate / step)


@pytest.fixture(scope="module")
def fast_clips(event_clips, tmp_path_factory):
    """The repository's clips, the event clips, and the event clips at 24 frames a second (a thumbnail every 6th
    frame, x264's B frames between: what the fast scan skips)."""
    folder = tmp_path_factory.mktemp("fast")
    quick = [short.write_mp4(long.render(scene), folder / f"{scene.name}-24fps.mp4", fps=24)
             for scene, _ in event_clips[:3]]
    return sorted(SAMPLES.glob("clips*/*.mp4")) + [p for _, p in event_clips] + quick


@pytest.mark.slow
def test_the_fast_scan_chooses_the_frames_a_decode_of_every_frame_chooses(fast_clips):
    skipped = 0
    for path in fast_clips:
        # max_thumbs 20: the step doubles while scanning (the 24 fps clips only, to keep the test short)
        for max_thumbs in (MAX_THUMBS, 20) if path.name.endswith("24fps.mp4") else (MAX_THUMBS,):
            scan, before = scan_changes(path, max_thumbs=max_thumbs), _scan_of_every_frame(path, max_thumbs)
            assert scan.n_frames == before.n_frames and scan.thumbs_per_s == before.thumbs_per_s
            assert np.array_equal(scan.indices, before.indices) and np.array_equal(scan.thumbs, before.thumbs)
            for num_frames in (8, 16, 32):
                uniform = frame_indices(scan.n_frames, num_frames)
                assert content_indices(scan, uniform) == content_indices(before, uniform), (path, num_frames)
            skipped += scan.n_frames - scan.decoded
    moved = 0
    for path in fast_clips[-6:]:  # three 4 fps event clips, three at 24 fps
        before = _scan_of_every_frame(path)
        chosen = sample_frames(path, 8, sampler="content").indices
        assert chosen == content_indices(before, frame_indices(before.n_frames, 8))
        moved += chosen != frame_indices(before.n_frames, 8)
    assert moved >= 2 and skipped > 0  # the 24 fps clips' non-reference frames between thumbnails were not decoded


def test_without_pts_that_name_every_frame_the_scan_decodes_every_frame(fast_clips, monkeypatch):
    monkeypatch.setattr(changes, "_pts_name_frames", lambda probed: False)
    path = fast_clips[-1]
    scan, before = scan_changes(path), _scan_of_every_frame(path)
    assert scan.decoded == scan.n_frames == before.n_frames
    assert np.array_equal(scan.indices, before.indices) and np.array_equal(scan.thumbs, before.thumbs)
