"""Errors a user can act on. Each carries one line that names the problem; the CLI prints it and exits 2."""


class VideoQAError(Exception):
    """Base class: anything caused by the user's input or environment, not by a bug."""


class VideoError(VideoQAError):
    """A video file cannot be used: missing, empty, not a video, no video stream, undecodable."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ModelLoadError(VideoQAError):
    """Weights, config or processor cannot be loaded."""


class InputError(VideoQAError):
    """A question, option or setting is out of range (too long for the context, K or R invalid, ...)."""


class Cancelled(VideoQAError):
    """The caller's cancel check said stop (e.g. the web chat's Stop) while frames were decoded or encoded."""

    def __init__(self, stage: str = "preparing the clip"):
        super().__init__(f"stopped while {stage}")


class BusyError(VideoQAError):
    """Another run is writing the same results file."""


class IncompleteError(VideoQAError):
    """A run finished but left too much undone to be a result (e.g. an eval whose judge answered nothing)."""
