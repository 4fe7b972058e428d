"""The web chat: upload a clip, ask about it, see which visual tokens the model kept for each frame, or
compare every pruning method on the same question.

Thin on purpose: the page is laid out here and wired to `ChatActions`, which calls `VideoQA.stream`.

    qa = VideoQA.from_pretrained("demo")
    app = build_app(qa)
    launch(app)              # 127.0.0.1:7860, queue of 8, 200 MB uploads
"""

from __future__ import annotations

import functools
import inspect
import json
import tempfile
from pathlib import Path

import gradio as gr

from videoqa.model import packaged_path
from videoqa.pruning import REGISTRY
from videoqa.video.samplers import SAMPLERS

from .actions import N_CHIPS, ChatActions
from .controls import frames_that_fit, k_range, parse_r, sampler_info
from .media import VIDEO_EXTENSIONS, list_examples, list_samples, sweep_cache
from .model_info import ModelInfo, describe
from .session import ChatSession
from .streams import ANSWER
from .style import CSS, FOCUS_QUESTION_BOX, SEEK_ON_CLICK, SHOW_QUESTION_BOX
from .texts import PRUNING_DOC, WHAT_IT_SHOWS, auto_r_note, keeps_everything, methods_html, pruning_link
from .turns import is_results, legend_html

__all__ = ["CSS", "DEFAULT_SAMPLES", "build_app", "launch", "list_samples", "parse_r", "sweep_cache"]

DEFAULT_SAMPLES = packaged_path("clips")
LONG_SAMPLES = {"demo-long": packaged_path("clips_long")}  # a model's own examples, when it has them
MODEL = {"concurrency_id": "model", "concurrency_limit": 1}  # one answer at a time: one model


def placeholder(card: ModelInfo, clip_name: str | None) -> str:
    """What the empty chat says: what to do next (the model card is in the header, once)."""
    if clip_name:
        return f"“{clip_name}” is loaded: ask about it, or click a suggested question below."
    return "Upload a clip or pick an example, then ask about it."


def example_dir(qa, samples_dir: str | Path | None) -> str | Path | None:
    """The examples the page offers: a model's own (demo-long's long clips with event questions) unless the
    server was given a folder of its own."""
    if samples_dir is not None and Path(samples_dir) == Path(DEFAULT_SAMPLES) and qa.name in LONG_SAMPLES:
        return LONG_SAMPLES[qa.name]
    return samples_dir


def build_app(qa, samples_dir: str | Path | None = DEFAULT_SAMPLES, cache_dir: str | Path | None = None,
              max_age_s: float = 3600) -> gr.Blocks:
    """A Blocks app around a loaded `VideoQA` (loaded once, shared by every session).

    `cache_dir`: Gradio's upload/cache folder when it belongs to this app alone (`videoqa serve` makes
    one per process); previews and exports go there too, and files older than `max_age_s` there are
    swept after each answer.
    """
    work_dir = Path(cache_dir) / "videoqa" if cache_dir else Path(tempfile.mkdtemp(prefix="videoqa-ui-"))
    (work_dir / "heatmaps").mkdir(parents=True, exist_ok=True)
    samples_dir = example_dir(qa, samples_dir)
    examples = list_examples(samples_dir, work_dir)
    dims = qa.dims
    most = frames_that_fit(qa)
    with gr.Blocks(title="videoqa", analytics_enabled=False, delete_cache=(1800, int(max_age_s))) as app:
        session = gr.State(ChatSession())  # each tab gets its own copy
        card = describe(qa)
        # Keyboard users: the examples are the first thing to pick, but far down the tab order.
        gr.Markdown(f"<a class='skip-link' href='#examples'>Skip to the examples</a>\n\n### videoqa — {qa.name}\n"
                    f"{WHAT_IT_SHOWS} {pruning_link()}", elem_id="intro")
        forms = (f"<details id='question-forms'><summary>The questions it was trained on, and its answer words"
                 f"</summary>\n\n{card.forms_markdown()}\n\n</details>") if card.demo else ""
        gr.Markdown(
            f"{card.markdown()} {dims.n_layers} LLM layers, {dims.tokens_per_frame} "
            f"visual tokens per frame ({dims.grid}×{dims.grid} patches + 1 summary token).\n{forms}",
            elem_id="model-card",
        )
        with gr.Row(equal_height=False, elem_id="main"):
            with gr.Column(scale=3, min_width=340, elem_id="main-col"):
                with gr.Tabs(elem_id="tabs"):
                    with gr.Tab("Chat", elem_id="chat-tab"):
                        ui = _chat_tab(card)
                    with gr.Tab("Compare methods", elem_id="compare-tab"):
                        ui |= _compare_tab(qa.prune.method, auto_r_note(qa))
            with gr.Column(scale=1, min_width=280, elem_id="clip-col"):
                ui |= _clip_panel(qa, examples, most)
        ui["session"] = session
        ui["api"] = gr.Button(visible=False)  # trigger of the endpoints meant for API clients only
        ui["example_name"] = gr.Textbox(visible=False, label="Example clip name")

        keep = frozenset(str(ex.poster) for ex in examples)  # the example buttons' thumbnails
        actions = ChatActions(qa, examples, work_dir, cache_dir, max_age_s, keep, most)
        _wire(ui, actions)
        _wire_api(ui, actions)
    # What `launch` serves besides Gradio's own files: the examples, each answer's heatmaps, the pruning doc.
    app.videoqa_served = [p for p in (samples_dir, work_dir / "heatmaps", PRUNING_DOC)
                          if p is not None and Path(p).exists()]
    return app


