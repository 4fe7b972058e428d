"""The web chat's behaviour as an API client sees it (issue 22): a served app driven by gradio_client.
Each test names the issue's item it covers. Layout and looks are tested in test_browser.py."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port
from gradio_client import Client, handle_file
from helpers.clipgen import write_clip, write_event_clip
from test_ui import text_of  # the one reader of what a chat message shows
from videoqa.ui.app import build_app, launch

from videoqa.model_card import CARD_FILE, SAMPLERS
from videoqa.pipeline import VideoQA
from videoqa.pruning import REGISTRY, PruneConfig


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    # A clip of its own: Gradio caches uploads by content in a folder other servers on this machine share
    return write_clip(tmp_path_factory.mktemp("behaviour") / "walk.mp4", n_frames=31, size=(88, 56))


@pytest.fixture(scope="module")
def served(tiny_qa):
    app = build_app(tiny_qa, samples_dir=None)
    _, url, _ = launch(app, port=free_port(), samples_dir=None, block=False)
    yield app, url
    app.close()


@pytest.fixture
def client(served) -> Client:
    """A fresh browser session (its own clip and conversation)."""
    return Client(served[1], verbose=False, download_files=False)


def texts(chat: list[dict]) -> list[str]:
    return [text_of(m) for m in chat]


def ask(client: Client, question: str, method="fastv", k=2, r="0.5", frames=0, scores=False, sampler=None):
    """(chat, heatmaps, stats) once the answer is complete. `sampler` None: the control's default."""
    extra = () if sampler is None else (sampler,)
    return client.predict(question, method, k, r, frames, scores, *extra, api_name="/ask")


def load(client: Client, path: Path) -> list[dict]:
    return client.predict(handle_file(str(path)), api_name="/load_clip")[0]


# -- item 1: K out of range -----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [0, -1, 4, 99, 2.5])
def test_bad_k_gets_a_message_in_the_chat(client, clip, tiny_qa, k):
    assert tiny_qa.dims.n_layers == 4
    load(client, clip)
    chat, _, _ = ask(client, "What colour is it?", k=k)  # before: gradio.exceptions.AppError, no message
    last = texts(chat)[-1]
    assert last.startswith("⚠️ K must be a whole number from 1 to 3"), last
    assert f"got {k:g}" in last


def test_k_control_says_its_range(served, tiny_qa):
    app, _ = served
    k = next(b for b in app.blocks.values() if getattr(b, "label", None) and str(b.label).startswith("K "))
    assert "1..3" in k.label
    assert k.precision is None  # 2.5 reaches the action (refused there), not rounded to 2 on the way


# -- item 13: privacy -----------------------------------------------------------------------------------

def test_a_session_does_not_learn_that_another_encoded_the_same_clip(served, clip, tiny_qa):
    first, second = (Client(served[1], verbose=False, download_files=False) for _ in range(2))
    load(first, clip)
    ask(first, "What colour is it?")
    load(second, clip)  # the same file from another user: the server's encode cache holds it
    before = tiny_qa.encode_count
    _, _, stats = ask(second, "What colour is it?")
    assert tiny_qa.encode_count == before  # it was a cache hit ...
    assert "cached" not in stats and "already encoded" not in stats  # ... that this session is not told about
    _, _, stats = ask(second, "Where does it go?")
    assert "cached (follow-up, no re-encode)" in stats  # its own follow-up still says so


# -- item 3: long conversations -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served_short(short_context_qa):
    app = build_app(short_context_qa, samples_dir=None)
    _, url, _ = launch(app, port=free_port(), samples_dir=None, block=False)
    yield url
    app.close()


def test_a_40_turn_conversation_keeps_its_frames_and_says_once_that_old_turns_are_dropped(
        served_short, short_context_qa, clip):
    c = Client(served_short, verbose=False, download_files=False)
    load(c, clip)
    history = []
    for turn in range(40):
        q = f"Follow-up number {turn}: what colour is the shape now?"
        chat, gallery, stats = ask(c, q)
        assert texts(chat)[-1] != "…" and "⚠️" not in texts(chat)[-1], (turn, texts(chat)[-1])
        assert len(gallery) == 8, turn  # the planned frames, every turn (before: 8, 7, 5, 3, 1, then errors)
        assert "8 sampled" in stats
        history.append((q, next(t for t in reversed(texts(chat)) if not t.startswith("ℹ️"))))
    notices = [t for t in texts(chat) if "no longer fits the model's context" in t]
    assert len(notices) == 1
    assert "turns left out" in stats
    # The last answer is the pipeline's for the same conversation (which drops the same oldest turns).
    direct = short_context_qa.ask(clip, history[-1][0], history=history[:-1])
    assert direct.stats.history_dropped > 0 and direct.text == history[-1][1]


