"""videoqa: video question answering with Video-LLaVA and training-free visual-token pruning."""

from .errors import BusyError, InputError, ModelLoadError, VideoError, VideoQAError
from .pruning import KeptTokens, PruneConfig

__all__ = ["Answer", "BusyError", "InputError", "KeptTokens", "ModelLoadError", "PruneConfig", "VideoError", "VideoQA",
           "VideoQAError"]


def __getattr__(name: str):
    # The pipeline pulls in torch and transformers; import it on first use so `videoqa --help` stays fast.
    if name == "VideoQA":
        from .pipeline import VideoQA

        return VideoQA
    if name == "Answer":
        from .result import Answer

        return Answer
    raise AttributeError(name)
