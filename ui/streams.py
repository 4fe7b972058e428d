"""What an API client receives from a streaming answer: the chat, heatmaps and stats, complete at the end."""

from __future__ import annotations

from collections.abc import Iterator

from .session import notice

ANSWER = ("chat", "gallery", "stats")  # what the API's ask and retry return


def with_final(chat, outputs: Iterator[dict], note: str | None = None) -> Iterator[dict]:
    """The chat, heatmaps and stats as they stream, then once more with the latest value of each, so an API
    client's result is complete (the page keeps what it was shown; a client only sees the last one). `note`:
    the page's notice line (e.g. "Type a question first."), which an API client gets at the end of the chat
    it receives (it is not part of the conversation)."""
    extra = [notice(note)] if note else []
    last = {"chat": chat + extra, "gallery": None, "stats": ""}
    yield dict(last)
    for out in outputs:
        new = {name: out[name] for name in ANSWER if name in out}
        if "chat" in new:
            new["chat"] = new["chat"] + extra
        last |= new
        yield new
    yield dict(last)
