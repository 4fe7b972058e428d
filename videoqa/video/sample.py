"""``sample_frames``: the backend order ("auto" is PyAV, then decord) and the frame sampler (uniform or
content); see the package docstring."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import av

from videoqa.errors import Cancelled, InputError, VideoError
from videoqa.video.changes import SCAN_BUDGET_S, ChangeScan, ScanOverBudget, content_indices, scan_changes
from videoqa.video.clip import DECODE_EDGE, Clip, Pick, frame_indices
from videoqa.video.decord_backend import _sample_decord
from videoqa.video.probe import _BackendFailed, _probe, _Probed, cancel_tick
from videoqa.video.pyav import _sample_pyav
from videoqa.video.samplers import check_sampler

BACKENDS = ("auto", "pyav", "decord")


def _run_backend(name: str, path: Path, num_frames: int, pick: Pick = frame_indices,
                 cancel: Callable[[], bool] | None = None, max_edge: int | None = DECODE_EDGE,
                 probed: _Probed | None = None) -> Clip:
    """One backend, no fallback. Raises VideoError (bad input) or _BackendFailed (could not decode).
    `probed`: the file's demux pass when already made (PyAV reuses it)."""
    if cancel is not None and cancel():
        raise Cancelled("decoding frames")
    try:
        if name == "pyav":
            return _sample_pyav(path, num_frames, pick=pick, cancel=cancel, max_edge=max_edge, probed=probed)
        return _sample_decord(path, num_frames, pick=pick, max_edge=max_edge)
    except (VideoError, _BackendFailed):
        raise
    except av.FFmpegError as e:  # anything FFmpeg raised that the paths above did not expect
        raise _BackendFailed(f"{name} decoding failed ({e.strerror or type(e).__name__})") from e
    except (ValueError, RuntimeError, OSError) as e:  # e.g. a frame format PyAV cannot convert
        raise _BackendFailed(f"{name} decoding failed ({type(e).__name__}: {e})") from e



def _content_pick(changes: ChangeScan, total: int, num_frames: int) -> list[int]:
    """The content sampler's frames; uniform ones when the backend counts other frames than the scan did."""
    uniform = frame_indices(total, num_frames)
    return content_indices(changes, uniform) if total == changes.n_frames else uniform


def sample_frames(path: str | Path, num_frames: int = 8, backend: str = "auto", sampler: str = "uniform",
                  cancel: Callable[[], bool] | None = None, scan_budget_s: float | None = SCAN_BUDGET_S,
                  progress: Callable[[float], None] | None = None, max_edge: int | None = DECODE_EDGE) -> Clip:
    """Sample ``num_frames`` frames over the whole clip (see module docstring).

    ``backend``: "auto" (PyAV, then decord if PyAV cannot decode the file), "pyav" or "decord" (that one
    only). ``sampler``: "uniform" (Video-LLaVA's evenly spaced frames) or "content" (half of them uniform,
    the rest moved to where the video changes, from a pass over the clip that keeps small grey thumbnails; see
    videoqa/video/changes.py). ``Clip.sampler`` says which chose the frames: a content request on a file
    whose decoders disagree on the frame count falls back to uniform, with a warning. Raises VideoError for
    any unusable file, InputError for bad arguments. ``cancel``: asked between frames (PyAV) and before each
    backend and, for the content sampler, between the frames of its change scan; True stops with Cancelled.
    The scan stops after ``scan_budget_s`` seconds (None: never), or as soon as its pace says it would take
    longer, and the frames are then uniform, with a warning saying so; ``progress(fraction)`` follows the scan.
    The demux pass that counts the frames is made once, for the scan and the decoder, and asks ``cancel``.
    Frames are scaled as they are decoded so their shorter side is at most ``max_edge`` pixels (video/clip.py's
    DECODE_EDGE; None: source resolution).
    """
    if backend not in BACKENDS:
        raise InputError(f"unknown video backend {backend!r} (choose from {', '.join(BACKENDS)})")
    check_sampler(sampler)
    if not isinstance(num_frames, int) or num_frames < 1:
        raise InputError(f"num_frames must be a positive integer, got {num_frames!r}")
    path = Path(path)
    pick: Pick = frame_indices
    changes, notice, probed = None, None, None
    if sampler == "content":
        probed = _probe(path, cancel_tick(cancel))  # one demux pass for the scan and the decoder
        try:
            changes = scan_changes(path, cancel=cancel, budget_s=scan_budget_s, progress=progress, probed=probed)
            pick = partial(_content_pick, changes)
        except ScanOverBudget as e:
            notice = f"frames chosen uniformly: {e}"
    order = ["pyav", "decord"] if backend == "auto" else [backend]
    failures = []
    for name in order:
        try:
            clip = _run_backend(name, path, num_frames, pick, cancel, max_edge, probed)
        except _BackendFailed as e:
            failures.append(str(e)[:160])
            continue
        if notice:
            clip.warnings.append(notice)
        elif changes is not None:
            if clip.info.total_frames == changes.n_frames:
                clip.sampler = "content"
            else:
                clip.warnings.append(f"frames chosen uniformly: the change scan decoded {changes.n_frames} frames, "
                                     f"{clip.backend} {clip.info.total_frames}")
        return clip
    raise VideoError(path, "; ".join(failures))
