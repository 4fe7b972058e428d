"""What the page says about the loaded model: in the header, in the empty chat, and once per clip when a demo
model is asked about a clip unlike the ones it was trained on (its answers there are guesses). (Not to be
confused with videoqa/model_card.py, a model folder's own settings.)

The demo models learned only the synthetic clips of `videoqa.synth`: 128×128 pixels, 8 frames per second
(short clips) or 4 (long clips). The rule for "a clip of its kind" is that format, read from the file's
header: a clip in another format cannot have come from the generator, so its answers are guesses. (A
128×128 clip at that rate with other content passes: the rule checks the format, not the picture.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from videoqa.model import NAMED_MODELS, packaged_path
from videoqa.synth import long as synth_long
from videoqa.synth import short as synth_short


def _or(words) -> str:
    words = list(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


_SHORT = (f"the moving shape’s colour ({_or(synth_short.COLOURS)}), its shape ({_or(synth_short.SHAPES)}) and "
          f"the direction it moves ({_or(synth_short.DIRECTIONS)})")
# name -> (what it was trained on, the questions it answers, the frame rates of its clips)
DEMOS = {
    "demo": ("{clips} synthetic clips of one coloured shape crossing a textured background", _SHORT,
             (synth_short.FPS,)),
    "demo-long": ("synthetic clips of 4–60 s ({clips}) where a shape crosses the frame while something brief "
                  "happens", _SHORT + "; the brief shape’s colour and shape, how many flashes (one to three), "
                  "which of two brief shapes appears first", (synth_long.FPS, synth_short.FPS)),
}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    summary: str  # one line: what the model is
    knows: str  # demo models: what it was trained on and can answer; empty for a real checkpoint
    fps: tuple[int, ...] = ()  # demo models: the frame rates of the clips it learned

    @property
    def demo(self) -> bool:
        return bool(self.fps)

    def markdown(self) -> str:
        return f"**{self.summary}**" + (f" {self.knows}" if self.knows else "")

    def knows_clip(self, width: int, height: int, fps: float) -> bool:
        """Whether a clip has the format of the clips this model learned (always true for a real checkpoint)."""
        size = synth_short.CLIP_SIZE
        return not self.demo or (width, height) == (size, size) and any(abs(fps - f) < 0.01 for f in self.fps)

    def unlike_notice(self) -> str:
        return (f"⚠️ The {self.name} model was trained only on synthetic clips ({synth_short.CLIP_SIZE}×"
                f"{synth_short.CLIP_SIZE} px); this clip is not like the clips it was trained on, so its answers "
                "here are guesses. Try an example clip, or serve a real checkpoint (videoqa serve --model …).")


def describe(qa) -> ModelInfo:
    """The card of a loaded `VideoQA`: a demo model's training and questions, or a checkpoint's size."""
    n_params = sum(p.numel() for p in qa.model.parameters())
    dtype = str(qa.dtype).removeprefix("torch.")
    size = f"{n_params / 1e9:.2f} B" if n_params >= 1e9 else f"{n_params / 1e6:.2f} M"
    if qa.name in DEMOS:
        trained, answers, fps = DEMOS[qa.name]
        clips = _training_clips(qa.name)
        summary = f"Demo model “{qa.name}” ({size} parameters, {dtype}, {qa.device})."
        knows = (f"Trained only on {trained.format(clips=clips)}. It answers questions about {answers}; "
                 "about any other clip its answers are guesses.")
        return ModelInfo(qa.name, summary, knows, fps)
    return ModelInfo(qa.name, f"Model {Path(qa.name).name or qa.name}: {size} parameters, {dtype}, {qa.device}.", "")


def _training_clips(name: str) -> str:
    """How many clips the demo model trained on, from its training.json ("many" when it is not there). Every run
    of a model (its `stages`, then the last) draws a prefix of the same clip streams: the most any drew is all."""
    try:
        record = json.loads((packaged_path(NAMED_MODELS[name][0]) / "training.json").read_text())
        runs = [record["args"], *(stage["args"] for stage in record.get("stages", {}).values())]
    except (OSError, KeyError, ValueError):
        return "many"

    def most(*keys: str) -> int:
        return max(sum(run.get(k, 0) for k in keys) for run in runs)

    if "train_clips" in runs[0]:
        return f"{most('train_clips'):,}"
    return f"{most('long_clips', 'extra_clips'):,} long and {most('short_clips', 'extra_short'):,} short"
