"""The web chat: upload a clip, ask about it, see which visual tokens the model kept for each frame.

Thin on purpose: every answer comes from `VideoQA.stream`, the same call the CLI makes. The app only keeps
per-browser-session state (the clip and the conversation) and turns Answers into a chat message, a
per-frame heatmap gallery and a stats table.

    qa = VideoQA.from_pretrained("demo")
    app = build_app(qa)
    launch(app)              # 127.0.0.1:7860, queue of 8, 200 MB uploads
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from videoqa.errors import InputError, VideoQAError
from videoqa.heatmap import render_heatmaps
from videoqa.model import packaged_path
from videoqa.pruning import METHODS, PruneConfig

log = logging.getLogger(__name__)

VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".gif")
BROWSER_PLAYABLE = (".mp4", ".webm")  # shown in the preview player; other formats are still answered
DEFAULT_SAMPLES = packaged_path("clips")
MAX_FRAMES = 32

CSS = """
#stats table { font-size: 0.9em; }
#stats td:first-child { white-space: nowrap; font-weight: 600; }
/* show every frame's heatmap at once instead of a fixed-height scroll box */
#heatmaps, #heatmaps .grid-wrap { height: auto !important; max-height: none !important; }
"""


@dataclass
class ChatSession:
    """One browser tab's state: the current clip and the conversation about it."""

    clip: str | None = None  # path of the uploaded or example clip
    turns: list[tuple[str, str]] = field(default_factory=list)  # (question, answer) pairs for the model
    messages: list[dict] = field(default_factory=list)  # what the chatbot shows (includes notices)
    epoch: int = 0  # bumped by each new conversation, so an answer still streaming for the old one is dropped

    def restart(self, clip: str | None = None) -> None:
        # In place: Gradio hands every event of a tab the same object, so a running `ask` sees the change.
        self.clip, self.turns, self.messages, self.epoch = clip, [], [], self.epoch + 1


def _notice(text: str) -> dict:
    return {"role": "assistant", "content": text}


def _reason(error: VideoQAError) -> str:
    """The error's message; for a VideoError only the reason (the path is Gradio's long temp path)."""
    return str(getattr(error, "reason", error))


def list_samples(samples_dir: str | Path | None) -> list[Path]:
    """Example clips in `samples_dir` (sorted); empty when the folder does not exist yet."""
    if samples_dir is None or not Path(samples_dir).is_dir():
        return []
    return sorted(p for p in Path(samples_dir).iterdir() if p.suffix.lower() in VIDEO_EXTENSIONS)


def parse_r(text: str | float | None) -> float | str:
    """The R box: 'auto' (or empty) or a number in [0, 1)."""
    s = str(text if text is not None else "").strip().lower()
    if s in ("", "auto"):
        return "auto"
    try:
        return float(s)
    except ValueError:
        raise InputError(f"R must be 'auto' or a number in [0, 1), got {text!r}") from None


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n} B"


def _decision_text(decision) -> str:
    """Why R (and frames) were chosen automatically (pruning.adaptive.Decision.reason)."""
    return "" if decision is None else decision.reason


def format_stats(answer) -> str:
    """The stats panel for one Answer, as a Markdown table."""
    s, k, fl = answer.stats, answer.kept, answer.flops
    share = 100 * k.n_kept / k.n_visual if k.n_visual else 100.0
    prune = answer.prune
    where = {None: "no pruning", 0: "before the LLM"}.get(k.layer, f"at LLM layer K={k.layer}")
    r_line = f"{k.r:.2f} ({'auto' if prune.r == 'auto' else 'set by you'})"
    why = _decision_text(answer.decision)
    if why:
        r_line += f": {why}"
    for warning in getattr(answer.decision, "warnings", None) or []:
        r_line += f" ⚠️ {warning}"
    enc = "cached (follow-up, no re-encode)" if s.encode_cached else f"{s.t_encode:.3f} s"
    rows = [
        ("frames", f"{s.frames} sampled ({s.t_sample:.3f} s to decode)"),
        ("visual tokens", f"{k.n_visual} → {k.n_kept} kept ({share:.1f}%)"),
        ("method", f"{k.method}, {where}"),
        ("R (dropped share)", r_line),
        ("FLOPs (prefill)", f"{fl.ratio:.3f}× of unpruned ({fl.n_tokens} → {fl.n_tokens_pruned} tokens)"),
        ("time", f"decode {s.t_sample:.3f} s · encode {enc} · prefill {s.t_prefill:.3f} s · "
                 f"generate {s.t_generate:.3f} s · total {s.t_total:.3f} s"),
        ("speed", f"{s.tokens_per_s:.1f} tokens/s ({s.new_tokens} new tokens, prompt {s.prompt_tokens})"),
        ("peak memory", f"{_fmt_bytes(s.peak_memory_bytes)} ({s.peak_memory_kind}) · {s.device}, {s.dtype}"),
    ]
    return "| answer | |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def sweep_cache(cache_dir: str | Path, max_age_s: float) -> int:
    """Delete files older than `max_age_s` under `cache_dir` (ours alone); returns how many.

    Gradio deletes the uploads it tracks (delete_cache), but not the gallery images it saves while
    streaming, so a server left running all day would otherwise keep every heatmap ever shown.
    """
    now, removed = time.time(), 0
    for path in Path(cache_dir).rglob("*"):
        try:
            if path.is_file() and now - path.stat().st_mtime > max_age_s:
                path.unlink()
                removed += 1
        except OSError:  # deleted meanwhile by Gradio's own sweep
            continue
    return removed


