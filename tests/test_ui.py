"""The web chat, driven over HTTP with gradio_client against an app launched here (tiny model, CPU).

Answers are checked against `qa.ask` called directly (greedy decoding: same clip, question, history and
pruning give the same text and the same kept tokens), so the app is shown to be a faithful, thin layer.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from helpers.clipgen import write_clip, write_text
from PIL import Image

from videoqa.pruning import PruneConfig

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client, handle_file  # noqa: E402
from videoqa.ui.app import build_app, launch, sweep_cache  # noqa: E402

from videoqa.cli.serve import parse_auth  # noqa: E402
from videoqa.pruning import REGISTRY  # noqa: E402

METHODS = REGISTRY.names()

FASTV = ("fastv", 2, "0.5")  # method, K, R as the controls send them


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("ui-media")
    samples = d / "samples"
    samples.mkdir()
    return {
        "clip": write_clip(d / "walk.mp4", n_frames=30, size=(80, 48)),
        "bad": write_text(d / "broken.mp4"),
        "samples": samples,
        "example": write_clip(samples / "example.webm", n_frames=12, size=(64, 64), fmt="webm-vp8"),
    }


@pytest.fixture(scope="module")
def served(tiny_qa, media):
    app = build_app(tiny_qa, samples_dir=media["samples"])
    _, url, _ = launch(app, port=free_port(), samples_dir=media["samples"], block=False)
    yield app, url
    app.close()


@pytest.fixture
def client(served) -> Client:
    """A fresh browser session (its own clip and conversation)."""
    return Client(served[1], verbose=False, download_files=False)


def text_of(message: dict) -> str:
    """What a chat message shows: the chat renders HTML, so plain text arrives escaped."""
    content = message["content"]
    if isinstance(content, list):  # Gradio 6 normalises messages to content blocks
        content = "".join(c.get("text", "") for c in content if c.get("type") == "text")
    return html.unescape(content)


def ask(client: Client, question: str, method="fastv", k=2, r="0.5", frames=0, scores=False):
    """Submit a question; returns (every streamed output, final (chat, heatmaps, stats))."""
    job = client.submit(question, method, k, r, frames, scores, api_name="/ask")
    final = job.result(timeout=60)
    return job.outputs(), final


def load(client: Client, path: Path) -> list[dict]:
    chat, _preview, _gallery, _stats = client.predict(handle_file(str(path)), api_name="/load_clip")
    return chat


def test_two_questions_stream_heatmaps_and_reuse_the_encoding(client, tiny_qa, media, served):
    chat = load(client, media["clip"])
    assert len(chat) == 1 and "Loaded “walk.mp4”" in text_of(chat[0]) and "3.0 s" in text_of(chat[0])

    q1, q2 = "What is happening in this video?", "What colour is it?"
    before = tiny_qa.encode_count
    outs1, (chat1, gallery1, stats1) = ask(client, q1)
    encoded = tiny_qa.encode_count
    outs2, (chat2, gallery2, stats2) = ask(client, q2)
    assert encoded <= before + 1  # at most this clip's first encoding (another test may have cached it)
    assert tiny_qa.encode_count == encoded  # the follow-up reused the cached encoding
    assert "encode cached (follow-up, no re-encode)" in stats2
    if encoded == before + 1:
        assert "encode cached" not in stats1

    # Independent: the pipeline called directly with the same inputs.
    cfg = PruneConfig(method="fastv", k=2, r=0.5)
    a1 = tiny_qa.ask(media["clip"], q1, prune=cfg)
    a2 = tiny_qa.ask(media["clip"], q2, history=[(q1, a1.text)], prune=cfg)

    # Streamed: the assistant message grows through prefixes of the final answer, token by token (after
    # a "…" placeholder shown until the first token).
    partial = [text_of(o[0][-1]) for o in outs1 if o and o[0] and o[0][-1]["role"] == "assistant"]
    partial = [p for p in partial if p != "…"]
    assert len([p for p in partial if p]) >= 2
    assert all(a1.text.startswith(p.strip()) for p in partial)
    assert [m["role"] for m in chat1] == ["assistant", "user", "assistant"]
    assert text_of(chat1[1]) == q1 and text_of(chat1[2]) == a1.text
    # The second answer saw the first turn as history (same text as the direct call with history).
    assert [text_of(m) for m in chat2[-2:]] == [q2, a2.text]
    prompt1, prompt2 = (int(re.search(r"prompt (\d+)", st).group(1)) for st in (stats1, stats2))
    assert prompt2 > prompt1  # the shorter second question carries the first turn with it

    # One heatmap per sampled frame, captions from the kept tokens.
    for gallery, answer in ((gallery1, a1), (gallery2, a2)):
        assert len(gallery) == len(answer.clip.frames) == 8
        masks = answer.kept.frame_masks()
        for f, item in enumerate(gallery):
            t = answer.clip.timestamps[f]
            summary = " + summary" if masks[f]["cls_kept"] else ""  # the frame's summary token (CLS)
            assert item["caption"] == f"#{f + 1} · {t:.2f} s · kept {len(masks[f]['patches'])}/64{summary}"
        img = Image.open(gallery[0]["image"]["path"])
        assert img.size == (256, 256)  # 64 px model view, upscaled x4 for display

    # Stats panel.
    assert f"{a1.kept.n_visual} → {a1.kept.n_kept} kept" in stats1
    assert "520 → 260 kept (50.0%)" in stats1  # 8 frames x 65 tokens, R = 0.5
    assert f"{a1.flops.ratio:.3f}×" in stats1
    for key in ("decode", "encode", "prefill", "generate", "tokens/s", "peak memory", "at LLM layer K=2"):
        assert key in stats1


def test_every_method_and_score_colours(client, tiny_qa, media):
    load(client, media["clip"])
    for method, r in (("none", "auto"), ("random", "0.75"), ("vispruner", "0.75"), ("fastv", "0.25"),
                      ("fastvid", "0.75")):
        _, (chat, gallery, stats) = ask(client, "How many shapes?", method=method, r=r, scores=True)
        assert chat[-1]["role"] == "assistant" and "⚠️" not in text_of(chat[-1]), text_of(chat[-1])
        assert len(gallery) == 8
        counts = [int(re.search(r"kept (\d+)/64", g["caption"]).group(1)) for g in gallery]
        cls = sum(" + summary" in g["caption"] for g in gallery)  # a merging method's goes on: " · N merged"
        assert any(g["caption"].endswith(" merged") for g in gallery) == (method == "fastvid")
        n_kept = int(re.search(r"→ (\d+) kept", stats).group(1))
        assert sum(counts) + cls == n_kept
        expected = {
            "none": 520,
            "random": round(520 * 0.25),
            "vispruner": round(520 * 0.25),
            "fastv": round(520 * 0.75),
            "fastvid": round(520 * 0.25),
        }[method]
        assert n_kept == expected, (method, stats)


    # R auto: the adaptive policy's choice and its reason are shown (same as the direct call decides).
    _, (chat, gallery, stats) = ask(client, "How many shapes?", method="fastv", r="auto")
    direct = tiny_qa.ask(media["clip"], "How many shapes?", prune=PruneConfig("fastv", 2, "auto"))
    assert direct.decision is not None and direct.decision.reason in stats
    assert f"{direct.kept.r:.2f} (auto" in stats and len(gallery) == direct.stats.frames


def test_bad_inputs_give_messages_and_the_app_keeps_serving(client, media, tiny_qa, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a video")
    chat = load(client, notes)
    assert "⚠️ “notes.txt” is not a supported video (.mp4, .avi, .mkv, .webm, .mov, .gif)" in text_of(chat[-1])
    chat = load(client, media["bad"])
    assert "⚠️ Cannot use “broken.mp4”" in text_of(chat[-1])
    _, (chat, *_rest) = ask(client, "What is this?")
    assert "Upload a clip" in text_of(chat[-1])  # the broken file was not kept as the clip

    load(client, media["clip"])
    _, (chat, *_rest) = ask(client, "   ")
    assert "Type a question first" in text_of(chat[-1])
    _, (chat, *_rest) = ask(client, "Is it red?", r="1.5")
    assert "R must be in [0, 1)" in text_of(chat[-1])
    _, (chat, *_rest) = ask(client, "Is it red?", k=9)  # a message, not Gradio's bare "Error" (issue 22)
    assert "K must be a whole number from 1 to 3" in text_of(chat[-1])

    _, (chat, gallery, stats) = ask(client, "Is it red?")
    direct = tiny_qa.ask(media["clip"], "Is it red?", prune=PruneConfig("fastv", 2, 0.5))
    assert text_of(chat[-1]) == direct.text  # failed turns are not part of the history
    assert len(gallery) == 8 and "visual tokens" in stats
    chat, gallery, stats = client.predict(api_name="/clear")
    assert chat == [] and gallery in (None, []) and stats == ""


def test_example_clip_starts_a_new_conversation(client, media):
    load(client, media["clip"])
    ask(client, "Is it red?")
    chat, preview, _, _, question = client.predict("example.webm", api_name="/load_example")
    assert len(chat) == 1 and "Loaded “example.webm”" in text_of(chat[0])
    assert Path(preview["path"]).suffix == ".webm"  # plays in the browser as it is
    assert question == "What is happening in this video?"  # the generic one: no questions.json here
    _, (chat, gallery, _) = ask(client, "Is it red?")
    assert [m["role"] for m in chat] == ["assistant", "user", "assistant"] and len(gallery) == 8


def test_serves_only_its_own_files(served, media):
    app, url = served
    assert app.server_name == "127.0.0.1"
    repo = Path(__file__).resolve().parents[1]
    with httpx.Client(base_url=url, timeout=10) as http:
        assert http.get(f"/gradio_api/file={media['example']}").status_code == 200  # samples/ is served
        for path in ("/etc/passwd", repo / "pyproject.toml", media["clip"]):
            assert http.get(f"/gradio_api/file={path}").status_code in (403, 404), path


class SlowQA:
    """Delegates to a VideoQA, but takes `delay` seconds before answering, to fill the queue."""

    def __init__(self, qa, delay: float):
        self.qa, self.delay = qa, delay

    def __getattr__(self, name):
        return getattr(self.qa, name)

    def stream(self, *args, **kwargs):
        time.sleep(self.delay)
        yield from self.qa.stream(*args, **kwargs)


@pytest.mark.slow
def test_full_queue_says_busy_and_uploads_are_limited(tiny_qa, media, tmp_path):
    app = build_app(SlowQA(tiny_qa, delay=1.5), samples_dir=None)
    limit = media["clip"].stat().st_size + 1000
    _, url, _ = launch(app, port=free_port(), queue_size=1, max_file_size=limit, samples_dir=None, block=False)
    try:
        c = Client(url, verbose=False, download_files=False)
        big = tmp_path / "big.mp4"
        big.write_bytes(media["clip"].read_bytes() * 3)
        with pytest.raises(ValueError, match="exceeds the maximum file size"):  # checked by the client
            load(c, big)
        # ... and by the server, for clients that do not check
        r = httpx.post(f"{url}gradio_api/upload", files={"files": ("big.mp4", big.read_bytes())}, timeout=10)
        assert r.status_code == 413
        load(c, media["clip"])
        running = c.submit("a?", *FASTV, 0, False, api_name="/ask")
        time.sleep(0.5)  # let it start (one at a time: the next one waits in the queue of 1)
        waiting = c.submit("b?", *FASTV, 0, False, api_name="/ask")
        time.sleep(0.3)
        rejected = c.submit("c?", *FASTV, 0, False, api_name="/ask")
        with pytest.raises(Exception, match="(?i)queue is full"):
            rejected.result(timeout=30)
        for job in (running, waiting):  # the accepted ones are answered
            chat = job.result(timeout=30)[0]
            assert chat[-1]["role"] == "assistant" and "⚠️" not in text_of(chat[-1])

        # A new clip while an answer is still being computed: the old answer is dropped, not mixed in.
        c2 = Client(url, verbose=False, download_files=False)
        load(c2, media["clip"])
        stale = c2.submit("old question?", *FASTV, 0, False, api_name="/ask")
        time.sleep(0.5)
        load(c2, media["example"])
        stale.result(timeout=30)
        _, (chat, gallery, _) = ask(c2, "new question?")
        assert [text_of(m)[:12] for m in chat[:2]] == ["Loaded “exam", "new question"] and len(chat) == 3
    finally:
        app.close()


def test_auth_is_enforced_when_asked_for(tiny_qa, media):
    app = build_app(tiny_qa, samples_dir=None)
    _, url, _ = launch(app, port=free_port(), auth=("ann", "s3cret"), samples_dir=None, block=False)
    try:
        assert httpx.get(f"{url}config", timeout=10).status_code == 401
        with pytest.raises(Exception):  # noqa: B017 (gradio_client raises a plain ValueError or HTTP error)
            Client(url, auth=("ann", "wrong"), verbose=False)
        c = Client(url, auth=("ann", "s3cret"), verbose=False, download_files=False)
        assert "Loaded “walk.mp4”" in text_of(load(c, media["clip"])[0])
    finally:
        app.close()


def test_sweep_cache_removes_only_old_files(tmp_path):
    old, new = tmp_path / "a" / "old.png", tmp_path / "b" / "new.png"
    for p in (old, new):
        p.parent.mkdir()
        p.write_bytes(b"x")
    past = time.time() - 7200
    os.utime(old, (past, past))
    assert sweep_cache(tmp_path, max_age_s=3600) == 1
    assert not old.exists() and new.exists()


def test_serve_command_defaults_and_auth():
    from videoqa.cli import build_parser

    args = build_parser().parse_args(["serve", "--model", "x"])
    assert (args.host, args.port, args.share, args.auth) == ("127.0.0.1", 7860, False, None)
    assert args.func.__module__ == "videoqa.cli.serve"
    args = build_parser().parse_args(["serve", "--auth", "me:se:cret", "--prune", "vispruner", "--r", "0.8"])
    assert parse_auth(args.auth) == ("me", "se:cret") and args.prune == "vispruner"
    from videoqa.errors import InputError

    for bad in ("nopass", ":x", "user:"):
        with pytest.raises(InputError):
            parse_auth(bad)


@pytest.mark.slow
@pytest.mark.slow  # a fresh process importing torch, transformers and gradio: ~15 s on 2 cores
def test_serve_command_end_to_end(tiny_model_dir, media, tmp_path):
    """`videoqa serve` as a user runs it: 127.0.0.1, answers, and its temp folder is gone after SIGTERM."""
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    env.pop("GRADIO_TEMP_DIR", None)
    cmd = [sys.executable, "-m", "videoqa.cli", "serve", "--model", str(tiny_model_dir), "--device", "cpu",
           "--port", str(port), "--max-new-tokens", "4", "--prune", "vispruner", "--r", "0.5"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 180  # start-up only: slow when the machine is busy
        while time.time() < deadline and proc.poll() is None:
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        assert proc.poll() is None, proc.stdout.read()
        c = Client(url, verbose=False, download_files=False)
        _, preview, _, _ = c.predict(handle_file(str(media["clip"])), api_name="/load_clip")
        (cache,) = tmp_path.glob("videoqa-serve-*")  # the server's own upload/cache folder
        assert Path(preview["path"]).is_relative_to(cache)
        _, (chat, gallery, stats) = ask(c, "Is it red?", method="vispruner", r="0.5")
        assert "⚠️" not in text_of(chat[-1]) and len(gallery) == 8 and "before the LLM" in stats
        assert all(Path(g["image"]["path"]).is_relative_to(cache) for g in gallery)
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    assert "Running on local URL:  http://127.0.0.1:" in out
    assert list(tmp_path.glob("videoqa-serve-*")) == []  # uploads and heatmaps removed


def test_api_endpoints_and_outputs_are_named(client):
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert set(api) == {"/load_clip", "/load_example", "/ask", "/retry", "/stop", "/clear", "/export", "/compare"}
    for name, endpoint in api.items():
        for item in endpoint["parameters"] + endpoint["returns"]:
            assert item["label"] and not re.fullmatch(r"value_\d+", item["label"]), (name, item)
    assert [p["parameter_name"] for p in api["/ask"]["parameters"]] == [
        "question", "method", "k", "r", "frames", "show_scores", "sampler"]
    assert [r["label"] for r in api["/ask"]["returns"]] == ["Chat", "Kept visual tokens per frame", "Answer stats"]
    returns = [r["label"] for r in api["/compare"]["returns"]]
    assert returns[0] == "Compare status"
    assert returns[1:] == [f"{m}: {what}" for m in METHODS
                           for what in ("answer", "kept tokens per frame", "kept tokens and FLOPs")]


def test_compare_answers_with_every_method_like_direct_calls(client, tiny_qa, media):
    q = "What is happening?"
    out = client.predict(q, 2, "0.5", 0, False, api_name="/compare")
    assert "Upload a clip" in out[0]  # nothing loaded in this session yet
    load(client, media["clip"])
    job = client.submit(q, 2, "0.5", 0, False, api_name="/compare")
    out = job.result(timeout=120)
    assert out[0].startswith(f"Compared {len(METHODS)} methods on “walk.mp4”: “{q}”. ")
    for i, method in enumerate(METHODS):
        text, gallery, summary = out[1 + 3 * i: 4 + 3 * i]
        direct = tiny_qa.ask(media["clip"], q, prune=PruneConfig(method, 2, 0.5))
        assert text == direct.text, method
        assert len(gallery) == direct.stats.frames == (4 if method == "frames" else 8)  # a frame each
        assert f"Kept {direct.kept.n_kept} of {direct.kept.n_visual} visual tokens" in summary
        assert f"FLOPs {direct.flops.ratio:.3f}×" in summary
    # Streamed method by method: each method's answer appears while the later ones are still empty.
    first = [o for o in job.outputs() if o[1]]
    assert first and first[0][4] == ""


def test_export_has_every_answer_with_stats_and_kept_tokens(client, tiny_qa, media):
    load(client, media["clip"])
    q1, q2 = "What colour is it?", "Where does it go?"
    ask(client, q1)
    ask(client, q2, method="vispruner", r="0.75")
    exported = client.predict(api_name="/export")
    doc = json.loads(Path(exported["path"]).read_text())
    a1 = tiny_qa.ask(media["clip"], q1, prune=PruneConfig("fastv", 2, 0.5))
    a2 = tiny_qa.ask(media["clip"], q2, history=[(q1, a1.text)], prune=PruneConfig("vispruner", 2, 0.75))
    assert doc["model"] == tiny_qa.name and doc["clip"] == "walk.mp4"
    assert [t["question"] for t in doc["turns"]] == [q1, q2]
    for turn, direct in zip(doc["turns"], (a1, a2), strict=True):
        assert turn["status"] == "done" and turn["answer"] == turn["shown"] == direct.text
        assert turn["kept"]["kept"] == direct.kept.kept and turn["kept"]["method"] == direct.kept.method
        assert turn["stats"]["prompt_tokens"] == direct.stats.prompt_tokens
        assert turn["flops"] == direct.flops.to_dict() and turn["warnings"] == []


def test_encode_label_describes_this_conversation(served, media, tmp_path):
    """Another tab encoded the clip first: this tab's first answer is not a 'follow-up', nor told it was
    cached (that would reveal another user's upload)."""
    clip = write_clip(tmp_path / "shared.mp4", n_frames=20, size=(64, 64))
    first, second = (Client(served[1], verbose=False, download_files=False) for _ in range(2))
    load(first, clip)
    ask(first, "What is it?")
    load(second, clip)
    _, (_, _, stats) = ask(second, "What is it?")
    assert "cached" not in stats and "already encoded" not in stats
    _, (_, _, stats) = ask(second, "And then?")
    assert "cached (follow-up, no re-encode)" in stats


def test_retry_asks_the_last_question_again(client, tiny_qa, media):
    load(client, media["clip"])
    ask(client, "What colour is it?", method="none")
    chat, _, _ = client.predict("fastv", 2, "0.5", 0, False, api_name="/retry")  # now with FastV
    direct = tiny_qa.ask(media["clip"], "What colour is it?", prune=PruneConfig("fastv", 2, 0.5))
    assert [text_of(m) for m in chat[1:]] == ["What colour is it?", direct.text]


def test_the_model_line_counts_every_clip_a_demo_model_trained_on():
    """The shipped demo was fine-tuned on prefixes of its first run's 6,000 clips; demo-long's last run saw 600 +
    4,800 long clips and 1,000 + 3,000 short ones: the model line must not report the last run's share alone."""
    from conftest import REPO
    from videoqa.ui.model_info import _training_clips

    demo = json.loads((REPO / "samples" / "demo-model" / "training.json").read_text())
    assert demo["args"]["train_clips"] == 1000 and demo["stages"]["stage1"]["args"]["train_clips"] == 6000
    assert _training_clips("demo") == "6,000"
    assert _training_clips("demo-long") == "5,400 long and 4,000 short"
