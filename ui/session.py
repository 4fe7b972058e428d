"""One browser tab's state: the clip, what the chat shows, and the questions asked about the clip.

The chat shows messages; the model sees the history of answered questions. Both are kept in one place,
the list of exchanges, so clearing, retrying or stopping can never leave them out of step.
"""

from __future__ import annotations

import html
import threading
from dataclasses import dataclass, field


def message(role: str, text: str) -> dict:
    """A chat message showing `text` exactly as written.

    The chat renders its content as (sanitised) HTML, so plain text is escaped: a question such as
    "<b>x</b> *y*" is shown with its brackets and stars, not as bold or italic text.
    """
    return {"role": role, "content": html.escape(text, quote=False)}


def notice(text: str) -> dict:
    return message("assistant", text)


def shown_text(msg: dict) -> str:
    """What a chat message shows, as plain text (the inverse of `message`)."""
    return html.unescape(msg["content"])


@dataclass(frozen=True)
class Settings:
    """The pruning controls as they were when a question was asked (answered later, maybe)."""

    method: str
    k: float | None
    r: str
    frames: float
    show_scores: bool
    sampler: str | None = None  # None or empty: the model's own


@dataclass
class Exchange:
    """One question and its answer. `answer` is what the model said (the history it sees next time);
    `record` is what an export writes for it."""

    id: int
    epoch: int
    question: str
    settings: Settings
    user_msg: dict
    answer_msg: dict
    state: str = "queued"  # queued -> answering -> done | stopped | failed
    answer: str | None = None
    record: dict | None = None
    notes: list[dict] = field(default_factory=list)  # warnings shown after the answer, then its results block


