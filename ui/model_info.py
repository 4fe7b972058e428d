"""What the page says about the loaded model: in the header, at upload time, and under every answer a demo
model gives about a clip or a question unlike the ones it was trained on (its answers there are guesses).
(Not to be confused with videoqa/model_card.py, a model folder's own settings.)

The demo models learned only the synthetic clips of `videoqa.synth`: 128×128 pixels, 8 frames per second
(short clips) or 4 (long clips). The rule for "a clip of its kind" is that format, read from the file's
header: a clip in another format cannot have come from the generator, so its answers are guesses. (A
128×128 clip at that rate with other content passes: the rule checks the format, not the picture.)

The rule for "a question of its kind" is the phrasings the shipped weights were trained on (`SHIPPED_TEMPLATES`
of videoqa.synth.short and .long): a question is known when it is one of them with answer words in the blanks,
letter case, spacing and punctuation aside, and, for a model fine-tuned on `phrasings.vary`'s variants (both demo
models), the word swaps, openers and endings they made allowed; both also know the questions
`built.compose` builds from parts. Anything else gets the notice, even where the model was
measured to answer it (the held-out phrasings, docs/demo-models.md): it was never trained on it.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from videoqa.model import NAMED_MODELS, packaged_path
from videoqa.synth import built, phrasings
from videoqa.synth import long as synth_long
from videoqa.synth import short as synth_short


def _or(words) -> str:
    words = list(words)
    return ", ".join(words[:-1]) + " or " + words[-1]


_FILL = {"colour": list(synth_short.COLOURS), "shape": list(synth_short.SHAPES)}  # what the generator puts in blanks


# The fine-tunes also trained on `phrasings.vary`'s variants of each form: the words it swaps count as one, and its
# openers and endings may be there or not (read from `vary`'s own lists, so the rule follows them).
_SAME = {word: group[0] for group in phrasings.SWAPS for word in group}


def _optional(parts) -> str:
    words = sorted({" ".join(re.findall(r"[a-z0-9]+", p.lower())) for p in parts} - {""})
    return "(?:" + "|".join(map(re.escape, words)) + ")"


_OPENER = f"(?:{_optional(phrasings.OPENERS)} )?"
_ENDING = f"(?: {_optional(phrasings.ENDINGS)})?"


def _words(text: str, varied: bool = False) -> str:
    """A question reduced to what the rule compares: lower-case words, no punctuation; with `varied`, one word of
    each group that `phrasings.vary` swaps."""
    return " ".join(_SAME.get(w, w) if varied else w for w in re.findall(r"[a-z0-9]+", text.lower()))


@functools.cache  # every answer asks about every form
def _pattern(form: str, varied: bool = False) -> str:
    """A phrasing (blanks as [colour], [shape]) as a regular expression over `_words`: each blank one of the
    words the generator puts there."""
    parts = re.split(r"\[(\w+)\]", form)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append("(?:" + "|".join(map(re.escape, _FILL.get(part, [part]))) + ")")
        elif _words(part):
            out.append(re.escape(_words(part, varied)))
    return " ".join(out)


def question_forms(templates: dict[str, list[str]]) -> dict[str, list[str]]:
    """The phrasings by question type, blanks shown as [colour], [shape]… (the card's list)."""
    return {kind: [re.sub(r"\{(\w+)\}", lambda m: f"[{'shape' if m[1] in 'ab' else m[1]}]", t) for t in forms]
            for kind, forms in templates.items()}


_SHORT = (f"the moving shape’s colour ({_or(synth_short.COLOURS)}), its shape ({_or(synth_short.SHAPES)}) and "
          f"the direction it moves ({_or(synth_short.DIRECTIONS)})")
# name -> (what it was trained on, the questions it answers, the frame rates of its clips, its phrasings, whether it
# was trained on their variants too, whether its built questions (`built.compose`) are demo's (short clips') or
# demo-long's)
DEMOS = {
    "demo": ("{clips} synthetic clips of one coloured shape crossing a textured background", _SHORT + ", also "
             "as Video-MME’s multiple-choice questions (it replies with the right option’s text)",
             (synth_short.FPS,), (synth_short.SHIPPED_TEMPLATES,), True, True),
    "demo-long": ("synthetic clips of 4–60 s ({clips}) where a shape crosses the frame while something brief "
                  "happens", _SHORT + "; the brief shape’s colour and shape, how many flashes (one to three), "
                  "which of two brief shapes appears first", (synth_long.FPS, synth_short.FPS),
                  (synth_long.SHIPPED_SHORT_TEMPLATES, synth_long.SHIPPED_TEMPLATES), True, False),
}
ANSWER_WORDS = {"colour": list(synth_short.COLOURS), "shape": list(synth_short.SHAPES),
                "direction": list(synth_short.DIRECTIONS), "count": list(synth_long.COUNT_WORDS)}


@dataclass(frozen=True)
class ModelInfo:
    name: str
    summary: str  # one line: what the model is
    knows: str  # demo models: what it was trained on and can answer; empty for a real checkpoint
    fps: tuple[int, ...] = ()  # demo models: the frame rates of the clips it learned
    forms: dict[str, list[str]] = field(default_factory=dict)  # demo models: its phrasings by question type
    varied: bool = False  # demo models: also trained on `phrasings.vary`'s variants of those phrasings
    built: dict[str, list[str]] = field(default_factory=dict)  # demo-long: `built.compose`'s questions, by type
    # (too many for the card's list: it shows a few)

    @property
    def demo(self) -> bool:
        return bool(self.fps)

    def markdown(self) -> str:
        return f"**{self.summary}**" + (f" {self.knows}" if self.knows else "")

    def knows_clip(self, width: int, height: int, fps: float) -> bool:
        """Whether a clip has the format of the clips this model learned (always true for a real checkpoint)."""
        size = synth_short.CLIP_SIZE
        return not self.demo or (width, height) == (size, size) and any(abs(fps - f) < 0.01 for f in self.fps)

    def knows_question(self, question: str) -> bool:
        """Whether `question` is one of the phrasings this model learned, answer words in the blanks (always
        true for a real checkpoint)."""
        if not self.demo:
            return True
        return not phrasings.held_out(question) and self._known.fullmatch(_words(question, self.varied)) is not None

    @functools.cached_property
    def _known(self) -> re.Pattern:
        """One expression for every phrasing (thousands for demo-long): compiled once a card, not once a form."""
        around = (_OPENER, _ENDING) if self.varied else ("", "")
        forms = {_pattern(t, self.varied) for table in (self.forms, self.built) for fs in table.values() for t in fs}
        return re.compile(around[0] + "(?:" + "|".join(sorted(forms)) + ")" + around[1])

    def unlike_notice(self) -> str:
        return (f"⚠️ The {self.name} model was trained only on synthetic clips ({synth_short.CLIP_SIZE}×"
                f"{synth_short.CLIP_SIZE} px); this clip is not like the clips it was trained on, so its answers "
                "here are guesses. Try an example clip, or serve a real checkpoint (videoqa serve --model …).")

    def guess_notice(self, clip_known: bool, question: str) -> str | None:
        """The notice an answer carries when it is a guess: the clip, the question or both unlike the
        model's training. None when both are of its kind."""
        unlike = [what for what, known in (("this clip", clip_known), ("this question", self.knows_question(question)))
                  if not known]
        if not unlike:
            return None
        why = " and ".join(unlike)
        return (f"⚠️ Guess: {why} {'is' if len(unlike) == 1 else 'are'} unlike what the {self.name} model was "
                "trained on, so this answer is a guess."
                + ("" if self.knows_question(question) else " It knows only the question forms in its card "
                   "(click a suggested question).")
                + ("" if clip_known else " Try an example clip, or serve a real checkpoint."))

    def forms_markdown(self) -> str:
        """The card's list: each question type's phrasings and its answer words."""
        rows = []
        for kind, forms in self.forms.items():
            answers = ANSWER_WORDS.get(kind.removeprefix("event_"), ANSWER_WORDS["shape"] if kind == "order" else [])
            rows.append(f"- **{kind.replace('_', ' ')}** ({', '.join(answers)}): " + " · ".join(forms))
        if self.built:
            n = sum(map(len, self.built.values()))
            some = [forms[len(forms) // 2] for forms in self.built.values()]
            rows.append(f"- and {n:,} questions built from the same parts, such as " + " · ".join(some))
        return "\n".join(rows)


def describe(qa) -> ModelInfo:
    """The card of a loaded `VideoQA`: a demo model's training and questions, or a checkpoint's size."""
    n_params = sum(p.numel() for p in qa.model.parameters())
    dtype = str(qa.dtype).removeprefix("torch.")
    size = f"{n_params / 1e9:.2f} B" if n_params >= 1e9 else f"{n_params / 1e6:.2f} M"
    if qa.name in DEMOS:
        trained, answers, fps, templates, varied, short_builds = DEMOS[qa.name]
        clips = _training_clips(qa.name)
        summary = f"Demo model “{qa.name}” ({size} parameters, {dtype}, {qa.device})."
        knows = (f"Trained only on {trained.format(clips=clips)}. It answers questions about {answers}; "
                 "about any other clip its answers are guesses.")
        forms: dict[str, list[str]] = {}
        for t in templates:
            for kind, listed in question_forms(t).items():
                forms.setdefault(kind, [])
                forms[kind] += [p for p in listed if p not in forms[kind]]
        built_forms = question_forms({t: list(f) for t, f in built.composed_table(short_builds).items()})
        return ModelInfo(qa.name, summary, knows, fps, forms, varied, built_forms)
    return ModelInfo(qa.name, f"Model {Path(qa.name).name or qa.name}: {size} parameters, {dtype}, {qa.device}.", "")


def suggestions(card: ModelInfo, examples, clip: str | None) -> list[str]:
    """Questions to suggest for `clip`: an example clip's own; for another clip, a demo model's phrasings
    without blanks (one per question type that has one), or a generic question for a real checkpoint."""
    if clip is None:
        return []
    own = [ex.question for ex in examples if str(ex.clip) == str(clip)]
    if own:
        return own
    if not card.demo:
        return ["What is happening in this video?"]
    plain = ([f for f in forms if "[" not in f] for forms in card.forms.values())
    return [forms[0] for forms in plain if forms]  # one per question type that has a phrasing without blanks


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
