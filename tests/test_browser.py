"""The web chat in a real browser: Debian's headless Chromium driven by Playwright (no bundled browser).

Needs `apt-get install -y chromium` and `pip install playwright` (never `playwright install`); skipped
when /usr/bin/chromium is missing. One server and one browser for the module; each test gets a fresh tab
(its own session). Answers that must still be streaming while the test acts are held after their first
token by `HeldQA` and released by the test, so nothing here depends on timing. The last page of each test
is left in artifacts/browser-<test>.png.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from conftest import free_port
from helpers.clipgen import write_clip
from videoqa.ui.app import DEFAULT_SAMPLES, build_app, launch

from videoqa.pruning import REGISTRY, PruneConfig

METHODS = REGISTRY.names()

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[1]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1400, "height": 1000}
PHONE = {"width": 390, "height": 844}
FASTV = PruneConfig("fastv", 2, 0.5)  # the tiny_qa default, what the page's controls start with

# The browser files' marks (test_browser_*.py take them and `expect` from here, with the fixtures)
BROWSER_MARKS = [
    pytest.mark.slow,  # seconds each: `make test-fast` leaves them out
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)"),
]
pytestmark = BROWSER_MARKS
sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package")
expect = sync_api.expect
expect.set_options(timeout=30_000)  # waits, not time limits: generous for a busy CI machine


class HeldQA:
    """Delegates to a VideoQA. While held, every answer pauses after its first streamed token until the
    test releases it; `finished` records, per answer, whether its stream ran to the end."""

    def __init__(self, qa):
        self.qa = qa
        self.gate = threading.Event()
        self.gate.set()
        self.paused = threading.Event()  # set while an answer waits at the gate
        self.finished: list[bool] = []

    def __getattr__(self, name):
        return getattr(self.qa, name)

    def hold(self) -> None:
        self.paused.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def stream(self, *args, **kwargs):
        done = False
        try:
            for i, item in enumerate(self.qa.stream(*args, **kwargs)):
                yield item
                if i == 0 and not self.gate.is_set():
                    self.paused.set()
                    self.gate.wait(timeout=60)
            done = True
        finally:
            self.finished.append(done)


@pytest.fixture(scope="module")
def held(tiny_qa) -> HeldQA:
    return HeldQA(tiny_qa)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("browser-clips")
    return {
        "walk": write_clip(d / "walk.mp4", n_frames=30, size=(160, 96)),
        "avi": write_clip(d / "other.avi", n_frames=20, size=(96, 64), fmt="avi-mpeg4"),
    }


@pytest.fixture(scope="module")
def server(held):
    app = build_app(held, samples_dir=DEFAULT_SAMPLES)  # the repo's examples and their questions
    _, url, _ = launch(app, port=free_port(), samples_dir=DEFAULT_SAMPLES, queue_size=2, block=False)
    yield url
    held.release()
    app.close()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def desktop(browser):
    """One browser context for the desktop tests: the page's scripts are fetched once, then cached."""
    context = browser.new_context(viewport=DESKTOP)
    yield context
    context.close()


def open_page(context, url: str):
    """A new tab: a new session on the server."""
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(url, wait_until="domcontentloaded")
    page.locator("#chat").wait_for()
    return page


@pytest.fixture
def page(desktop, server, held, request):
    page = open_page(desktop, server)
    yield page
    held.release()  # never leave the server's answers held for the next test
    (REPO / "artifacts").mkdir(exist_ok=True)
    page.screenshot(path=str(REPO / "artifacts" / f"browser-{request.node.name}.png"), full_page=True)
    page.close()


# -- helpers -----------------------------------------------------------------------------------------


def rows(page):
    return page.locator("#chat .message-row")


def loaded(name: str) -> re.Pattern:
    """The chat's notice for a clip that loaded."""
    return re.compile(rf"Loaded\W+{re.escape(name)}")


def upload(page, clip: Path) -> None:
    page.locator("#upload input[type=file]").set_input_files(str(clip))
    expect(page.locator("#chat")).to_contain_text(loaded(clip.name))


def ask(page, question: str, *, press_enter: bool = False) -> None:
    page.locator("#question textarea").fill(question)
    if press_enter:
        page.locator("#question textarea").press("Enter")
    else:
        page.locator("#ask").click()


def message(page, row: int):
    """Row `row`'s first message: a question, or an answer without the notices and results block after it."""
    return rows(page).nth(row).locator("[data-testid=bot], [data-testid=user]").first