def build_app(qa, samples_dir: str | Path | None = DEFAULT_SAMPLES, cache_dir: str | Path | None = None,
              max_age_s: float = 3600) -> gr.Blocks:
    """A Blocks app around a loaded `VideoQA` (loaded once, shared by every session).

    `cache_dir`: Gradio's upload/cache folder when it belongs to this app alone (`videoqa serve` makes
    one per process); files older than `max_age_s` there are swept after each answer.
    """
    samples = list_samples(samples_dir)
    vp = qa.processor.video_processor
    dims = qa.dims
    default = qa.prune

    def load_clip(path: str | None, session: ChatSession):
        """A new clip (upload or example) starts a new conversation."""
        session.restart()
        preview = None
        if path:
            name = Path(path).name
            if Path(path).suffix.lower() not in VIDEO_EXTENSIONS:
                session.messages.append(_notice(
                    f"⚠️ `{name}` is not a supported video ({', '.join(VIDEO_EXTENSIONS)})."))
            else:
                try:
                    from videoqa.video import probe_video

                    info = probe_video(path)
                except VideoQAError as e:
                    session.messages.append(_notice(f"⚠️ Cannot use `{name}`: {_reason(e)}"))
                else:
                    session.clip = path
                    preview = path if Path(path).suffix.lower() in BROWSER_PLAYABLE else None
                    session.messages.append(_notice(
                        f"Loaded `{name}`: {info.duration_s:.1f} s, {info.fps:.1f} fps, "
                        f"{info.width}×{info.height}, {info.codec}. Ask a question."))
        return session, list(session.messages), preview, None, ""

    def pick_example(name: str | None, session: ChatSession):
        match = [p for p in samples if p.name == name]
        return load_clip(str(match[0]) if match else None, session)

    def clear(session: ChatSession):
        """Forget the conversation (and heatmaps, stats); keep the clip."""
        session.restart(session.clip)
        return session, [], None, ""

    def ask(question: str, session: ChatSession, method: str, k: float | None, r: str, frames: float,
            show_scores: bool):
        """Stream one answer into the chat; on success also the heatmaps and the stats."""
        epoch = session.epoch
        messages = list(session.messages)

        def say(text: str, gallery=None, stats=None) -> tuple:
            """Show the chat (the last message set to `text`) and keep it in the session."""
            if session.epoch != epoch:  # a new clip or Clear meanwhile: this answer is no longer wanted
                return (gr.skip(),) * 5
            messages[-1] = {"role": "assistant", "content": text}
            session.messages = list(messages)
            keep = gr.skip()  # heatmaps and stats of the last answer stay until a new one is complete
            return session, list(messages), keep if gallery is None else gallery, stats or keep, ""

        question = (question or "").strip()
        if not question:
            messages.append(None)
            yield say("⚠️ Type a question first.")
            return
        messages.append({"role": "user", "content": question})
        messages.append(None)
        if session.clip is None:
            yield say("⚠️ Upload a clip (or pick an example) first.")
            return
        yield say("")
        text, answer = "", None
        try:
            cfg = PruneConfig(method=method, k=default.k if k is None else int(k), r=parse_r(r),
                              rank_by=default.rank_by, seed=default.seed, important_ratio=default.important_ratio)
            for item in qa.stream(session.clip, question, history=list(session.turns), prune=cfg,
                                  frames=int(frames or 0) or None):
                if session.epoch != epoch:
                    return  # stop generating: nobody is waiting for this answer
                if isinstance(item, str):
                    text += item
                    yield say(text)
                else:
                    answer = item
        except VideoQAError as e:
            yield say(f"{text}\n\n⚠️ {_reason(e)}".strip())
            return
        except Exception as e:  # a bug, not the user's fault: log it, tell the user, keep serving
            log.exception("answering %r about %s failed", question, session.clip)
            yield say(f"⚠️ internal error ({type(e).__name__}: {e}); see the server log.")
            return
        if session.epoch != epoch:
            return
        gallery = render_heatmaps(answer.clip, answer.kept, vp.size, vp.crop_size, show_scores=show_scores)
        if cache_dir is not None:
            sweep_cache(cache_dir, max_age_s)
        session.turns = [*session.turns, (question, answer.text)]
        yield say(answer.text or "(empty answer)", gallery, format_stats(answer))

    with gr.Blocks(title="videoqa", analytics_enabled=False, delete_cache=(1800, int(max_age_s))) as app:
        session = gr.State(ChatSession())
        gr.Markdown(
            f"### videoqa — {qa.name}\n"
            f"{dims.n_layers} LLM layers · {dims.tokens_per_frame} tokens per frame ({dims.grid}×{dims.grid} "
            f"patches + CLS) · {qa.device} {str(qa.dtype).removeprefix('torch.')}"
        )
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=280):
                # No file_types filter: Gradio would reject other files with a toast; we answer in the chat.
                upload = gr.File(label="Clip (" + " ".join(VIDEO_EXTENSIONS) + ")", type="filepath",
                                 elem_id="upload")
                example = gr.Dropdown(
                    choices=[p.name for p in samples], value=None, label="…or an example from samples/clips",
                    interactive=bool(samples), visible=True,
                    info=None if samples else "no example clips in samples/clips yet",
                )
                preview = gr.Video(label="Preview", interactive=False, height=200)
                with gr.Accordion("Pruning", open=True):
                    method = gr.Radio(list(METHODS), value=default.method, label="Method", elem_id="method")
                    k = gr.Number(value=default.k, precision=0, minimum=1, maximum=dims.n_layers - 1,
                                  label=f"K (FastV layer, 1..{dims.n_layers - 1})")
                    r = gr.Textbox(value=str(default.r), label="R (share dropped, 0..1) or auto", max_lines=1)
                    frames = gr.Slider(0, MAX_FRAMES, value=qa.frames or 0, step=1,
                                       label="Frames (0 = default / auto)")
                    show_scores = gr.Checkbox(False, label="Colour patches by attention score")
            with gr.Column(scale=2):
                chat = gr.Chatbot(label="Chat", height=420, elem_id="chat")
                with gr.Row():
                    question = gr.Textbox(placeholder="Ask about the clip…", show_label=False, scale=5,
                                          max_lines=4, elem_id="question")
                    send = gr.Button("Ask", variant="primary", scale=1, elem_id="ask")
                    reset = gr.Button("Clear", scale=1, elem_id="clear")
                stats = gr.Markdown(elem_id="stats")
        gallery = gr.Gallery(label="Kept visual tokens per frame (as the model saw it; dimmed = dropped)",
                             columns=4, height=None, format="png", object_fit="contain", elem_id="heatmaps")

        # Cheap events run outside the model's single slot so an upload is never stuck behind an answer.
        upload.change(load_clip, [upload, session], [session, chat, preview, gallery, stats],
                      concurrency_limit=None, api_name="load_clip")
        example.input(pick_example, [example, session], [session, chat, preview, gallery, stats],
                      concurrency_limit=None, api_name="pick_example")
        reset.click(clear, [session], [session, chat, gallery, stats], concurrency_limit=None,
                    api_name="clear")
        ask_inputs = [question, session, method, k, r, frames, show_scores]
        ask_outputs = [session, chat, gallery, stats, question]
        send.click(ask, ask_inputs, ask_outputs, api_name="ask")
        question.submit(ask, ask_inputs, ask_outputs, api_visibility="private")
    return app


def launch(app: gr.Blocks, *, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
           auth: tuple[str, str] | None = None, max_file_size: str | int = "200mb", queue_size: int = 8,
           samples_dir: str | Path | None = DEFAULT_SAMPLES, block: bool = True):
    """Serve `app`: one answer at a time (one model), a bounded queue, size-limited uploads.

    Only Gradio's upload/cache folder and `samples_dir` are served; the cache is emptied on shutdown.
    Returns Gradio's (app, local_url, share_url) when `block` is False.
    """
    app.queue(default_concurrency_limit=1, max_size=queue_size)
    allowed = [str(Path(samples_dir).resolve())] if samples_dir and Path(samples_dir).is_dir() else []
    # System fonts: the default theme fetches Google Fonts, which an offline machine cannot reach.
    theme = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"],
                           font_mono=["ui-monospace", "monospace"])
    return app.launch(
        server_name=host, server_port=port, share=share, auth=auth, max_file_size=max_file_size,
        allowed_paths=allowed, prevent_thread_lock=not block, ssr_mode=False, show_error=False,
        quiet=not block, theme=theme, css=CSS, footer_links=["api"],
    )
