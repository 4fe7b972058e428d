"""Content-aware frame choice: spend part of the frame budget where the video changes.

Uniform sampling at 8 frames is blind between its frames: on a 60 s clip they are 8.5 s apart, so a 1-3 s
event is missed most of the time. This sampler starts from the uniform frames and moves some of them onto
moments that look unlike their surroundings, from a cheap pass over low-resolution grey thumbnails
(``ChangeScan``, made by ``scan_changes``):

1. Novelty of each thumbnail: its mean absolute difference, in grey levels, from the pixel-wise median of
   the thumbnails within ``WINDOW_S / 2`` seconds either side. The median is what the video shows around
   that moment, so an event shorter than half the window stands out over its whole length (a plain
   difference of consecutive frames marks only its start and end, and the end spike sits outside it).
   The clip's median novelty is subtracted (steady motion, a pan, a moving object are "usual"), and what
   is left under ``NOISE`` grey levels counts as no change.
2. The uniform floor: every ``FLOOR_EVERY``-th of the F uniform frames, and the last, stay where they
   are (5 of 8 frames at the default 2), so no stretch of the clip is longer without a frame than
   ``FLOOR_EVERY`` uniform spacings.
3. The other frames go, most novel first, to frames of changed stretches (runs of thumbnails above
   noise) that no chosen frame explains yet; a chosen frame explains the rest of its run within
   ``WINDOW_S / 2`` seconds, so one brief event gets one frame and a long busy stretch one per half-window.
   Each moved frame replaces the still-uniform free frame nearest to it; free frames with nothing to move
   to keep their uniform places, so a clip without change gets exactly the uniform frames.

Everything is deterministic: ties go to the earlier frame.

The scan is a long step (a frame that later frames are predicted from must be decoded whole: ~1.3 ms per
1080p frame, minutes for a film), so, as every long step of videoqa: it asks ``cancel`` between packets (the web
chat's Stop), reports its progress (``progress(fraction)``), and gives up after ``budget_s`` seconds with
``ScanOverBudget``, after which the caller takes uniform frames with a one-line notice. The demux pass that
counts the frames first asks ``cancel`` too; it is within the budget when the scan makes it (``sample_frames``
makes it once for the scan and the decoder, outside the budget: uniform frames need it as well). The scan gives
up as soon as its pace says
it would run over: once ``PACE_AFTER`` of the budget has gone on decoding, the time spent plus the rest of the clip
at the pace so far is its projection (issue 37's 20-minute 1080p clip gave up after 2.1-3.3 s instead of 20 s; the
uniform frames that follow cost the same either way). It does no more work
than the thumbnails need, and the thumbnails are the ones a plain decode of every frame gives (so the same
frames are chosen; tests/test_content_sampler.py compares with that decode):

* one swscale context scales every thumbnail straight from the decoder's planes (a new context per frame cost
  ~10 ms at 1080p, more than decoding the frame);
* when the demuxed pts name every frame (the rule the PyAV backend seeks by), a frame that is no thumbnail and
  that no other frame is predicted from (an H.264/HEVC non-reference B frame) is not decoded at all
  (FFmpeg's skip_frame=NONREF, set per packet). Reference frames are decoded in full: skipping their
  deblocking filter was 1.6x faster but moved 8 of 54 frame choices on the long clips.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from videoqa.errors import Cancelled, VideoError, VideoQAError
from videoqa.video.probe import _probe, _Probed, _pts_name_frames
from videoqa.video.pyav import _frames, _open_stream

FLOOR_EVERY = 2  # every FLOOR_EVERY-th uniform frame (and the last) stays: the floor
WINDOW_S = 8.0  # seconds of context a thumbnail is compared with (half before, half after)
NOISE = 2.0  # grey levels (0-255) of mean absolute difference that count as no change
SCAN_FPS = 4.0  # thumbnails per second of video in the scan (fewer on very long clips)
THUMB_SIZE = 32  # thumbnails are THUMB_SIZE x THUMB_SIZE grey pixels
MAX_THUMBS = 4096  # the scan halves its rate whenever it would hold more (bounded memory and time)
SCAN_BUDGET_S = 20.0  # seconds the scan may take; then uniform frames (a 20-minute 1080p clip took 39 s)
PACE_AFTER = 0.1  # share of the budget spent decoding after which the scan's pace may end it early


class ScanOverBudget(VideoQAError):
    """The change scan ran past its time budget (the caller falls back to uniform frames)."""


@dataclass
class ChangeScan:
    """Low-resolution grey thumbnails of every ``step``-th decoded frame."""

    indices: np.ndarray  # (K,) frame number of each thumbnail, ascending, starting at 0
    thumbs: np.ndarray  # (K, THUMB_SIZE, THUMB_SIZE) float32 grey levels
    n_frames: int  # frames in the clip (as a decode of every frame counts them)
    thumbs_per_s: float  # thumbnails per second of video
    decoded: int = 0  # frames the decoder gave (fewer than n_frames when non-reference frames were skipped)


def novelty(thumbs: np.ndarray, half_window: int) -> np.ndarray:
    """Per thumbnail: mean |thumb - pixel-wise median of the thumbnails within half_window either side|."""
    out = np.empty(len(thumbs), dtype=np.float32)
    for k in range(len(thumbs)):
        context = thumbs[max(0, k - half_window): k + half_window + 1]
        out[k] = np.abs(thumbs[k] - np.median(context, axis=0)).mean()
    return out


def change_peaks(scan: ChangeScan, covered: list[int], n_peaks: int) -> list[int]:
    """Up to ``n_peaks`` frame numbers at the most novel moments that the ``covered`` frames do not explain."""
    if n_peaks <= 0 or len(scan.thumbs) < 2:
        return []
    half = max(1, round(WINDOW_S / 2 * scan.thumbs_per_s))
    raw = novelty(scan.thumbs, half)
    score = raw - np.median(raw)
    active = score > NOISE
    run = np.cumsum(np.diff(active.astype(int), prepend=0) == 1)  # run number; only read where active
    explained = np.zeros(len(score), dtype=bool)

    def explain(k: int) -> None:
        if active[k]:
            near = np.zeros_like(explained)
            near[max(0, k - half): k + half + 1] = True
            explained[near & active & (run == run[k])] = True

    step = int(scan.indices[1] - scan.indices[0])
    for frame in covered:
        explain(min(len(score) - 1, round(frame / step)))
    peaks: list[int] = []
    while len(peaks) < n_peaks:
        candidates = np.where(active & ~explained, score, -np.inf)
        k = int(np.argmax(candidates))  # the first of equal scores
        if not np.isfinite(candidates[k]):
            break
        peaks.append(int(scan.indices[k]))
        explain(k)
    return peaks


def content_indices(scan: ChangeScan, uniform: list[int], floor_every: int = FLOOR_EVERY) -> list[int]:
    """The ``uniform`` frame numbers (ascending, over ``scan.n_frames`` frames) with the free ones moved to
    where the video changes (see module docstring). Returns as many frame numbers, ascending."""
    n = len(uniform)
    if n < 3 or len(set(uniform)) < n:  # too few frames to spare any, or a clip shorter than the budget
        return list(uniform)
    floor_slots = {*range(0, n, floor_every), n - 1}
    floor = [uniform[i] for i in sorted(floor_slots)]
    free = [uniform[i] for i in range(n) if i not in floor_slots]
    peaks = change_peaks(scan, floor, len(free))
    for p in peaks:
        free.pop(min(range(len(free)), key=lambda j: (abs(free[j] - p), j)))
    return sorted(floor + peaks + free)


def scan_step(rate: float, thumbs_per_s: float, n_frames: int, max_thumbs: int) -> int:
    """Every step-th frame is thumbnailed: about ``thumbs_per_s`` a second of video, the step doubled until at
    most ``max_thumbs`` thumbnails are held (what the scan without a frame count reaches by halving)."""
    step = max(1, round(rate / thumbs_per_s))
    while -(-n_frames // step) > max_thumbs:
        step *= 2
    return step


def scan_changes(path: str | Path, thumbs_per_s: float = SCAN_FPS, size: int = THUMB_SIZE,
                 max_thumbs: int = MAX_THUMBS, cancel: Callable[[], bool] | None = None,
                 budget_s: float | None = SCAN_BUDGET_S, progress: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, probed: _Probed | None = None) -> ChangeScan:
    """A ``size`` x ``size`` grey thumbnail of every step-th frame, the step chosen for about ``thumbs_per_s``
    thumbnails a second of video and doubled whenever more than ``max_thumbs`` would be held. Raises VideoError
    for an unusable file, Cancelled when ``cancel()`` says so, ScanOverBudget past ``budget_s`` seconds (None:
    no budget). ``progress`` gets the fraction of the clip scanned, about once a second of video. Non-reference
    frames between thumbnails are skipped when the demuxed pts name every frame (see module docstring).
    ``probed``: the file's demux pass when the caller has made it (sample_frames shares it with the backend);
    else the scan makes it, within its budget."""
    path = Path(path)
    budget = _Budget(budget_s, clock, clock())

    def tick(packets: int) -> None:  # the demux pass: Stop, and the budget (it has no pace to project yet)
        if cancel is not None and cancel():
            raise Cancelled("reading the file's index")
        budget.check(0, None, f"reading the file's index, {packets} packets in")

    probed = probed or _probe(path, tick)
    pts = probed.scan.pts if _pts_name_frames(probed) else None
    args = (path, thumbs_per_s, size, max_thumbs, cancel, budget, progress)
    scan = _scan_skipping(*args, pts) if pts else None
    return scan if scan is not None else _scan_every_frame(*args)


@dataclass
class _Budget:
    """The scan's time budget (see module docstring); `budget_s` None: no budget."""

    budget_s: float | None
    clock: Callable[[], float]
    start: float  # clock() when the scan began, before its demux pass
    decoding: float | None = None  # clock() when decoding began

    def begin_decoding(self) -> None:
        self.decoding = self.clock()

    def check(self, done: int, total: int | None, where: str | None = None) -> None:
        """ScanOverBudget once the scan has run `budget_s` seconds, or once its pace projects it past them;
        `done`: frames of the clip got through (skipped ones included) of `total` (None or 0: unknown)."""
        if self.budget_s is None:
            return
        now = self.clock()
        spent = now - self.start
        if spent > self.budget_s:
            raise ScanOverBudget(f"the change scan took over {self.budget_s:g} s ({where or f'{done} frames read'})")
        decoding = None if self.decoding is None else now - self.decoding
        if done > 0 and total and decoding is not None and decoding >= PACE_AFTER * self.budget_s:
            projected = spent + decoding * (total - done) / done
            if projected > self.budget_s:
                raise ScanOverBudget(f"the change scan would take about {projected:.0f} s, over its "
                                     f"{self.budget_s:g} s budget ({done} of {total} frames read in {spent:.1f} s)")