def first_token_shown(page, row: int) -> str:
    """Wait until answer `row` shows streamed text (the held answer's first token); returns it."""
    answer = message(page, row)
    expect(answer).not_to_have_text(re.compile(r"^\s*(…|\(queued.*)?\s*$"))
    return answer.inner_text().strip()


def answered(page, n_rows: int, text: str) -> None:
    expect(rows(page)).to_have_count(n_rows)
    expect(message(page, n_rows - 1)).to_have_text(text)


def results(page):
    """Each answer's results block (heatmaps and stats), closed until clicked."""
    return page.locator("#chat .thought-group")


def wait_results(page, n: int) -> None:
    """Wait until `n` answers are complete (each gets its results block with its last words)."""
    expect(results(page)).to_have_count(n)


def open_results(page, i: int = -1):
    """Open answer `i`'s results block (the last by default) and wait for its pictures; returns it."""
    block = results(page).last if i == -1 else results(page).nth(i)
    block.locator(".title").first.click()
    expect(block.locator("figure.frame img").first).to_be_visible()
    page.wait_for_function("b => [...b.querySelectorAll('img')].every(i => i.complete && i.naturalWidth > 0)",
                           arg=block.element_handle())
    return block


def prompt_tokens(page) -> int:
    return int(re.search(r"prompt (\d+)", open_results(page).locator(".turn-stats").text_content()).group(1))


# -- tests -------------------------------------------------------------------------------------------


def test_upload_ask_and_see_heatmaps(page, clips, tiny_qa):
    upload(page, clips["walk"])
    question = "What is happening in this video?"
    ask(page, question)
    wait_results(page, 1)  # the stats come with the final answer
    block = open_results(page)
    expect(block.locator("figure.frame img")).to_have_count(8)  # one heatmap per sampled frame
    assert block.get_by_text("#1 · ").count() >= 1
    expected = tiny_qa.ask(clips["walk"], question, prune=FASTV).text  # the pipeline, called directly
    answered(page, 3, expected)  # notice, question, answer
    assert rows(page).nth(1).inner_text().strip() == question
    stats = block.locator(".turn-stats").text_content()
    assert "520 → 260 kept" in stats and "FLOPs" in stats


def test_typing_while_an_answer_streams_is_kept(page, clips, held, tiny_qa):
    upload(page, clips["walk"])
    held.hold()
    ask(page, "What colour is it?")
    first_token_shown(page, 2)
    box = page.locator("#question textarea")
    box.fill("a follow-up typed while the answer streams")
    held.release()
    answered(page, 3, tiny_qa.ask(clips["walk"], "What colour is it?", prune=FASTV).text)
    wait_results(page, 1)
    expect(box).to_have_value("a follow-up typed while the answer streams")


def test_second_question_while_answering_waits_visibly_and_is_answered(page, clips, held, tiny_qa):
    q1, q2 = "What colour is it?", "Where does it go?"
    upload(page, clips["walk"])
    held.hold()
    ask(page, q1)
    first_token_shown(page, 2)
    ask(page, q2, press_enter=True)
    # Shown at once, while the first answer is still held, and the box is free again.
    expect(rows(page)).to_have_count(5)
    assert rows(page).nth(3).inner_text().strip() == q2
    assert "queued" in rows(page).nth(4).inner_text()
    expect(page.locator("#question textarea")).to_have_value("")
    held.release()
    a1 = tiny_qa.ask(clips["walk"], q1, prune=FASTV)
    a2 = tiny_qa.ask(clips["walk"], q2, history=[(q1, a1.text)], prune=FASTV)  # a follow-up of the first
    answered(page, 5, a2.text)
    expect(message(page, 2)).to_have_text(a1.text)


def test_chat_trash_icon_resets_what_the_model_remembers(page, clips, tiny_qa):
    upload(page, clips["walk"])
    ask(page, "What colour is it?")
    wait_results(page, 1)
    page.locator("#chat button[aria-label='Clear']").click()
    expect(rows(page)).to_have_count(0)
    q = "Where does it go?"
    ask(page, q)
    direct = tiny_qa.ask(clips["walk"], q, prune=FASTV)  # a first question: no history
    answered(page, 2, direct.text)
    wait_results(page, 1)
    assert prompt_tokens(page) == direct.stats.prompt_tokens


