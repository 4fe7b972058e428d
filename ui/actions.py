"""What the chat's buttons do, around one loaded `VideoQA`. Every answer comes from `VideoQA.stream`, the
same call the CLI makes; this module only keeps the tab's conversation and turns Answers into messages,
heatmaps and stats.

Asking is two steps: `enqueue` runs at once (outside the model's queue) and puts the question in the chat
and the session; `run` then answers every queued question of the tab in order, in the model's single slot.
So the box is free for the next question while an answer streams, and a second question waits visibly.

Each action returns a dict keyed by the names of the components it updates (ui/app.py's `ui` dict); a
component it leaves out is left as it is. The page and the API endpoints wire outputs by these names.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import gradio as gr

from videoqa.errors import Cancelled, VideoQAError
from videoqa.heatmap import render_heatmaps
from videoqa.pruning import REGISTRY, PruneConfig

from .compare import compare_methods
from .controls import gallery_files, parse_frames, parse_k, parse_r, parse_sampler
from .media import VIDEO_EXTENSIONS, Example, preview, sweep_cache
from .model_info import describe, suggestions
from .present import (
    answer_warnings,
    exchange_record,
    export_document,
    format_stats,
    hit_length_limit,
    reason,
)
from .session import ChatSession, Exchange, Settings
from .streams import with_final
from .turns import results_message

N_CHIPS = 6  # suggested questions shown for the loaded clip

log = logging.getLogger(__name__)

SKIP = object()  # "leave this output as it is"


def _idle_stop():
    """A new clip: nothing of the old conversation is left to stop (its answer stops at its next step)."""
    return gr.update(interactive=False)


def _no_export():
    """The export file withdrawn: every action that changes the conversation on screen returns this (an
    exported file would no longer hold it; Export writes a fresh one)."""
    return gr.update(value=None, visible=False)


def _heatmaps(images: list | None):
    """The latest answer's heatmaps (the API's output; the page shows each answer's under it, in the chat)."""
    return gr.update(value=images)


