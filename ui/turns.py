"""Each answer's own results in the conversation: its heatmaps, a plain-language summary and its stats, in a
block headed by its question and closed until clicked (a Chatbot "thought" message, status "done"), so every
earlier answer can be reopened and a failed answer has none. Also the heatmaps' legend (chat and Compare).

The block is HTML the chat shows as is; its images are the heatmap files `gallery_files` wrote, served by
Gradio from a folder `launch` allows (`RESULTS_DIR` under the app's work folder).
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

from .present import plain_summary, stats_rows

RESULTS_TITLE = "Heatmaps and stats for: "


def legend_html(scores: bool) -> str:
    """What the heatmaps' marks mean; with `scores`, the colour scale of "Colour patches by attention score"."""
    marks = ("<span class='swatch kept'></span>kept (the frame’s own colours, outlined)"
             "<span class='swatch dropped'></span>dropped (greyed and hatched; a trace of its colour stays)"
             "<span class='swatch merged'></span>dropped but merged into a kept token (tinted blue)")
    if scores:
        marks = ("colour = the method’s score for the question: low<span class='scale'></span>high "
                 "(methods that rank by attention; others as usual); kept patches outlined")
    return (f"<div class='legend'><b>Kept visual tokens per frame</b>, each frame as the model saw it: {marks}. "
            "“+ summary”: the frame’s summary token (one token for the whole frame) was kept too.</div>")


def file_url(path: str | Path) -> str:
    """A served file's address, relative to the page (so a proxy's root path still works)."""
    return "gradio_api/file=" + quote(str(path))


def results_message(question: str, answer, files: list[tuple[str, str]], show_scores: bool,
                    follow_up: bool, note: str | None = None) -> dict:
    """The closed block under one answer: summary line, legend, one figure per frame, all stats. `note`, shown
    in its heading (seen while closed): e.g. that the answer was cut off at the length limit."""
    esc = html.escape
    figures = "".join(f"<figure class='frame'><img src='{file_url(path)}' alt='{esc(caption)}' loading='lazy'>"
                      f"<figcaption>{esc(caption)}</figcaption></figure>" for path, caption in files)
    rows = "".join(f"<tr><th>{esc(name)}</th><td>{esc(value)}</td></tr>"
                   for name, value in stats_rows(answer, follow_up))
    content = (f"<div class='turn-results'><p class='turn-summary'>{esc(plain_summary(answer))}</p>"
               f"{legend_html(show_scores)}<div class='frames'>{figures}</div>"
               f"<details class='turn-stats'><summary>All stats</summary><table>{rows}</table></details></div>")
    return {"role": "assistant", "content": content,
            "metadata": {"title": esc(RESULTS_TITLE + f"“{question}”" + (f" · {note}" if note else "")),
                         "status": "done"}}


def is_results(message: dict) -> bool:
    """Whether a chat message is an answer's results block (the API's chat leaves them out: it gets the
    heatmaps and stats as outputs of their own)."""
    return bool(message.get("metadata"))


def with_times(images: list, timestamps) -> list:
    """Compare's short captions ("#3 · 40/64") with each frame's time ("#3 · 1.25 s · 40/64")."""
    out = []
    for f, (image, caption) in enumerate(images):
        if timestamps is not None and f < len(timestamps):
            head, sep, rest = caption.partition("\u00a0·\u00a0")
            caption = f"{head}\u00a0·\u00a0{timestamps[f]:.2f}\u00a0s{sep}{rest}" if sep else caption
        out.append((image, caption))
    return out