def test_example_thumbnail_loads_clip_and_question_with_one_request(page, tiny_qa):
    posts = []
    page.on("request", lambda r: posts.append(r.post_data_json) if r.method == "POST" and "fn_index" in (
        r.post_data or "") else None)
    buttons = page.locator("#examples .example")
    expect(buttons.locator("img")).to_have_count(12)  # samples/clips/questions.json: 4 clips x 3 questions
    first = buttons.first
    suggested = first.inner_text().strip()
    first.click()
    expect(page.locator("#chat")).to_contain_text(loaded("blue_triangle_down.mp4"))
    expect(page.locator("#question textarea")).to_have_value(suggested)
    page.locator("#ask").click()
    clip = DEFAULT_SAMPLES / "blue_triangle_down.mp4"
    answered(page, 3, tiny_qa.ask(clip, suggested, prune=FASTV).text)
    # One click, one load: every request since the click is the load, the question, its answer.
    fns = [p["fn_index"] for p in posts]
    assert len(fns) == 3 and len(set(fns)) == 3, posts
    assert page.locator("#chat").inner_text().count("Loaded") == 1


def test_a_new_clip_replaces_the_old_one_everywhere(page, clips):
    upload(page, clips["walk"])
    expect(page.locator("#clip-name")).to_contain_text("walk.mp4")
    page.locator("#examples .example").nth(3).click()
    expect(page.locator("#chat")).to_contain_text(loaded("blue_triangle_left.mp4"))
    expect(page.locator("#clip-name")).to_contain_text("blue_triangle_left.mp4")
    expect(page.locator("#upload")).not_to_contain_text("walk.mp4")  # not left showing the old upload
    # Another file straight away (no × first); an AVI gets a preview the browser plays.
    upload(page, clips["avi"])
    expect(page.locator("#clip-name")).to_contain_text("other.avi")
    video = page.locator("#preview video")
    video.wait_for()
    page.wait_for_function("v => v.readyState >= 2 && v.videoWidth > 0", arg=video.element_handle())
    assert "blue_triangle" not in page.locator("#chat").inner_text()


def test_user_text_is_shown_exactly_as_typed(page, clips):
    upload(page, clips["walk"])
    typed = "Is it <b>bold</b> or *starred*?  `code` & 2 < 3\n# not a heading\n- not a list"
    ask(page, typed)
    expect(rows(page)).to_have_count(3)
    assert rows(page).nth(1).inner_text().strip() == typed
    wait_results(page, 1)


def test_phone_layout(browser, server, clips):
    context = browser.new_context(viewport=PHONE)
    page = open_page(context, server)
    try:
        upload(page, clips["walk"])
        page.wait_for_function("() => document.querySelector('#question').getBoundingClientRect().bottom"
                               " <= innerHeight")
        ask(page, "What is happening?")
        wait_results(page, 1)
        # The clip box and the examples come first; after a load the question box is brought into view.
        box = page.locator("#question").bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= PHONE["height"]
        thumbs = open_results(page).locator("figure.frame")
        expect(thumbs).to_have_count(8)
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scroll
        boxes = [thumbs.nth(i).bounding_box() for i in range(8)]
        assert boxes[0]["y"] == boxes[1]["y"] < boxes[2]["y"]  # two columns
        assert all(b["x"] >= 0 and b["x"] + b["width"] <= PHONE["width"] for b in boxes)
        for caption in page.locator("#chat figure.frame figcaption").all():
            assert re.fullmatch(r"#\d · \d+\.\d\d s · kept \d+/64( \+ summary)?", caption.inner_text().strip())
            assert caption.evaluate("el => el.scrollWidth <= el.clientWidth")  # not cut off
    finally:
        page.screenshot(path=str(REPO / "artifacts" / "browser-phone.png"), full_page=True)
        context.close()


def test_stop_keeps_the_partial_answer_and_retry_asks_again(page, clips, held, tiny_qa):
    q = "What colour is it?"
    upload(page, clips["walk"])
    held.hold()
    ask(page, q)
    partial = first_token_shown(page, 2)
    n_finished = len(held.finished)
    page.locator("#stop").click()
    held.release()
    expect(message(page, 2)).to_have_text(f"{partial} (stopped)")
    expect(page.locator("#stop")).to_be_disabled()
    assert held.finished[n_finished:] == [False]  # generation ended early, not run to the end
    full = tiny_qa.ask(clips["walk"], q, prune=FASTV).text
    assert full != partial
    page.locator("#retry").click()
    answered(page, 3, full)  # the same question, asked again in place of the stopped answer
    assert rows(page).nth(1).inner_text().strip() == q