def _chat_tab(card: ModelInfo) -> dict:
    ui = {}
    ui["chat"] = gr.Chatbot(
        label="Chat", show_label=False, height=460, elem_id="chat", render_markdown=False, layout="bubble",
        placeholder=placeholder(card, None), buttons=["copy", "copy_all"],  # no "share": it needs a Space
    )
    with gr.Row(elem_id="ask-row"):
        ui["question"] = gr.Textbox(placeholder="Ask about the clip…", show_label=False, label="Question",
                                    scale=5, max_lines=4, elem_id="question")
        ui["send"] = gr.Button("Ask", variant="primary", scale=1, min_width=80, elem_id="ask")
    # Suggested questions for the loaded clip: one click puts one in the box.
    with gr.Row(elem_id="chips"):
        for i in range(N_CHIPS):
            ui[f"chip_{i}"] = gr.Button("", size="sm", visible=False, elem_classes=["chip"], min_width=0,
                                        elem_id=f"chip-{i}")
    with gr.Row(elem_id="chat-buttons"):
        ui["stop"] = gr.Button("Stop", size="sm", interactive=False, min_width=60, elem_id="stop")
        ui["retry"] = gr.Button("Retry", size="sm", min_width=60, elem_id="retry")
        ui["clear"] = gr.Button("Clear", size="sm", min_width=60, elem_id="clear")
        ui["export"] = gr.Button("Export JSON", size="sm", min_width=60, elem_id="export")
    # One line for notices about the controls ("Type a question first."): not turns of the conversation.
    ui["notice"] = gr.Markdown("", elem_id="notice")
    ui["export_file"] = gr.File(label="Conversation (JSON)", visible=False, elem_id="export-file")
    # The latest answer's heatmaps and stats as outputs of their own, for API clients; the page shows each
    # answer's in the chat, under the answer.
    ui["gallery"] = gr.Gallery(label="Kept visual tokens per frame", format="png", visible=False, elem_id="heatmaps")
    ui["stats"] = gr.Markdown(label="Answer stats", visible=False, elem_id="stats")
    return ui


def _compare_tab(default_method: str, r_note: str) -> dict:
    ui = {"compare_answers": [], "compare_galleries": [], "compare_summaries": []}
    gr.Markdown("The same question answered with every pruning method, side by side (K, R, frames and sampler "
                "from the Pruning settings; no chat history). Under each frame: its number, its time and the "
                "patches kept of all (+ those merged into kept ones)." + (f" {r_note}" if r_note else ""),
                elem_id="compare-intro")
    gr.HTML(legend_html(False).replace("</div>", " With “Colour patches by attention score” ticked, colour is "
                                       "the method’s score instead, low<span class='scale'></span>high.</div>"),
            elem_id="compare-legend")
    with gr.Row(elem_id="compare-ask"):
        ui["compare_question"] = gr.Textbox(placeholder="Question to compare…", show_label=False,
                                            label="Question to compare", scale=5, max_lines=4,
                                            elem_id="compare-question")
        ui["compare_run"] = gr.Button("Compare", variant="primary", scale=1, min_width=110, elem_id="compare-run")
    ui["compare_status"] = gr.Markdown(label="Compare status", elem_id="compare-status")
    with gr.Row(equal_height=False, elem_id="compare"):
        for method in REGISTRY.names():
            with gr.Column(min_width=200, elem_id=f"compare-{method}", elem_classes=["compare-method"]):
                gr.Markdown(f"#### {method}" + (" <small>(chat’s default)</small>" if method == default_method else "")
                            + f"\n<p class='method-help'>{REGISTRY.get(method).help}</p>",
                            elem_classes=["compare-head"])
                ui["compare_answers"].append(gr.Textbox(label=f"{method}: answer", show_label=False, lines=2,
                                                        interactive=False,
                                                        elem_classes=["compare-answer"]))
                ui["compare_summaries"].append(gr.Markdown(label=f"{method}: kept tokens and FLOPs",
                                                           elem_classes=["compare-summary"]))
                ui["compare_galleries"].append(gr.Gallery(
                    label=f"{method}: kept tokens per frame", show_label=False, columns=2, height=None, format="png",
                    object_fit="contain", elem_classes=["heatmaps", "compare-heatmaps"]))
    return ui