def _rate(stream) -> float | None:
    return float(stream.average_rate or stream.guessed_rate or 0) or None


def _scan_skipping(path: Path, thumbs_per_s: float, size: int, max_thumbs: int,
                   cancel: Callable[[], bool] | None, budget: _Budget,
                   progress: Callable[[float], None] | None, pts: list[int]) -> ChangeScan | None:
    """The scan when ``pts`` (sorted) names every frame: frame k is the one whose pts is pts[k]. Returns None
    when the decoder gives a frame those pts do not name, or misses a thumbnail (the caller then decodes every
    frame)."""
    number = {p: k for k, p in enumerate(pts)}
    n = len(pts)
    scaler = VideoReformatter()
    thumbs: dict[int, np.ndarray] = {}
    container, stream = _open_stream(path)
    with container:
        rate = _rate(stream) or thumbs_per_s
        step = scan_step(rate, thumbs_per_s, n, max_thumbs)
        context = stream.codec_context

        def choose(packet: av.Packet) -> None:  # read by FFmpeg when this packet is sent to the decoder
            k = number.get(packet.pts)
            context.skip_frame = "NONREF" if k is not None and k % step else "DEFAULT"

        every, check, decoded = max(1, round(rate)), 0, 0
        budget.begin_decoding()
        try:
            for frame in _frames(container, stream, cancel, before=choose):
                k = number.get(frame.pts)
                if k is None:
                    return None
                decoded += 1
                if k >= check:
                    budget.check(k, n)  # frames of the clip got through, skipped ones included
                    if progress is not None:
                        progress(k / n)
                    check = k + every
                if k % step == 0:
                    thumbs[k] = _thumb(scaler, frame, size)
        except (av.FFmpegError, ValueError) as e:  # e.g. a frame format swscale cannot convert
            raise VideoError(path, f"could not scan the frames for changes ({e})") from e
    indices = list(range(0, n, step))
    if len(thumbs) != len(indices):
        return None
    if progress is not None:
        progress(1.0)
    return ChangeScan(np.asarray(indices), np.stack([thumbs[k] for k in indices]).astype(np.float32), n,
                      rate / step, decoded)


