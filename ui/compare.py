"""Compare mode: the same question answered with every registered method, one after the other, in the model's
single slot. Each method's answer, heatmaps (their captions with the frame's time) and a line on what pruning
did; the status line says where the answers differ, or, when the clip or question is unlike a demo model's
training, that the answers are guesses and their differences noise."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import gradio as gr

from videoqa.errors import VideoQAError
from videoqa.heatmap import render_heatmaps

from .present import answer_warnings, answers_differ, compare_line, reason
from .session import ChatSession, Settings
from .turns import with_times

log = logging.getLogger(__name__)
SKIP = object()  # "leave this output as it is", turned into gr.skip() when yielded


def _skip(values: list) -> tuple:
    return tuple(gr.skip() if v is SKIP else v for v in values)


def compare_methods(actions, question: str, session: ChatSession, k, r: str, frames, show_scores: bool,
                sampler: str | None = None) -> Iterator[tuple]:
    """The same question answered with every method, one after the other. Yields a status line, then
    per method: answer, heatmaps, summary (kept tokens, FLOPs, time)."""
    n = len(actions.methods)
    out = [SKIP] * (1 + 3 * n)
    question = (question or "").strip()
    if session.clip is None or not question:
        out[0] = "⚠️ " + ("Upload a clip (or pick an example) first." if session.clip is None
                          else "Type a question first.")
        yield _skip(out)
        return
    out[1:] = ["", None, ""] * n  # nothing left over from an earlier comparison
    try:  # settings every method would refuse: one message, not one per method
        for method in actions.methods:
            actions.config(Settings(method, k, str(r), frames, bool(show_scores), sampler))
    except VideoQAError as e:
        out[0] = f"⚠️ {reason(e)} Nothing was compared."
        yield _skip(out)
        return
    epoch, clip = session.epoch, session.clip
    guess = actions.card.guess_notice(session.clip_known, question)
    caveat = f"\n\n{guess} Differences between the methods’ answers here are noise." if guess else ""
    answers = {}
    for i, method in enumerate(actions.methods):
        out[0] = f"Answering with **{method}** ({i + 1}/{n})…{caveat}"
        yield _skip(out)
        settings = Settings(method, k, str(r), frames, bool(show_scores), sampler)
        for text, gallery, summary in compare_one(actions, clip, question, settings):
            if session.epoch != epoch:
                return  # a new clip meanwhile: this comparison is no longer wanted
            if guess and summary not in (SKIP, ""):
                summary = "⚠️ **a guess** (see above) · " + summary
            out[1 + 3 * i: 4 + 3 * i] = [text, gallery, summary]
            answers[method] = text
            yield _skip(out)
    differ = "" if guess else f" {answers_differ(answers)}"  # differences between guesses mean nothing
    out[0] = f"Compared {n} methods on “{session.clip_name}”: “{question}”.{differ}{caveat}"
    yield _skip(out)

def compare_one(actions, clip: str, question: str, settings: Settings) -> Iterator[tuple]:
    """Yields (answer so far, heatmaps, summary) for one method."""
    text, method, show_scores = "", settings.method, settings.show_scores
    try:
        cfg, n_frames, sampler = actions.config(settings)
        for item in actions.qa.stream(clip, question, prune=cfg, frames=n_frames, sampler=sampler):
            if isinstance(item, str):
                text += item
                yield text, SKIP, SKIP
            else:
                vp = actions.qa.processor.video_processor
                images = render_heatmaps(item.clip, item.kept, vp.size, vp.crop_size, show_scores=show_scores,
                                         short=True)  # "#3 · 40/64"
                gallery = actions._gallery(with_times(images, getattr(item.clip, "timestamps", None)))
                notes = "".join(f"\n\n⚠️ {w}" for w in answer_warnings(item))
                yield item.text or "(empty answer)", gallery, compare_line(item) + notes
    except VideoQAError as e:
        yield f"{text}\n\n⚠️ {reason(e)}".strip(), None, ""
    except Exception as e:  # a bug: log it, show it, go on with the next method
        log.exception("comparing %s on %r failed", method, question)
        yield f"⚠️ internal error ({type(e).__name__}: {e}); see the server log.", None, ""
