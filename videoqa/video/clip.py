"""The sampled clip (Clip), Video-LLaVA's uniform frame choice, and the warnings that say what the file
could not give (see the package docstring)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

import numpy as np

from videoqa.video.probe import VideoInfo


def frames_hash(frames: np.ndarray) -> str:
    """A digest of decoded frames' bytes and shape: what their encoding and selections are cached under."""
    return hashlib.sha1(np.ascontiguousarray(frames).data, usedforsecurity=False).hexdigest() + str(frames.shape)


@dataclass
class Clip:
    frames: np.ndarray  # (N, H, W, 3) uint8 RGB
    indices: list[int]  # frame number (0-based, presentation order) of each returned frame
    timestamps: list[float]  # seconds from the first frame, from each frame's pts when known
    info: VideoInfo
    backend: str  # "pyav" or "decord": the one that produced the frames
    rotation: int = 0  # degrees the frames were turned counter-clockwise for display (FFmpeg's convention)
    warnings: list[str] = field(default_factory=list)  # what the file could not give (see module docstring)
    sampler: str = "uniform"  # how the frames were chosen: "uniform" or "content" (see sample_frames)

    @cached_property
    def frames_key(self) -> str:
        """frames_hash of this clip's frames, hashed once: every question about a cached clip looks it up."""
        return frames_hash(self.frames)

    @property
    def distinct_frames(self) -> int:
        """How many different frames of the file the sampled frames are (repeats counted once)."""
        return len(set(self.indices))

    def subsample(self, num_frames: int) -> Clip:
        """`num_frames` of this clip's frames, evenly spaced as `frame_indices` places them in a file."""
        pick = frame_indices(len(self.frames), num_frames)
        return replace(self, frames=self.frames[pick], indices=[self.indices[i] for i in pick],
                       timestamps=[self.timestamps[i] for i in pick])

    def to_dict(self) -> dict:
        """JSON-able summary (no pixel data)."""
        return {
            "indices": list(self.indices),
            "timestamps": [round(t, 6) for t in self.timestamps],
            "backend": self.backend,
            "sampler": self.sampler,
            "frame_shape": list(self.frames.shape),
            "distinct_frames": self.distinct_frames,
            "rotation": self.rotation,
            "warnings": list(self.warnings),
            "info": asdict(self.info),
        }



def frame_indices(total_frames: int, num_frames: int) -> list[int]:
    """Frame numbers to sample: ``np.linspace(0, total_frames - 1, num_frames, dtype=int)``.

    Floors like the original Video-LLaVA code. With fewer frames than ``num_frames`` some repeat.
    """
    if total_frames < 1:
        raise ValueError(f"total_frames must be >= 1, got {total_frames}")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    return [int(i) for i in np.linspace(0, total_frames - 1, num_frames, dtype=int)]



Pick = Callable[[int, int], list[int]]  # (frames in the file, frames wanted) -> frame numbers, ascending

# Decoded frames are never held at source resolution: an 8K frame is 100 MB, 58 of them 5.8 GB, for a vision
# tower that looks at 224 x 224. Each frame is scaled as it is decoded so its shorter side is at most this many
# pixels (the pipeline passes max(this, its processor's shortest edge)); 448 keeps the web page's frames and
# heatmaps legible and is twice what Video-LLaVA's processor uses. The rule for every decoder of videoqa.
DECODE_EDGE = 448


def decode_size(width: int, height: int, max_edge: int | None) -> tuple[int, int]:
    """(width, height) a frame is decoded at: unchanged when its shorter side is at most `max_edge` (None: no
    bound), else scaled to that shorter side, the aspect ratio kept (sides rounded to even pixels, as the
    scaler wants)."""
    if max_edge is None or min(width, height) <= max_edge:
        return width, height
    scale = max_edge / min(width, height)
    return max(2, 2 * round(width * scale / 2)), max(2, 2 * round(height * scale / 2))


def _loss(declared: float | None, read: float | None, gap: tuple[float, float] | None, fps: float,
          packets: int, decoded: int | None) -> str | None:
    """Why frames of the file are missing from what was decoded, or None. `decoded` is None when not every
    frame was decoded (the seeking path)."""
    # tolerance: headers round, and a last frame's duration may be missing
    if declared and read is not None and declared - read > max(0.1 * declared, 2 / fps if fps else 0.0):
        return (f"the file declares {declared:.1f} s of video but only {read:.1f} s could be read "
                "(truncated or corrupt data)")
    if gap is not None:
        return f"no frames for {gap[1]:.1f} s after {gap[0]:.1f} s (corrupt data skipped)"
    if decoded is not None and decoded < packets:
        return f"{packets - decoded} of {packets} frames could not be decoded (corrupt data)"
    return None


def _warnings(loss: str | None, frames_in_file: int, wanted: list[int]) -> list[str]:
    """The clip's warnings: frames lost, with the distinct frames left when that made them fewer than asked;
    or a single image. A short clip read whole is no warning."""
    distinct, asked = len(set(wanted)), len(wanted)
    if loss is not None:
        if distinct < asked:
            return [loss, f"only {distinct} distinct frame{'s' if distinct > 1 else ''} for the {asked} asked: "
                          "frames repeat"]
        return [loss]
    if frames_in_file == 1:
        what = "a single image, not a video"
        return [what if asked == 1 else f"{what}: all {asked} frames are the same picture"]
    return []