def _clip_panel(qa, examples, most: int) -> dict:
    ui = {}
    # No file_types filter: Gradio would reject other files with a toast; we answer in the chat.
    ui["upload"] = gr.File(label="Upload a clip (" + " ".join(VIDEO_EXTENSIONS) + ")", type="filepath",
                           elem_id="upload", height=130)
    ui |= _examples(examples)
    # The clip's name above its preview, not a label laid over the picture.
    ui["clip_name"] = gr.Markdown("", elem_id="clip-name")
    ui["preview"] = gr.Video(label="Current clip", show_label=False, interactive=False, height=200,
                             elem_id="preview")
    dims, default = qa.dims, qa.prune
    with gr.Accordion("Pruning", open=True, elem_id="settings"):
        # A dropdown, each method with its one-line description: the list grows with the registry.
        ui["method"] = gr.Dropdown([(f"{name} — {REGISTRY.get(name).help}", name) for name in REGISTRY.names()],
                                   value=default.method, label="Method", elem_id="method")
        gr.HTML(methods_html(), elem_id="methods")
        # The K box: for the methods that prune inside the LLM at layer K. No bounds or rounding here: Gradio
        # would refuse a value with a bare "Error" badge, or turn 2.5 into 2; the action says what is wrong.
        low, high = k_range(dims.n_layers)
        k = REGISTRY.option("k")
        ui["k"] = gr.Number(value=k.default if default.k is None else default.k, precision=None,
                            label=f"K (the LLM layer where in-LLM methods prune, {low}..{high})", elem_id="k")
        r = "0.5" if keeps_everything(qa) else str(default.r)
        ui["r"] = gr.Textbox(value=r, label="R: share of visual tokens dropped (0..1), or auto", max_lines=1,
                             elem_id="r", info=auto_r_note(qa) or None)
        # A number box, not a slider: a slider silently clamps 99 or -3; the chat says what is wrong instead.
        ui["frames"] = gr.Number(value=min(qa.frames or 0, most), precision=None, elem_id="frames",
                                 label=f"Frames: 0 = the model's default; at most {most} (what fits its context)")
        # Typed values allowed: Gradio would refuse another name with a bare error; the chat says what is wrong.
        ui["sampler"] = gr.Dropdown(list(SAMPLERS), value=qa.sampler, label="Frame sampler",
                                    info=sampler_info(qa.sampler), allow_custom_value=True, elem_id="sampler")
        ui["show_scores"] = gr.Checkbox(False, label="Colour patches by attention score", elem_id="show-scores",
                                        info="For the next answers; each answer's legend says how it is coloured")
    return ui


def _examples(examples) -> dict:
    """One button per example (thumbnail and suggested question): each a tab stop, Enter or a click loads it."""
    ui = {"example_buttons": []}
    with gr.Column(elem_id="examples", visible=bool(examples), variant="compact"):
        gr.Markdown("**Examples**: one click loads the clip and its question", elem_id="examples-title")
        for i, ex in enumerate(examples):
            ui["example_buttons"].append(gr.Button(ex.question, icon=str(ex.poster), size="sm",
                                                   elem_classes=["example"], elem_id=f"example-{i}"))
    return ui