def _thumb(scaler: VideoReformatter, frame: av.VideoFrame, size: int) -> np.ndarray:
    return scaler.reformat(frame, width=size, height=size, format="gray").to_ndarray()


def _scan_every_frame(path: Path, thumbs_per_s: float, size: int, max_thumbs: int,
                      cancel: Callable[[], bool] | None, budget: _Budget,
                      progress: Callable[[float], None] | None) -> ChangeScan:
    """The scan when the frames can only be counted as they are decoded: every frame is decoded."""
    scaler = VideoReformatter()
    container, stream = _open_stream(path)
    with container:
        rate = _rate(stream) or thumbs_per_s
        expected = stream.frames or (float(stream.duration * stream.time_base) * rate
                                     if stream.duration and stream.time_base else 0)
        step = max(1, round(rate / thumbs_per_s))
        thumbs, indices, count = [], [], 0
        budget.begin_decoding()
        try:
            for frame in _frames(container, stream, cancel):
                if count % max(1, round(rate)) == 0:
                    budget.check(count, round(expected))
                    if progress is not None and expected:
                        progress(min(1.0, count / expected))
                if count % step == 0:
                    thumbs.append(_thumb(scaler, frame, size))
                    indices.append(count)
                    if len(thumbs) > max_thumbs:
                        thumbs, indices, step = thumbs[::2], indices[::2], 2 * step
                count += 1
        except (av.FFmpegError, ValueError) as e:  # e.g. a frame format swscale cannot convert
            raise VideoError(path, f"could not scan the frames for changes ({e})") from e
    if count == 0:
        raise VideoError(path, "no decodable video frame (truncated or corrupt file)")
    if progress is not None:
        progress(1.0)
    return ChangeScan(np.asarray(indices), np.stack(thumbs).astype(np.float32), count, rate / step, count)
