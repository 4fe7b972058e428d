"""Frame sampling: N frames spread uniformly over a whole clip, as Video-LLaVA was trained.

Indices are ``np.linspace(0, n - 1, N, dtype=int)`` — the original Video-LLaVA code — so the first and last
frames are always included and the float positions are floored (not rounded). Sampling is uniform in
frame index, not in time; on a variable-frame-rate clip the timestamps show the uneven spacing.

Two backends decode the frames:

* ``"pyav"`` (the default for ``"auto"``): one cheap demux pass (packets only, no decoding) counts the
  frames and finds the keyframes; then frames are decoded in order and only the sampled ones are
  converted to RGB and kept. Where the stream has several keyframes, the decoder seeks to the keyframe
  before each sampled frame instead of decoding the gap, and checks each kept frame by its pts. If the
  decoder yields a different number of frames than the container announced (broken header, truncated
  tail), the indices are recomputed from the real count and, if needed, a second pass fetches them.
  PyAV handles every container FFmpeg reads, GIF included, and never holds more than N frames in memory.
* ``"decord"``: seeks per frame. It is unmaintained, cannot read GIF or truncated files, fails on some
  narrow frames (48 px wide), and trusts header metadata, so it only runs on files PyAV has already
  opened and counted, in a watchdog thread so a hang becomes an error, and its frame count must match
  the demuxed count. Speed is on par with PyAV (`videoqa bench video`), so PyAV is default.

``backend="auto"`` tries PyAV, then decord when PyAV fails on a valid file (an unexpected FFmpeg error,
an unstable frame count). An explicit backend runs only that backend. Input problems (missing, empty,
not a video, no video stream, unknown codec, no decodable frame) raise ``VideoError`` at once and are
never handed to decord: both decode with FFmpeg, and corrupt input is where decord crashes.

``sampler="content"`` (videoqa/video/changes.py) keeps every other uniform frame and moves the rest to where
the video changes, found by a first pass that decodes every frame into small grey thumbnails; a clip without
change gets exactly the uniform frames. ``Clip.sampler`` says which sampler chose the frames.

Clips shorter than N frames repeat frames so N are always returned (e.g. 3 frames, N=8 gives indices
``[0, 0, 0, 0, 1, 1, 1, 2]``); ``Clip.distinct_frames`` says how many different frames there are.

``Clip.warnings`` says what the file could not give, so an answer is never silently built on less than it
seems: frames the file declares but that could not be read (its header's video duration against what the
demuxer reached) or decoded (fewer frames than packets), the number of distinct frames left when that made
them fewer than asked, and single-frame inputs (a picture, a 1-frame GIF). A clip that is short but whole
is not warned about: repeating its frames is what the original sampler does.

Frames are returned as a player shows them: the container's display matrix (a phone's portrait clip is
stored landscape with "turn 90 degrees") is applied, in multiples of 90 degrees (other angles are rounded
to the nearest one; mirroring is not applied). ``Clip.rotation`` is the angle, counter-clockwise as FFmpeg
reports it. decord applies some matrices itself, garbles others and ignores Matroska's, so rotated clips
are always decoded by PyAV. ``VideoInfo.width``/``height`` stay the stored size.

The package: probe (opening, the demux scan, VideoInfo, probe_video), clip (Clip, frame_indices, warnings),
pyav and decord_backend (the two decoders), changes (the content sampler and its scan), sample
(sample_frames: the backend order and the sampler).
"""

from videoqa.video.changes import ChangeScan, scan_changes
from videoqa.video.clip import Clip, frame_indices
from videoqa.video.decord_backend import DECORD_TIMEOUT_S
from videoqa.video.probe import VideoInfo, check_file, probe_video
from videoqa.video.sample import BACKENDS, sample_frames
from videoqa.video.samplers import SAMPLERS, check_sampler

__all__ = ["BACKENDS", "DECORD_TIMEOUT_S", "SAMPLERS", "ChangeScan", "Clip", "VideoInfo", "check_file", "check_sampler",
           "frame_indices", "probe_video", "sample_frames", "scan_changes"]
