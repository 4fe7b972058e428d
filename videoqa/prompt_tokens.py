"""Prompt -> token ids, with what the user wrote kept as plain text and the video-token slot expanded.

Only the template's own special tokens (BOS, `<video>`, `</s>` after earlier answers) become special ids.
A question or an earlier answer that reads `<video>`, `<image>` or `</s>` is text: otherwise `<video>` in a
question would ask for a second copy of the visual features, and `<image>` would feed the model the image
placeholder.

The prompt is tokenised in one piece, exactly as the processor does (so ordinary prompts give the processor's
ids); special tokens the tokenizer matched inside the user's text are then tokenised again as text
(`split_special_tokens=True`), and the result is checked to hold no special id at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .errors import InputError

Render = Callable[[str, list[tuple[str, str]]], str]  # (question, history) -> prompt text


def prompt_ids(tokenizer, render: Render, question: str, history: Sequence[tuple[str, str]] | None,
               video_token_id: int, n_visual: int) -> list[int]:
    """Ids of `render(question, history)` with the template's video token repeated `n_visual` times."""
    texts = [question] + [t for turn in (history or []) for t in turn]
    mark = _marker(texts)
    template = render(f"{mark}0{mark}", [(f"{mark}{2 * i + 1}{mark}", f"{mark}{2 * i + 2}{mark}")
                                         for i in range(len(texts) // 2)])
    prompt, spans = _fill(template, mark, texts)
    enc = tokenizer(prompt, return_offsets_mapping=True)
    special = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    ids: list[int] = []
    for token, (start, end) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
        if token in special and _in_user_text(prompt, start, end, spans):
            plain = tokenizer(prompt[start:end], add_special_tokens=False, split_special_tokens=True)["input_ids"]
            if special.intersection(plain):
                raise InputError(f"the text {prompt[start:end]!r} cannot be read as plain text by this tokenizer")
            ids.extend(plain)
        else:
            ids.append(token)
    return expand_video_slot(ids, video_token_id, n_visual)


def expand_video_slot(ids: list[int], video_token_id: int, n_visual: int) -> list[int]:
    """The one video token of a prompt repeated `n_visual` times (0: removed), as the processor expands it."""
    slots = [i for i, t in enumerate(ids) if t == video_token_id]
    if len(slots) != 1:
        raise InputError(f"the prompt template has {len(slots)} video tokens; it needs exactly one")
    at = slots[0]
    return ids[:at] + [video_token_id] * n_visual + ids[at + 1:]


def _in_user_text(prompt: str, start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    """Whether the token at prompt[start:end] was written by the user. Its whitespace is left out: a template
    token with lstrip/rstrip absorbs the spaces next to it, which may belong to the user's text."""
    text = prompt[start:end]
    start, end = start + len(text) - len(text.lstrip()), end - len(text) + len(text.rstrip())
    return end > start and any(start < e and s < end for s, e in spans)


def _marker(texts: list[str]) -> str:
    """A private-use character none of the texts contains, to mark where each goes in the template."""
    used = set("".join(texts))
    return next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in used)


def _fill(template: str, mark: str, texts: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The prompt with each marked slot replaced by its text, and the character span of every user text."""
    pieces = re.split(f"{mark}(\\d+){mark}", template)
    prompt, spans = pieces[0], []
    for index, after in zip(pieces[1::2], pieces[2::2], strict=True):
        text = texts[int(index)]
        spans.append((len(prompt), len(prompt) + len(text)))
        prompt += text + after
    return prompt, spans