@dataclass
class ChatSession:
    clip: str | None = None  # path of the uploaded or example clip
    clip_name: str = ""
    messages: list[dict] = field(default_factory=list)  # what the chat shows, notices included
    exchanges: list[Exchange] = field(default_factory=list)
    epoch: int = 0  # bumped by each new conversation: answers still running for an older one are dropped
    next_id: int = 0
    stop_below: int = 0  # exchanges with a smaller id are stopped
    clip_known: bool = True  # False: the clip is unlike the demo model's training (every answer says so)
    told_history_dropped: bool = False  # the chat said once that the oldest turns no longer fit the context

    def __post_init__(self) -> None:
        # Not a field: Gradio deep-copies the initial session for each tab and turns it into a dict.
        self.lock = threading.Lock()
        self.ended = threading.Condition(self.lock)  # notified when an answer ends (see `end`)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("lock", "ended")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()
        self.ended = threading.Condition(self.lock)

    def restart(self, clip: str | None = None, name: str = "") -> None:
        """A new conversation (new clip, or Clear). In place: every event of a tab gets this object, so an
        answer still streaming sees the new epoch and stops."""
        with self.lock:
            self.clip, self.clip_name = clip, name
            self.messages, self.exchanges = [], []
            self.epoch += 1
            self.stop_below = self.next_id
            self.told_history_dropped = False

    def say(self, text: str) -> None:
        with self.lock:
            self.messages.append(notice(text))

    def chat(self) -> list[dict]:
        """A copy for the Chatbot (Gradio may normalise what it is given)."""
        with self.lock:
            return [dict(m) for m in self.messages]

    def busy(self) -> bool:
        return any(e.state in ("queued", "answering") for e in self.exchanges)

    def add_question(self, question: str, settings: Settings) -> Exchange:
        with self.lock:
            waiting = any(e.state in ("queued", "answering") for e in self.exchanges)
            ex = Exchange(self.next_id, self.epoch, question, settings, message("user", question),
                          notice("(queued: answered after the question above)" if waiting else "…"))
            self.next_id += 1
            self.exchanges.append(ex)
            self.messages += [ex.user_msg, ex.answer_msg]
            return ex

    def take(self) -> Exchange | None:
        """The oldest queued exchange of the current conversation, now marked as being answered."""
        with self.lock:
            for ex in self.exchanges:
                if ex.state == "queued":
                    ex.state = "answering"
                    return ex
            return None

    def history(self, before: Exchange) -> list[tuple[str, str]]:
        """The (question, answer) turns the model sees before `before`: answered or stopped ones."""
        with self.lock:
            turns = []
            for ex in self.exchanges:
                if ex is before:
                    break
                if ex.answer is not None:
                    turns.append((ex.question, ex.answer))
            return turns

    def answered_before(self, ex: Exchange) -> bool:
        """Whether this conversation already answered a question about the clip before `ex`."""
        return bool(self.history(ex))

    def show(self, ex: Exchange, text: str) -> bool:
        """Set the text of `ex`'s answer message; False when `ex` belongs to an old conversation."""
        with self.lock:
            if ex.epoch != self.epoch:
                return False
            ex.answer_msg["content"] = html.escape(text, quote=False)
            return True

    def add_notes(self, ex: Exchange, texts: list[str], results: dict | None = None) -> None:
        """Notices shown right after `ex`'s answer (before any later question), then its results block."""
        with self.lock:
            if ex.epoch != self.epoch or not (texts or results):
                return
            at = _index(self.messages, ex.answer_msg) + 1
            ex.notes = [notice(t) for t in texts] + ([results] if results else [])
            self.messages[at:at] = ex.notes

    def stopped(self, ex: Exchange) -> bool:
        return ex.id < self.stop_below or ex.epoch != self.epoch

    def stop(self) -> int:
        """Stop the answer being written and drop the queued ones; returns how many were affected."""
        with self.lock:
            self.stop_below = self.next_id
            n = 0
            for ex in self.exchanges:
                if ex.state == "queued":
                    ex.state = "stopped"
                    ex.answer_msg["content"] = "(stopped before it was answered)"
                    n += 1
                elif ex.state == "answering":
                    so_far = ex.answer_msg["content"].removesuffix("…").strip()
                    ex.answer_msg["content"] = f"{so_far} (stopping…)".strip()
                    n += 1
            return n

    def end(self, ex: Exchange, state: str) -> None:
        """Mark `ex` done, stopped or failed: called after its answer's last words are shown, so whoever
        waits in `settle` then reads the chat as it ends."""
        with self.ended:
            ex.state = state
            self.ended.notify_all()

    def settle(self, timeout: float = 10.0) -> bool:
        """Wait until the answers a Stop stopped have ended (not any asked since); False if one is still
        being written after `timeout` seconds."""
        with self.ended:
            return self.ended.wait_for(
                lambda: not any(ex.state == "answering" and ex.id < self.stop_below for ex in self.exchanges),
                timeout)

    def last_finished(self) -> Exchange | None:
        with self.lock:
            return self.exchanges[-1] if self.exchanges and self.exchanges[-1].state in (
                "done", "stopped", "failed") else None

    def forget(self, ex: Exchange) -> None:
        """Remove `ex` and everything shown after its question (Retry)."""
        with self.lock:
            if ex in self.exchanges:
                self.exchanges.remove(ex)
                del self.messages[_index(self.messages, ex.user_msg):]

    def unqueue(self) -> list[str]:
        """Take back the questions still waiting (the server refused them); returns their text."""
        with self.lock:
            waiting = [ex for ex in self.exchanges if ex.state == "queued"]
            for ex in waiting:
                self.exchanges.remove(ex)
                self.messages = [m for m in self.messages if m is not ex.user_msg and m is not ex.answer_msg]
            return [ex.question for ex in waiting]

    def records(self) -> list[dict]:
        with self.lock:
            return [ex.record for ex in self.exchanges if ex.record is not None]


def _index(items: list, item) -> int:
    """Position of `item` by identity (messages are dicts that may compare equal)."""
    return next(i for i, x in enumerate(items) if x is item)
