"""Frame sampling on clips whose frames encode their own index (tests/helpers/clipgen.py) and on real clips."""

from __future__ import annotations

import json
import re
import time
import tracemalloc

import av
import numpy as np
import pytest
from conftest import SAMPLE_CLIPS
from helpers import clipgen  # tests/ is on sys.path under pytest's default (prepend) import mode

from videoqa.errors import InputError, VideoError
from videoqa.video import decord_backend, frame_indices, probe, probe_video, pyav, sample, sample_frames

FPS = 10


def expected_indices(n: int, k: int) -> list[int]:
    """Exact rational version of linspace(0, n-1, k) floored, computed with integers."""
    return [0] * k if k == 1 else [i * (n - 1) // (k - 1) for i in range(k)]


def read_all(clip) -> list[int]:
    return [clipgen.read_index(f) for f in clip.frames]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return tmp_path_factory.mktemp("clips")


# ---------------------------------------------------------------------------------------------- indices


def test_frame_indices_match_integer_formula():
    for n in range(1, 400):
        for k in (1, 2, 3, 8, 16):
            assert frame_indices(n, k) == expected_indices(n, k), (n, k)


def test_frame_indices_short_clip_repeats_and_bad_args():
    assert frame_indices(3, 8) == [0, 0, 0, 0, 1, 1, 1, 2]
    assert frame_indices(1, 4) == [0, 0, 0, 0]
    assert frame_indices(146, 8) == [0, 20, 41, 62, 82, 103, 124, 145]  # Video-LLaVA's floor, not round
    with pytest.raises(ValueError):
        frame_indices(0, 8)
    with pytest.raises(ValueError):
        frame_indices(10, 0)


# ---------------------------------------------------------------------------------------------- formats

# h264 needs even sizes; the others get an odd 97x61 or odd portrait 61x97.
FORMAT_SIZES = {
    "mp4-h264": (62, 98),
    "mp4-mpeg4": (97, 61),
    "avi-mpeg4": (61, 97),
    "mkv-h264": (64, 48),
    "webm-vp8": (97, 61),
    "webm-vp9": (61, 97),
    "mov-h264": (62, 98),
    "gif": (97, 61),
}


@pytest.mark.parametrize("fmt", list(clipgen.FORMATS))
@pytest.mark.parametrize("backend", ["pyav", "decord"])
def test_every_format_samples_the_right_frames(clips, fmt, backend):
    suffix = clipgen.FORMATS[fmt][0]
    path = clips / f"{fmt}{suffix}"
    if not path.exists():
        clipgen.write_clip(path, n_frames=37, size=FORMAT_SIZES[fmt], fps=FPS, fmt=fmt)
    width, height = FORMAT_SIZES[fmt]
    if backend == "decord" and fmt == "gif":
        with pytest.raises(VideoError, match="decord"):
            sample_frames(path, 8, backend="decord")
        return
    clip = sample_frames(path, 8, backend=backend)
    want = expected_indices(37, 8)
    assert clip.backend == backend
    assert clip.indices == want
    assert read_all(clip) == want
    assert clip.frames.dtype == np.uint8 and clip.frames.shape == (8, height, width, 3)
    assert all(clipgen.is_rgb(f) for f in clip.frames)
    assert clip.timestamps == pytest.approx([i / FPS for i in want], abs=1e-3)
    info = clip.info
    assert (info.total_frames, info.width, info.height) == (37, width, height)
    assert info.fps == pytest.approx(FPS, rel=1e-3)
    assert info.duration_s == pytest.approx(37 / FPS, abs=0.02)
    assert info.container == suffix[1:]
    assert probe_video(path) == info
    assert clip.distinct_frames == 8 and clip.warnings == [] and clip.rotation == 0


def test_auto_is_pyav_and_deterministic(clips):
    path = clipgen.write_clip(clips / "det.webm", n_frames=25, fmt="webm-vp8")
    a, b = sample_frames(path), sample_frames(path)
    assert a.backend == "pyav"
    assert a.indices == b.indices and a.timestamps == b.timestamps
    assert np.array_equal(a.frames, b.frames)
    data = json.loads(json.dumps(a.to_dict()))
    assert data["indices"] == a.indices and data["frame_shape"] == [8, 48, 64, 3]
    assert data["info"]["total_frames"] == 25 and "frames" not in data


def test_seeking_path_matches_in_order_decoding(clips):
    path = clipgen.write_clip(clips / "gop.mp4", n_frames=240, gop=12)
    with probe._open(path) as container:
        scan = probe._scan(container, container.streams.video[0])
    assert len(scan.key_pts) >= 10  # several keyframes: the seeking path is taken
    want = expected_indices(240, 8)
    assert pyav._decode_seeking(path, scan, want) is not None
    seek = pyav._sample_pyav(path, 8, allow_seek=True)
    linear = pyav._sample_pyav(path, 8, allow_seek=False)
    assert seek.indices == linear.indices == want
    assert read_all(seek) == want
    assert np.array_equal(seek.frames, linear.frames)
    assert seek.timestamps == linear.timestamps


def test_only_sampled_frames_are_held_in_memory(clips):
    path = clipgen.write_clip(clips / "long.mp4", n_frames=300, size=(128, 96))
    frame_bytes = 128 * 96 * 3
    tracemalloc.start()
    clip = sample_frames(path, 8)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert read_all(clip) == expected_indices(300, 8)
    assert peak < 40 * frame_bytes  # the whole clip would be 300 frames


# ---------------------------------------------------------------------------------------------- odd clips


def test_variable_frame_rate_timestamps(clips):
    gaps = [20, 80, 20, 180, 20, 80, 20, 80, 20, 300, 20, 40]
    pts_ms = list(np.cumsum([0, *gaps]))
    for suffix, fmt in ((".mp4", "mp4-h264"), (".mkv", "mkv-h264")):
        path = clipgen.write_clip(clips / f"vfr{suffix}", n_frames=len(pts_ms), pts_ms=pts_ms, fmt=fmt)
        want = expected_indices(len(pts_ms), 8)
        for backend in ("pyav", "decord"):
            clip = sample_frames(path, 8, backend=backend)
            assert clip.indices == want and read_all(clip) == want
            assert clip.timestamps == pytest.approx([pts_ms[i] / 1000 for i in want], abs=1e-3)
            assert clip.info.fps == pytest.approx((len(pts_ms) - 1) / (pts_ms[-1] / 1000), rel=1e-3)
            assert clip.warnings == []  # uneven gaps are not lost frames


def test_wrong_header_count_uses_real_frames(clips):
    path = clipgen.write_avi_wrong_count(clips / "wrong.avi", n_frames=20, claimed=500)
    with av.open(str(path)) as c:
        assert c.streams.video[0].frames == 500  # the header really lies
    assert probe_video(path).total_frames == 20
    for backend in ("pyav", "decord"):
        clip = sample_frames(path, 8, backend=backend)
        assert clip.info.total_frames == 20
        assert clip.indices == expected_indices(20, 8) and read_all(clip) == clip.indices


def test_truncated_tail_samples_decodable_frames(clips):
    path = clipgen.write_truncated(clips / "tail.mp4", keep_fraction=0.5, n_frames=40)
    with av.open(str(path)) as c:
        assert c.streams.video[0].frames == 40
    clip = sample_frames(path, 8)
    total = clip.info.total_frames
    assert 1 < total < 40
    assert clip.indices == expected_indices(total, 8)
    assert read_all(clip) == clip.indices
    assert "declares 4.0 s of video but only" in clip.warnings[0]
    assert clip.warnings[1:] == ([] if total >= 8 else [f"only {total} distinct frames for the 8 asked: frames repeat"])


def test_decord_narrow_frame_bug_is_an_error_not_wrong_frames(clips):
    # decord 0.6 pads 48-px-wide frames to 64 and then fails its own copy check; auto (PyAV) is fine.
    path = clipgen.write_clip(clips / "narrow.mp4", n_frames=12, size=(48, 64))
    with pytest.raises(VideoError, match="decord failed"):
        sample_frames(path, 4, backend="decord")
    clip = sample_frames(path, 4)
    assert clip.backend == "pyav" and read_all(clip) == expected_indices(12, 4)
    assert clip.frames.shape == (4, 64, 48, 3)


def test_short_clip_repeats_frames(clips):
    path = clipgen.write_clip(clips / "three.mp4", n_frames=3)
    for backend in ("pyav", "decord"):
        clip = sample_frames(path, 8, backend=backend)
        assert clip.indices == [0, 0, 0, 0, 1, 1, 1, 2]
        assert read_all(clip) == clip.indices
        assert len(clip.frames) == 8 and np.array_equal(clip.frames[0], clip.frames[3])
        assert clip.timestamps == pytest.approx([i / FPS for i in clip.indices], abs=1e-3)
        # 3 distinct frames, said so; the whole clip was read, so repeating them is no warning
        assert clip.distinct_frames == 3 and clip.warnings == []


# ---------------------------------------------------------------------------------------------- bad input


BAD = {
    "missing.mp4": (lambda p: p, "file not found"),
    "empty.mp4": (clipgen.write_empty, "empty file"),
    "text.mp4": (clipgen.write_text, "not a video"),
    "audio.mp4": (clipgen.write_audio_only, "no video stream"),
    "cut.mp4": (clipgen.write_truncated, "no decodable video frame"),
    "headless.mp4": (clipgen.write_headless, "corrupt container"),
    "unknown.avi": (clipgen.write_unknown_codec, "unsupported video codec"),
    "folder.mp4": (lambda p: p.mkdir() or p, "not a regular file"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_raises_video_error(tmp_path, name):
    make, reason = BAD[name]
    path = tmp_path / name
    make(path)
    for backend in ("auto", "pyav", "decord"):
        with pytest.raises(VideoError) as err:
            sample_frames(path, 8, backend=backend)
        message = str(err.value)
        assert name in message and reason in message and "\n" not in message
        assert err.value.path == str(path)
    if name != "cut.mp4":  # a cut file still has a valid header: probing does not decode
        with pytest.raises(VideoError, match=reason):
            probe_video(path)


def test_bad_arguments_raise_input_error(clips):
    path = clipgen.write_clip(clips / "args.mp4", n_frames=5)
    with pytest.raises(InputError):
        sample_frames(path, 0)
    with pytest.raises(InputError):
        sample_frames(path, 8, backend="opencv")


# ---------------------------------------------------------------------------------------------- fallback


def test_auto_falls_back_to_decord(clips, monkeypatch):
    path = clipgen.write_clip(clips / "fallback.mp4", n_frames=20)

    def broken(*args, **kwargs):
        raise probe._BackendFailed("pyav exploded")

    monkeypatch.setattr(sample, "_sample_pyav", broken)  # what sample_frames calls
    clip = sample_frames(path, 8)
    assert clip.backend == "decord" and read_all(clip) == expected_indices(20, 8)
    with pytest.raises(VideoError, match="pyav exploded"):
        sample_frames(path, 8, backend="pyav")


def test_hung_call_becomes_error():
    start = time.perf_counter()
    with pytest.raises(probe._BackendFailed, match="did not finish"):
        decord_backend._run_with_timeout(lambda: time.sleep(3), timeout_s=0.2)
    assert time.perf_counter() - start < 2


# ---------------------------------------------------------------------------------------------- real media


@pytest.mark.parametrize("path", [*SAMPLE_CLIPS, "generated"], ids=lambda p: getattr(p, "name", p))
def test_backends_agree_on_real_clips(tmp_path, path):
    if path == "generated":  # longer than the samples, with a keyframe only every 30 frames: seeking matters
        path = clipgen.write_clip(tmp_path / "long_gop.mp4", n_frames=150, size=(160, 96), fps=FPS, gop=30)
    a = sample_frames(path, 8, backend="pyav")
    b = sample_frames(path, 8, backend="decord")
    with av.open(str(path)) as c:
        n = c.streams.video[0].frames
    assert a.indices == b.indices == expected_indices(n, 8)
    assert a.info.total_frames == b.info.total_frames == n
    assert a.timestamps == pytest.approx(b.timestamps, abs=1e-3)
    assert a.frames.shape == b.frames.shape
    diff = np.abs(a.frames.astype(np.int16) - b.frames.astype(np.int16)).mean()
    assert diff < 2.0  # same FFmpeg decoder; only colour conversion may differ
    # consecutive sampled frames differ, so a mix-up of frames would not pass the check above
    assert np.abs(a.frames[0].astype(np.int16) - a.frames[-1].astype(np.int16)).mean() > 2.0


def test_gif_is_sampled_with_pyav(tmp_path):
    path = clipgen.write_clip(tmp_path / "moving.gif", n_frames=23, size=(97, 61), fps=FPS, fmt="gif")
    clip = sample_frames(path, 8)
    with av.open(str(path)) as c:
        decoded = sum(1 for _ in c.decode(video=0))
    assert clip.backend == "pyav" and clip.info.total_frames == decoded
    assert clip.indices == expected_indices(decoded, 8)
    assert clip.timestamps == pytest.approx([i / clip.info.fps for i in clip.indices], abs=1e-3)


# ---------------------------------------------------------------------------------------------- what was read


def test_corrupt_file_answered_from_one_frame_says_so(clips):
    """2 KB of garbage after the first frame: one frame survives. It is still sampled (8 copies), but the
    clip says how many distinct frames it holds and warns that the rest of the file could not be read."""
    path = clipgen.write_corrupt(clips / "garbage.mkv", after_packets=1)
    with av.open(str(path)) as c:
        assert c.duration / av.time_base == pytest.approx(4.8)  # the header still declares 48 frames
    clip = sample_frames(path, 8)
    assert clip.indices == [0] * 8 and read_all(clip) == [0] * 8
    assert clip.distinct_frames == 1
    assert len(clip.warnings) == 2, clip.warnings
    lost, repeated = clip.warnings
    assert "declares 4.8 s of video but only 0.1 s could be read" in lost and "corrupt" in lost
    assert "1 distinct frame" in repeated and "8" in repeated
    assert clip.to_dict()["distinct_frames"] == 1 and clip.to_dict()["warnings"] == clip.warnings


def test_corrupt_file_with_enough_frames_still_warns(clips):
    """16 frames readable of 48: 8 distinct frames are sampled from the first third, which is not the clip."""
    path = clipgen.write_corrupt(clips / "garbage16.mkv", after_packets=16)
    clip = sample_frames(path, 8)
    assert clip.distinct_frames == 8
    assert len(clip.warnings) == 1 and "declares 4.8 s of video but only" in clip.warnings[0]


@pytest.mark.parametrize("fmt,reason", [
    ("mkv-h264", r"no frames for \d+\.\d s after \d+\.\d s \(corrupt data skipped\)"),
    ("mp4-h264", r"\d+ of 240 frames could not be decoded \(corrupt data\)"),
], ids=["mkv", "mp4"])
def test_frames_lost_mid_file_are_reported(clips, fmt, reason):
    """Garbage in the middle of a longer clip: the Matroska demuxer skips to the next cluster (a hole in
    the timestamps), the H.264 decoder rejects damaged mp4 frames (fewer frames than packets)."""
    path = clipgen.write_corrupt(clips / f"hole{clipgen.FORMATS[fmt][0]}", fmt=fmt, n_frames=240, size=(160, 120),
                                 fraction=0.5)
    clip = sample_frames(path, 8, backend="pyav")
    assert clip.info.total_frames < 240 and clip.distinct_frames == 8
    assert len(clip.warnings) == 1 and re.fullmatch(reason, clip.warnings[0]), clip.warnings


@pytest.mark.parametrize("kind", ["gif", "png-as-mp4", "mp4"])
def test_single_frame_inputs_are_flagged(clips, kind):
    if kind == "gif":
        path = clipgen.write_clip(clips / "still.gif", n_frames=1, fmt="gif")
    elif kind == "mp4":
        path = clipgen.write_clip(clips / "still.mp4", n_frames=1)
    else:
        path = clipgen.write_png(clips / "picture.mp4")
    clip = sample_frames(path, 8)
    assert clip.distinct_frames == 1 and len(clip.frames) == 8
    assert clip.warnings == ["a single image, not a video: all 8 frames are the same picture"]
    assert sample_frames(path, 1).warnings == ["a single image, not a video"]


# ---------------------------------------------------------------------------------------------- rotation


def upright(frame: np.ndarray, size: tuple[int, int]) -> bool:
    """The pattern as drawn: (width, height) = size, red strip on top, bars readable."""
    return frame.shape[:2] == size[::-1] and clipgen.is_rgb(frame)


@pytest.mark.parametrize("fmt", ["mp4-h264", "mov-h264", "mkv-h264"])
@pytest.mark.parametrize("degrees", [90, -90, 180, 270])
def test_display_rotation_is_applied(clips, fmt, degrees):
    """Frames stored turned, with a display matrix that turns them back: every backend returns what a
    player shows. decord applies some matrices itself, garbles others (90 degrees) and ignores mkv's, so a
    rotated clip asked of decord is decoded by PyAV (and Clip.backend says so)."""
    size = (64, 48)
    path = clipgen.write_rotated(clips / f"rot{degrees}{clipgen.FORMATS[fmt][0]}", degrees, fmt=fmt, size=size)
    want = expected_indices(12, 4)
    for backend in ("auto", "pyav", "decord"):
        clip = sample_frames(path, 4, backend=backend)
        assert clip.backend == "pyav"
        assert all(upright(f, size) for f in clip.frames), (backend, clip.frames.shape)
        assert read_all(clip) == want
        assert clip.rotation % 360 == degrees % 360


def test_rotation_on_the_seeking_path(clips):
    """Several keyframes: frames are fetched by seeking, and come out upright too."""
    path = clipgen.write_rotated(clips / "rot_gop.mp4", 90, n_frames=40, gop=5)
    clip = sample_frames(path, 8)
    assert pyav._sample_pyav(path, 8).indices == clip.indices  # (the seeking path is the one taken)
    assert all(upright(f, (64, 48)) for f in clip.frames) and read_all(clip) == expected_indices(40, 8)


def test_phone_portrait_matrix_from_the_spec(clips):
    """A track header matrix written byte by byte (ISO/IEC 14496-12, "turn 90 degrees clockwise"), as a
    phone held upright writes it: the frames come out portrait and upright for both backends."""
    path = clipgen.write_phone_portrait(clips / "phone.mp4", size=(48, 64))
    with av.open(str(path)) as c:
        stored = next(c.decode(video=0))
        assert (stored.width, stored.height) == (64, 48)  # stored landscape
    for backend in ("pyav", "decord"):
        clip = sample_frames(path, 4, backend=backend)
        assert all(upright(f, (48, 64)) for f in clip.frames), backend
        assert read_all(clip) == expected_indices(12, 4)
        assert clip.rotation == -90  # FFmpeg's counter-clockwise angle: -90 is a quarter turn clockwise
    assert (probe_video(path).width, probe_video(path).height) == (64, 48)  # the stored size, as documented