class ChatActions:
    def __init__(self, qa, examples: list[Example], work_dir: Path, cache_dir: str | Path | None = None,
                 max_age_s: float = 3600, keep: frozenset[str] = frozenset(), max_frames: int | None = None):
        self.qa = qa
        self.examples = examples
        self.work_dir = work_dir
        self.cache_dir, self.max_age_s, self.keep = cache_dir, max_age_s, keep
        self._next_sweep = 0.0  # monotonic time; the sweep walks the whole cache, so not after every answer
        self.methods = REGISTRY.names()  # compare mode: every registered method
        self.card = describe(qa)  # what the model is; a demo model warns about clips unlike its training
        self.max_frames = max_frames  # the Frames control's maximum (what fits the context)

    # -- the clip ---------------------------------------------------------------------------------------

    def load_upload(self, path: str | None, session: ChatSession):
        """An uploaded clip starts a new conversation; the upload box is emptied for the next file (the
        current clip is the one in the preview)."""
        return {**self._load(path, session), "gallery": _heatmaps(None), "stats": "", "upload": None,
                "export_file": _no_export(), "stop": _idle_stop(), "notice": "", **self.chips(session.clip)}

    def chips(self, clip: str | None) -> dict:
        """The suggested questions for `clip`, one button each (hidden when there are fewer)."""
        shown = suggestions(self.card, self.examples, clip)[:N_CHIPS]
        return {f"chip_{i}": gr.update(value=shown[i] if i < len(shown) else "", visible=i < len(shown))
                for i in range(N_CHIPS)}

    def load_example(self, index: int | None, session: ChatSession):
        """An example: its clip and its suggested question (in the chat box and the compare box)."""
        if index is None or not 0 <= int(index) < len(self.examples):
            session.restart()
            session.say("⚠️ No such example.")
            return {"chat": session.chat(), "preview": gr.update(value=None), "clip_name": "",
                    "gallery": _heatmaps(None), "stats": "", "upload": None, "export_file": _no_export(),
                    "stop": _idle_stop(), "notice": "", **self.chips(None)}
        ex = self.examples[int(index)]
        return {**self._load(str(ex.clip), session), "gallery": _heatmaps(None), "stats": "", "upload": None,
                "export_file": _no_export(), "stop": _idle_stop(), "notice": "", **self.chips(str(ex.clip)),
                "question": ex.question, "compare_question": ex.question}

    def load_named(self, name: str, session: ChatSession):
        """API: load the example clip called `name` (its first suggested question goes to the box)."""
        match = [i for i, ex in enumerate(self.examples) if ex.clip.name == name]
        return self.load_example(match[0] if match else None, session)

    def _load(self, path: str | None, session: ChatSession) -> dict:
        """The chat and the preview after loading `path` (a message in the chat when it cannot be used)."""
        from videoqa.video import probe_video

        session.restart()
        session.clip_known = True
        nothing = {"preview": gr.update(value=None), "clip_name": ""}
        if not path:
            return {"chat": session.chat(), **nothing}
        name = Path(path).name
        if Path(path).suffix.lower() not in VIDEO_EXTENSIONS:
            session.say(f"⚠️ “{name}” is not a supported video ({', '.join(VIDEO_EXTENSIONS)}).")
            return {"chat": session.chat(), **nothing}
        try:
            info = probe_video(path)
        except VideoQAError as e:
            session.say(f"⚠️ Cannot use “{name}”: {reason(e)}")
            return {"chat": session.chat(), **nothing}
        session.restart(path, name)
        session.clip_known = self.card.knows_clip(info.width, info.height, info.fps)
        shown = preview(path, info.container, info.codec, self.work_dir)
        session.say(f"Loaded “{name}”: {info.duration_s:.1f} s, {info.fps:.1f} fps, {info.width}×{info.height}, "
                    f"{info.codec}. Ask a question.")
        if not session.clip_known:  # known now: said at once, and again under every answer
            session.say(self.card.unlike_notice())
        return {"chat": session.chat(), "preview": gr.update(value=str(shown) if shown else None),
                "clip_name": f"**Current clip:** {name}"}

    # -- asking -----------------------------------------------------------------------------------------

    def enqueue(self, question: str, session: ChatSession, method: str, k, r: str, frames, show_scores: bool,
                sampler: str | None = None):
        """Put the question in the chat at once; it is answered by `run`. The box keeps the text when the
        question cannot be asked yet (no clip)."""
        question = (question or "").strip()
        if not question:
            return {"chat": session.chat(), "notice": "⚠️ Type a question first."}
        if session.clip is None:
            return {"chat": session.chat(), "notice": "⚠️ Upload a clip (or pick an example) first."}
        session.add_question(question, Settings(method, k, str(r), frames, bool(show_scores), sampler))
        return {"chat": session.chat(), "question": "", "stop": gr.update(interactive=True), "notice": "",
                "export_file": _no_export()}

    def run(self, session: ChatSession) -> Iterator[dict]:
        """Answer the tab's queued questions in order. Yields the chat, and the heatmaps, stats and stop
        button when they change."""
        yield self._out(session)
        while (ex := session.take()) is not None:
            yield from self._answer(session, ex)
        yield self._out(session, busy=False)

    def _out(self, session: ChatSession, gallery=SKIP, stats=SKIP, busy: bool = True) -> dict:
        stop = SKIP if busy else gr.update(interactive=session.busy())
        out = {"chat": session.chat(), "gallery": gallery, "stats": stats, "stop": stop}
        return {name: value for name, value in out.items() if value is not SKIP}

    def _answer(self, session: ChatSession, ex: Exchange) -> Iterator[dict]:
        if session.stopped(ex):
            session.show(ex, "(stopped before it was answered)")
            session.end(ex, "stopped")
            yield self._out(session)
            return
        text, answer, clip = "", None, session.clip
        try:
            cfg, frames, sampler = self.config(ex.settings)
            stream = self.qa.stream(clip, ex.question, history=session.history(ex), prune=cfg, frames=frames,
                                    sampler=sampler, cancel=lambda: session.stopped(ex))
            try:
                for item in stream:
                    if session.stopped(ex):
                        break  # closing the stream ends generation
                    if isinstance(item, str):
                        text += item
                        if session.stopped(ex):
                            break
                        session.show(ex, text.strip() or "…")
                        yield self._out(session)
                    else:
                        answer = item
            finally:
                stream.close()
        except Cancelled:  # Stop pressed while the clip was decoded or encoded
            yield self._stopped(session, ex, text)
            return
        except VideoQAError as e:
            yield self._fail(session, ex, text, reason(e))
            return
        except Exception as e:  # a bug, not the user's fault: log it, tell the user, keep serving
            log.exception("answering %r about %s failed", ex.question, clip)
            yield self._fail(session, ex, "", f"internal error ({type(e).__name__}: {e}); see the server log.")
            return
        if answer is None:
            yield self._stopped(session, ex, text)
            return
        yield self._done(session, ex, answer)

    def _fail(self, session: ChatSession, ex: Exchange, text: str, why: str) -> dict:
        ex.record = {"status": "failed", "question": ex.question, "shown": text, "error": why}
        session.show(ex, f"{text}\n\n⚠️ {why}".strip())
        session.end(ex, "failed")
        return self._out(session)

    def _stopped(self, session: ChatSession, ex: Exchange, text: str) -> dict:
        """Stopped by the user: the partial answer stays, in the chat and in the history the model sees."""
        if ex.epoch == session.epoch:
            ex.answer = text.strip() or None
            ex.record = {"status": "stopped", "question": ex.question, "shown": text.strip()}
            session.show(ex, f"{text.strip()} (stopped)".strip())
        session.end(ex, "stopped")
        return self._out(session)

    def _done(self, session: ChatSession, ex: Exchange, answer) -> dict:
        if ex.epoch != session.epoch:
            session.end(ex, "done")
            return self._out(session)
        follow_up = session.answered_before(ex)
        vp = self.qa.processor.video_processor
        gallery = self._gallery(render_heatmaps(answer.clip, answer.kept, vp.size, vp.crop_size,
                                                show_scores=ex.settings.show_scores))
        cut = hit_length_limit(answer, self.qa.max_new_tokens)
        results = results_message(ex.question, answer, gallery, ex.settings.show_scores, follow_up, cut)
        text = answer.text or "(empty answer)"
        ex.answer = answer.text
        ex.record = exchange_record(answer, text, "done")
        session.show(ex, text)
        # The adaptive choice's warnings too: e.g. frames asked for that the context could not hold
        notes = [f"⚠️ {w}" for w in [*answer_warnings(answer), *(getattr(answer.decision, "warnings", None) or [])]]
        if answer.stats.history_dropped and not session.told_history_dropped:
            session.told_history_dropped = True  # once: from here on every answer drops old turns
            notes.append(f"ℹ️ The conversation no longer fits the model's context with the clip's "
                         f"{answer.stats.frames} frames, so the model now sees only the latest questions and "
                         f"answers (the oldest {answer.stats.history_dropped} left out). Clear to start over.")
        if guess := self.card.guess_notice(session.clip_known, ex.question):  # every answer that is a guess
            notes.append(guess)
        session.add_notes(ex, notes, results)
        session.end(ex, "done")
        return self._out(session, _heatmaps(gallery), format_stats(answer, follow_up))

    def _gallery(self, images: list) -> list[tuple[str, str]]:
        """Heatmap files for the page, and now and then (every max_age/2) a sweep of the old ones: chat and
        Compare both write them, so both sweep."""
        if time.monotonic() >= self._next_sweep:
            sweep_cache(self.cache_dir or self.work_dir / "heatmaps", self.max_age_s, keep=self.keep)
            self._next_sweep = time.monotonic() + self.max_age_s / 2
        return gallery_files(images, self.work_dir)

    def config(self, s: Settings) -> tuple[PruneConfig, int | None, str]:
        """The pruning, frame count and frame sampler the controls ask for; options without a control keep the
        server's defaults."""
        cfg = self.qa.prune.for_method(s.method)
        if s.k is not None and "k" in cfg.method_spec.option_names:  # the K box (empty: the default)
            cfg = replace(cfg, k=parse_k(s.k, self.qa.dims.n_layers))
        frames = parse_frames(s.frames, self.max_frames)
        return replace(cfg, r=parse_r(s.r)), frames, parse_sampler(s.sampler, self.qa.sampler)

    def refused(self, typed: str, session: ChatSession):
        """The server's queue was full: the waiting questions go back into the box (before anything typed
        since). Gradio's own notice ("This application is currently busy. Please try again.") says why; a
        second message in the chat would only repeat it."""
        questions = session.unqueue()
        out = {"chat": session.chat(), "stop": gr.update(interactive=session.busy())}
        if questions:
            out["question"] = "\n".join([*questions, typed] if typed else questions)
        return out

    def stop(self, session: ChatSession):
        """Stop the answer being written (its text so far stays) and the questions waiting behind it."""
        if not session.stop():
            return {"chat": session.chat(), "notice": "Nothing to stop."}
        # At once, before the answer's own loop notices: the button is done, the answer says it is stopping.
        return {"chat": session.chat(), "notice": "", "stop": gr.update(interactive=False),
                "export_file": _no_export()}

    def after_stop(self, session: ChatSession):
        """The chat once the stopped answer has ended. Stop's own reply is the chat at the click ("…
        (stopping…)") and the answer's last update can reach the page before it; this reply, sent after
        Stop's, comes last and leaves the page on how the answer ended."""
        session.settle()
        return {"chat": session.chat(), "stop": gr.update(interactive=session.busy())}

    def retry(self, session: ChatSession, method: str, k, r: str, frames, show_scores: bool,
              sampler: str | None = None):
        """Ask the last question again (with the current settings), replacing its answer."""
        if session.busy():
            return {"chat": session.chat(), "notice": "Still answering: press Stop first, then Retry."}
        last = session.last_finished()
        if last is None:
            return {"chat": session.chat(), "notice": "Nothing to retry yet: ask a question first."}
        session.forget(last)
        chat = self.enqueue(last.question, session, method, k, r, frames, show_scores, sampler)["chat"]
        return {"chat": chat, "stop": gr.update(interactive=True), "notice": "", "export_file": _no_export()}

    def clear(self, session: ChatSession):
        """Forget the conversation (the chat and what the model remembers); keep the clip."""
        session.restart(session.clip, session.clip_name)
        return {"chat": [], "gallery": _heatmaps(None), "stats": "",
                "export_file": gr.update(value=None, visible=False)}

    def export(self, session: ChatSession):
        """The conversation as a JSON file: each question, the answer shown, its stats and kept-token record.
        Nothing (and a notice) while no question has been answered."""
        records = session.records()
        if session.busy():  # the file would miss the answer being written
            return {"export_file": _no_export(), "notice": "Still answering: export when the answer is complete."}
        if not records:
            return {"export_file": gr.update(value=None, visible=False),
                    "notice": "Nothing to export yet: ask a question first."}
        doc = export_document(self.qa.name, session.clip_name, records)
        stem = Path(session.clip_name).stem or "conversation"
        out = self.work_dir / "exports" / uuid.uuid4().hex[:12] / f"videoqa-{stem}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, ensure_ascii=False))
        return {"export_file": gr.update(value=str(out), visible=True), "notice": ""}

    # -- API-only endpoints (one call each for clients; the page uses enqueue + run) ---------------------

    def ask(self, question: str, session: ChatSession, method: str, k, r: str, frames, show_scores: bool,
            sampler: str | None = None):
        """Ask one question and stream its answer. Yields the chat, heatmaps and stats (`ANSWER`) as they
        change; the last output holds all three."""
        out = self.enqueue(question, session, method, k, r, frames, show_scores, sampler)
        yield from with_final(out["chat"], self.run(session), out.get("notice"))

    def retry_api(self, session: ChatSession, method: str, k, r: str, frames, show_scores: bool,
                  sampler: str | None = None):
        """Ask the last question again with these settings; outputs as for ask."""
        out = self.retry(session, method, k, r, frames, show_scores, sampler)
        yield from with_final(out["chat"], self.run(session), out.get("notice"))

    # -- compare (ui/compare.py) --------------------------------------------------------------------------

    def compare(self, question: str, session: ChatSession, k, r: str, frames, show_scores: bool,
                sampler: str | None = None):
        """The same question answered with every method, one after the other. Yields a status line, then
        per method: answer, heatmaps, summary (kept tokens, FLOPs, time)."""
        yield from compare_methods(self, question, session, k, r, frames, show_scores, sampler)