# -- item 2: heatmap images are never rewritten while served --------------------------------------------

def test_every_heatmap_of_repeated_compare_runs_is_a_complete_png_never_rewritten(client, clip, monkeypatch):
    """The issue's check: every heatmap URL of consecutive Compare runs, fetched while the next run renders, is
    a whole PNG. A rewrite in place (the cause) is only sometimes caught by a fetch, so every in-place rewrite of
    an existing file is also recorded, and none may hit a served file. The recording catches a rewrite on the
    second identical run already; three runs (the issue had ten, 7 minutes of CI) leave two fetch windows."""
    import io
    import pathlib
    import threading

    import httpx
    from PIL import Image

    rewritten: set[str] = set()
    write_bytes = pathlib.Path.write_bytes

    def recording(self, data):
        if self.exists():
            rewritten.add(str(self.resolve()))
        return write_bytes(self, data)

    monkeypatch.setattr(pathlib.Path, "write_bytes", recording)
    load(client, clip)
    served: set[str] = set()
    bad: list[str] = []
    fetchers = []

    def fetch(urls: list[str]) -> None:
        with httpx.Client(timeout=30) as http:
            for url in urls:
                try:
                    Image.open(io.BytesIO(http.get(url).content)).load()  # a truncated PNG fails here
                except Exception as e:  # noqa: BLE001 - any failure to fetch a whole image counts
                    bad.append(f"{url}: {type(e).__name__}: {e}")

    for run in range(3):  # identical runs render identical heatmaps: the case that rewrote files
        status, *per_method = client.predict("What is happening?", 2, "0.5", 0, False, api_name="/compare")
        assert status.startswith("Compared"), status
        urls = []
        for method, gallery in zip(REGISTRY.names(), per_method[1::3], strict=True):
            # a frame each the LLM saw: `frames` samples 4 of the 8 at R=0.5
            assert len(gallery) == (4 if REGISTRY.get(method).reduces_frames else 8), (run, per_method[0::3])
            served |= {str(pathlib.Path(item["image"]["path"]).resolve()) for item in gallery}
            urls += [item["image"]["url"] for item in gallery]
        fetchers.append(threading.Thread(target=fetch, args=(urls,)))
        fetchers[-1].start()
    for t in fetchers:
        t.join()
    assert not bad, bad[:3]
    assert not served & rewritten, sorted(served & rewritten)[:3]


# -- item 6: the Frames control offers what fits --------------------------------------------------------

def test_frames_control_is_bounded_by_the_context_and_a_capped_request_says_why(served_short, short_context_qa,
                                                                                  clip):
    from videoqa.pruning.budget import ANSWER_RESERVE, context_room, frame_cap

    dims = short_context_qa.dims
    c = Client(served_short, verbose=False, download_files=False)
    info = c.view_api(return_format="dict", print_info=False)["named_endpoints"]["/ask"]["parameters"]
    frames = next(p for p in info if p["parameter_name"] == "frames")
    # Independent: the frames whose unpruned tokens fit beside a one-token question and the answer's room.
    n_text = short_context_qa.text_tokens("?")
    most = frame_cap(dims, context_room(dims, n_text, ANSWER_RESERVE), False, 0.0)
    assert most < 32 and f"at most {most}" in frames["label"]  # before: "Frames (0 = default / auto)", to 32
    # One more, or fewer than none, is refused with a line saying the range (a slider clamped them silently).
    load(c, clip)
    for bad in (most + 1, -3):
        chat, _, _ = ask(c, "What colour?", frames=bad)
        assert f"Frames must be a whole number from 0 (the default) up to {most}" in texts(chat)[-1], texts(chat)
    # A long question leaves room for fewer frames than asked: the chat says why it used fewer.
    long_q = "Looking closely at every single part of the clip, " * 12 + "what colour is it?"
    chat, gallery, _ = ask(c, long_q, r="auto", frames=most)
    assert len(gallery) < most
    assert any(f"{most} frames" in t and f"using {len(gallery)} frames" in t for t in texts(chat)), texts(chat)


# -- item 12: R as set ------------------------------------------------------------------------------------

def test_stats_say_an_ignored_r_and_show_enough_digits(client, clip):
    load(client, clip)
    _, _, stats = ask(client, "What colour?", method="none", r="0.7")
    row = next(line for line in stats.splitlines() if line.startswith("| R "))
    assert "ignored" in row and "0.70" in row and "set by you" not in row  # before: "0.00 (set by you)"
    _, _, stats = ask(client, "What colour?", method="fastv", r="0.999")
    row = next(line for line in stats.splitlines() if line.startswith("| R "))
    assert "0.999" in row and "1.00" not in row  # before: "1.00 (set by you)"