def _wire(ui: dict, actions: ChatActions) -> None:
    """The page's events. All private: API clients get the endpoints of `_wire_api`. Outputs are named: each
    event updates the components `names` lists, from the action's dict of the same names."""
    s = ui["session"]
    settings = [ui["method"], ui["k"], ui["r"], ui["frames"], ui["show_scores"], ui["sampler"]]
    question = ui["question"]
    instant = {"queue": False, "show_progress": "hidden", "api_visibility": "private"}

    def on(trigger, fn, inputs, names: tuple[str, ...], **kwargs):
        return trigger(wired(fn, names), inputs, [ui[n] for n in names], **kwargs)

    # Loading a clip never waits behind an answer; it empties the upload box for the next file.
    chips = tuple(f"chip_{i}" for i in range(N_CHIPS))
    loaded = ("chat", "preview", "clip_name", "gallery", "stats", "upload", "export_file", "stop", "notice", *chips)
    loads = [on(ui["upload"].upload, actions.load_upload, [ui["upload"], s], loaded, api_name="ui_upload", **instant)]
    for i, button in enumerate(ui["example_buttons"]):
        def pick(session, i=i):
            return actions.load_example(i, session)

        picked = on(button.click, pick, [s], (*loaded, "question", "compare_question"), api_name=f"ui_example_{i}",
                    **instant)
        picked.then(None, None, None, js=FOCUS_QUESTION_BOX, queue=False)  # Enter on an example: type next
        loads.append(picked)
    for name in chips:  # a suggested question goes into the box (in the page: no request)
        ui[name].click(None, ui[name], question, js="(q) => q", queue=False).then(
            None, None, None, js=FOCUS_QUESTION_BOX, queue=False)
    # A new clip: the last comparison was about the old one. Emptied in the page (no request to the server).
    no_comparison = json.dumps(["", *["", None, ""] * len(ui["compare_answers"])])
    for load in loads:
        load.then(None, None, _compare_outputs(ui), js=f"() => {no_comparison}", queue=False)
        # On a phone the clip box and examples are above the chat: bring the question box into view.
        load.then(None, None, None, js=SHOW_QUESTION_BOX, queue=False)

    # Asking: the question moves into the chat at once, then the model answers the tab's queue.
    enqueue = functools.partial(gr.on, [ui["send"].click, question.submit])
    asked = ("chat", "stop", "notice", "export_file")  # a question asked: an exported file is out of date
    for started in (
        on(enqueue, actions.enqueue, [question, s, *settings], ("question", *asked), trigger_mode="multiple",
           api_name="ui_enqueue", **instant),
        on(ui["retry"].click, actions.retry, [s, *settings], asked, trigger_mode="multiple", api_name="ui_retry",
           **instant),
    ):
        answering = on(started.success, actions.run, [s], ("chat", "gallery", "stats", "stop"),
                       trigger_mode="multiple", show_progress="minimal", api_visibility="private", api_name=False,
                       **MODEL)
        # The queue was full: the question goes back to the box. Every output of the refused answer is an
        # output here too (gallery and stats left as they are), which takes the error badge off each of them.
        on(answering.failure, actions.refused, [question, s], ("chat", "question", "gallery", "stats", "stop"),
           api_name=False, **instant)
    stopping = on(ui["stop"].click, actions.stop, [s], ("chat", "notice", "stop", "export_file"),
                  api_name="ui_stop", **instant)
    on(stopping.then, actions.after_stop, [s], ("chat", "stop"), api_name=False, **instant)
    cleared = ("chat", "gallery", "stats", "export_file")
    # The chat's own trash icon does the same reset as Clear (the model forgets too, not just the display).
    # The emptied chat then says the clip is still loaded.
    for trigger, name in ((ui["clear"].click, "ui_clear"), (ui["chat"].clear, "ui_chat_clear")):
        on(trigger, actions.clear, [s], cleared, api_name=name, **instant).then(
            lambda session: gr.update(placeholder=placeholder(actions.card, session.clip_name)), [s], [ui["chat"]],
            **instant)
    on(ui["export"].click, actions.export, [s], ("export_file", "notice"), api_name="ui_export", **instant)

    comparing = gr.on([ui["compare_run"].click, ui["compare_question"].submit], actions.compare,
                      _compare_inputs(ui), _compare_outputs(ui), show_progress="minimal", api_name="ui_compare",
                      api_visibility="private", **MODEL)
    comparing.failure(lambda: "The server is busy with other questions right now: compare again in a moment.",
                      None, [ui["compare_status"]], api_name=False, **instant)