def fn_index(page, api_name: str) -> int:
    """The page's number for an event (what its requests carry as fn_index)."""
    return page.evaluate("name => window.gradio_config.dependencies.find(d => d.api_name === name).id", api_name)


def test_stop_ends_stopped_even_when_its_reply_arrives_after_the_answer(page, clips, held):
    # The Stop request's reply (the chat as it was at the click: "... (stopping…)") is held back until the
    # answer has ended and the page shows "(stopped)": on a loaded machine it can arrive that late. The page
    # must still end on the stopped answer, not on the stale "stopping…".
    upload(page, clips["walk"])
    held.hold()
    ask(page, "What colour is it?")
    partial = first_token_shown(page, 2)
    n_finished = len(held.finished)
    stop = fn_index(page, "ui_stop")
    replies = []

    def hold_reply(route):
        if f'"fn_index":{stop},' not in (route.request.post_data or ""):
            return route.fallback()
        replies.append((route, route.fetch()))  # the server has stopped the answer; the page waits
        held.release()

    page.route("**/run/predict", hold_reply)
    # Every text the chat shows, however briefly (a poll could miss one between two replies).
    page.evaluate("""() => {
        window.shown = [];
        const chat = document.querySelector('#chat');
        new MutationObserver(() => window.shown.push(chat.innerText))
            .observe(chat, {subtree: true, childList: true, characterData: true});
    }""")
    page.locator("#stop").click()
    answer = message(page, 2)
    expect(answer).to_have_text(f"{partial} (stopped)")  # the answer's own last update
    assert held.finished[n_finished:] == [False] and len(replies) == 1
    route, reply = replies[0]
    route.fulfill(response=reply)
    page.wait_for_function("() => window.shown.some(t => t.includes('(stopping…)'))")  # the late reply applied
    expect(answer).to_have_text(f"{partial} (stopped)")
    expect(page.locator("#stop")).to_be_disabled()


def test_full_queue_says_busy_and_keeps_the_question(page, clips, held, server):
    from gradio_client import Client, handle_file
    from gradio_client.utils import Status

    upload(page, clips["walk"])
    held.hold()
    others = []
    for i in range(3):  # one answering (held) and two waiting: the queue of 2 is full
        c = Client(server, verbose=False, download_files=False)
        c.predict(handle_file(str(clips["walk"])), api_name="/load_clip")
        others.append(c.submit(f"q{i}?", "fastv", 2, "0.5", 0, False, api_name="/ask"))
        if i == 0:
            assert held.paused.wait(timeout=60)  # the first is being answered: the next two wait
    for job in others[1:]:  # submit() returns before the job has joined the queue: wait until both have
        deadline = time.time() + 60
        while job.status().code != Status.IN_QUEUE and time.time() < deadline:
            time.sleep(0.1)
        assert job.status().code == Status.IN_QUEUE
    ask(page, "Is anyone there?")
    # One message (issue 22): Gradio's busy notice, not a second one in the chat.
    expect(page.get_by_text("This application is currently busy")).to_have_count(1)
    expect(page.locator("#question textarea")).to_have_value("Is anyone there?")
    expect(page.locator("#chat")).not_to_contain_text("Is anyone there?")
    expect(page.locator("#chat")).not_to_contain_text("busy")
    # No "Error" badge left over the chat, the box or the results (Gradio's own toast fades by itself).
    expect(page.locator("[data-testid='status-tracker'] .error")).to_have_count(0)
    held.release()
    for job in others:
        job.result(timeout=60)
    page.locator("#ask").click()
    wait_results(page, 1)


def test_compare_mode_answers_with_every_method(page, clips, tiny_qa):
    upload(page, clips["walk"])
    page.get_by_role("tab", name="Compare methods").click()
    q = "What is happening?"
    page.locator("#compare-question textarea").fill(q)
    page.locator("#compare-run").click()
    expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=60_000)
    for method in METHODS:
        col = page.locator(f"#compare-{method}")
        direct = tiny_qa.ask(clips["walk"], q, prune=PruneConfig(method, 2, 0.5))
        expect(col.locator("textarea")).to_have_value(direct.text)
        expect(col.locator(".thumbnail-item")).to_have_count(direct.stats.frames)  # a frame each the LLM saw
        summary = col.locator(".compare-summary").first.inner_text()
        assert f"Kept {direct.kept.n_kept} of {direct.kept.n_visual} visual tokens" in summary
        assert f"FLOPs {direct.flops.ratio:.3f}×" in summary