# -- issue 25 item 2: the frame sampler -----------------------------------------------------------------

@pytest.fixture(scope="module")
def event_clip(tmp_path_factory) -> Path:
    """A 30-40 s clip whose change is concentrated in a brief event 8 uniform frames miss."""
    return write_event_clip(tmp_path_factory.mktemp("sampler") / "event.mp4")


def frame_times(gallery: list[dict]) -> list[float]:
    """The time in each heatmap's caption ("#3 · 1.25 s · kept …")."""
    return [float(re.search(r"· (\d+(?:\.\d+)?) s", g["caption"]).group(1)) for g in gallery]


def test_the_sampler_control_places_frames_as_the_library_does_and_the_captions_say_when(client, event_clip,
                                                                                        tiny_qa):
    load(client, event_clip)
    q = "What happens?"
    direct = tiny_qa.ask(event_clip, q, prune=PruneConfig("fastv", 2, 0.5), sampler="content")
    n, fps = direct.clip.info.total_frames, direct.clip.info.fps
    evenly = np.linspace(0, (n - 1) / fps, 8)  # Video-LLaVA's frames: evenly spaced, to the frame
    assert direct.stats.sampler == "content" and direct.clip.timestamps != pytest.approx(evenly, abs=1 / fps)

    _, gallery, stats = ask(client, q, sampler="content")
    assert frame_times(gallery) == pytest.approx(direct.clip.timestamps, abs=0.006)  # captions: 2 decimals
    summary = stats.splitlines()[0]
    assert "(content sampler)" in summary, summary  # the one line shown names the sampler
    assert "content" in next(line for line in stats.splitlines() if line.startswith("| frames "))

    _, gallery, stats = ask(client, q, sampler="uniform")
    assert frame_times(gallery) == pytest.approx(evenly, abs=1 / fps)
    assert "(uniform sampler)" in stats.splitlines()[0]


def test_an_unknown_sampler_gets_a_message_in_the_chat_and_in_compare(client, clip):
    load(client, clip)
    chat, _, _ = ask(client, "What colour is it?", sampler="scenes")
    last = texts(chat)[-1]
    assert last.startswith("⚠️") and "'scenes'" in last and all(s in last for s in SAMPLERS), last
    status, *_ = client.predict("What colour is it?", 2, "0.5", 0, False, "scenes", api_name="/compare")
    assert status.startswith("⚠️") and "'scenes'" in status and "Nothing was compared" in status, status


def test_compare_samples_frames_with_the_chosen_sampler(client, event_clip):
    load(client, event_clip)
    status, *per_method = client.predict("What happens?", 2, "0.5", 0, False, "content", api_name="/compare")
    assert status.startswith("Compared"), status
    assert all("(content sampler)" in summary for summary in per_method[2::3]), per_method[2::3]


def test_the_sampler_control_starts_at_the_models_own_sampler(served, tiny_qa, tiny_model_dir, tmp_path, event_clip):
    app, _ = served
    control = next(b for b in app.blocks.values() if getattr(b, "elem_id", None) == "sampler")
    assert control.label == "Frame sampler" and [v for _, v in control.choices] == list(SAMPLERS)
    assert control.value == tiny_qa.sampler == "uniform"
    assert "evenly spaced" in control.info and "differ" in control.info and "floor" in control.info

    folder = tmp_path / "content-model"  # a model whose card names the content sampler
    shutil.copytree(tiny_model_dir, folder)
    (folder / CARD_FILE).write_text(json.dumps({"policy": {"sampler": "content"}}))
    qa = VideoQA.from_pretrained(str(folder), prune=PruneConfig("fastv", 2, 0.5), max_new_tokens=2)
    app = build_app(qa, samples_dir=None)
    _, url, _ = launch(app, port=free_port(), samples_dir=None, block=False)
    try:
        control = next(b for b in app.blocks.values() if getattr(b, "elem_id", None) == "sampler")
        assert control.value == "content"
        c = Client(url, verbose=False, download_files=False)
        load(c, event_clip)
        _, gallery, stats = ask(c, "What happens?")  # the control left as it is
        want = qa.ask(event_clip, "What happens?").clip.timestamps
        assert "(content sampler)" in stats.splitlines()[0]
        assert frame_times(gallery) == pytest.approx(want, abs=0.006)
    finally:
        app.close()