def _wire_api(ui: dict, actions: ChatActions) -> None:
    """Named endpoints for API clients, one call per action, plain values out, each returning the outputs
    `names` lists (by name: a page-only output such as the emptied upload box is left out). They are triggered
    by a hidden button the page never clicks."""
    s = ui["session"]
    settings = [ui["method"], ui["k"], ui["r"], ui["frames"], ui["show_scores"], ui["sampler"]]

    def api(fn, inputs, names: tuple[str, ...] | None, **kwargs):
        outputs = _compare_outputs(ui) if names is None else [ui[n] for n in names]
        ui["api"].click(wired(fn, names, api=True), inputs, outputs, **kwargs)

    loaded = ("chat", "preview", "gallery", "stats")
    api(actions.load_upload, [ui["upload"], s], loaded, api_name="load_clip", queue=False)
    api(actions.load_named, [ui["example_name"], s], (*loaded, "question"), api_name="load_example", queue=False)
    api(actions.ask, [ui["question"], s, *settings], ANSWER, api_name="ask", **MODEL)
    api(actions.retry_api, [s, *settings], ANSWER, api_name="retry", **MODEL)
    api(actions.stop, [s], ("chat",), api_name="stop", queue=False)
    api(actions.clear, [s], ANSWER, api_name="clear", queue=False)
    api(actions.export, [s], ("export_file",), api_name="export", queue=False)
    api(actions.compare, _compare_inputs(ui), None, api_name="compare", **MODEL)


def _compare_inputs(ui: dict) -> list:
    return [ui["compare_question"], ui["session"], ui["k"], ui["r"], ui["frames"], ui["show_scores"], ui["sampler"]]


def _compare_outputs(ui: dict) -> list:
    outputs = [ui["compare_status"]]
    for triple in zip(ui["compare_answers"], ui["compare_galleries"], ui["compare_summaries"], strict=True):
        outputs += triple
    return outputs


def wired(fn, names: tuple[str, ...] | None, api: bool = False):
    """`fn`, whose outputs are dicts keyed by component name, for an event whose outputs are the components
    `names`, in that order; a name the dict lacks is left as it is (gr.skip()). On the page a name outside
    `names` is a wiring bug and raises; an API endpoint shows only the outputs it names. With `api`, each
    gr.update(...) becomes just its value (visibility and labels only matter on the page). `names` None:
    `fn`'s outputs are already in the event's order (compare's)."""

    def arrange(out) -> tuple:
        if names is not None:
            if not api and set(out) - set(names):
                raise KeyError(f"{fn.__name__} updates {sorted(set(out) - set(names))}, which are not wired")
            out = tuple(out.get(n, gr.skip()) for n in names)
        if api:
            out = tuple(v["value"] if isinstance(v, dict) and v.get("__type__") == "update" and "value" in v
                        else v for v in out)
            if names is not None and "chat" in names:  # each answer's results block is the page's
                at = names.index("chat")
                if isinstance(out[at], list):
                    out = (*out[:at], [m for m in out[at] if not is_results(m)], *out[at + 1:])
        return out[0] if len(out) == 1 else out

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args):
            for out in fn(*args):
                yield arrange(out)

        return stream

    @functools.wraps(fn)
    def call(*args):
        return arrange(fn(*args))

    return call


def launch(app: gr.Blocks, *, host: str = "127.0.0.1", port: int = 7860, share: bool = False,
           auth: tuple[str, str] | None = None, max_file_size: str | int = "200mb", queue_size: int = 8,
           samples_dir: str | Path | None = DEFAULT_SAMPLES, block: bool = True):
    """Serve `app`: one answer at a time (one model), a bounded queue, size-limited uploads.

    Only Gradio's upload/cache folder and `samples_dir` are served; the cache is emptied on shutdown.
    Returns Gradio's (app, local_url, share_url) when `block` is False.
    """
    app.queue(default_concurrency_limit=1, max_size=queue_size)
    allowed = [str(Path(samples_dir).resolve())] if samples_dir and Path(samples_dir).is_dir() else []
    allowed += [str(Path(p).resolve()) for p in getattr(app, "videoqa_served", [])]
    # System fonts: the default theme fetches Google Fonts, which an offline machine cannot reach.
    theme = gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"],
                           font_mono=["ui-monospace", "monospace"])
    return app.launch(
        server_name=host, server_port=port, share=share, auth=auth, max_file_size=max_file_size,
        allowed_paths=allowed, prevent_thread_lock=not block, ssr_mode=False, show_error=False,
        quiet=not block, theme=theme, css=CSS, js=SEEK_ON_CLICK, footer_links=["api"],
    )
