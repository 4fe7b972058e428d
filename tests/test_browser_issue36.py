"""Issue 36 in a real browser: each answer's own heatmaps and stats, what pruning and each method is, demo-long at
its best, the smaller defects, and WCAG AA contrast for every text on the page. Same server, browser and
helpers as test_browser.py; the demo models get servers of their own."""

from __future__ import annotations

import json
import re

import pytest
import test_browser as tb
from conftest import free_port
from test_browser import ask, open_page, open_results, results, rows, upload
from videoqa.ui.app import DEFAULT_SAMPLES, build_app, launch

from videoqa.model import packaged_path
from videoqa.pruning import REGISTRY
from videoqa.pruning.adaptive import max_frames_for_context

pytestmark = tb.BROWSER_MARKS
expect = tb.expect

browser, clips, desktop, held, page, server = tb.browser, tb.clips, tb.desktop, tb.held, tb.page, tb.server

# Every element with text of its own: its colour against the first opaque background behind it (alpha
# composited up the tree), as WCAG 2's contrast ratio. Text over an image or a gradient is left out (no single
# background colour); so is text that is not rendered.
CONTRAST = """() => {
  const rgba = s => { const m = s.match(/[\\d.]+/g) || []; return m.map(Number).concat([1]).slice(0, 4); };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
                     return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const over = (top, below) => { const a = top[3]; return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)); };
  function background(el) {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.backgroundImage !== 'none' && e !== el) return null;
      const c = rgba(s.backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let bg = [255, 255, 255];
    for (const c of layers.reverse()) bg = over(c, bg);
    return bg;
  }
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || ['SCRIPT', 'STYLE', 'OPTION'].includes(el.tagName)) continue;
    const s = getComputedStyle(el), r = el.getBoundingClientRect();
    if (s.visibility === 'hidden' || s.display === 'none' || !r.width || !r.height || +s.opacity === 0) continue;
    if (el.closest('.skip-link')) continue;  // off screen until focused
    const bg = background(el);
    if (!bg) continue;
    let fg = rgba(s.color); fg = over(fg, bg);
    const [a, b] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    out.push({text: el.textContent.trim().slice(0, 40), ratio: (a + 0.05) / (b + 0.05),
              cls: el.className.toString().slice(0, 40)});
  }
  return out;
}"""


def low_contrast(page) -> tuple[int, list]:
    checked = page.evaluate(CONTRAST)
    return len(checked), [c for c in checked if c["ratio"] < 4.5]


@pytest.fixture(scope="module")
def long_server():
    from videoqa.pipeline import VideoQA

    qa = VideoQA.from_pretrained("demo-long", max_new_tokens=8)
    app = build_app(qa, samples_dir=DEFAULT_SAMPLES)
    _, url, _ = launch(app, port=free_port(), samples_dir=DEFAULT_SAMPLES, block=False)
    yield url, qa
    app.close()


def test_each_answer_has_its_own_results_and_an_error_turn_none(page, clips, tiny_qa):
    upload(page, clips["walk"])
    questions = ["What colour is it?", "Where does it go?", "What is happening?"]
    for i, q in enumerate(questions):
        ask(page, q)
        expect(results(page)).to_have_count(i + 1)
    titles = results(page).locator(".title")
    for i, q in enumerate(questions):  # each block headed by its own question, closed until clicked
        expect(titles.nth(i)).to_contain_text(f"Heatmaps and stats for: “{q}”")
    assert page.locator("#chat figure.frame").count() == 0
    first = open_results(page, 0)  # an earlier turn reopened: its own frames and stats
    expect(first.locator("figure.frame")).to_have_count(8)
    direct = tiny_qa.ask(clips["walk"], questions[0], prune=tb.FASTV)
    summary = first.locator(".turn-summary").inner_text()
    saved = round(100 * (1 - direct.flops.ratio))
    assert summary.startswith(f"Kept {direct.kept.n_kept} of {direct.kept.n_visual} visual tokens")
    assert f"{saved} % less compute" in summary
    # An answer that fails (R=2) gets no results block: nothing left from the answer before it.
    page.locator("#r textarea, #r input").first.fill("2")
    ask(page, "And now?")
    expect(rows(page).last).to_contain_text("R must be in")
    expect(results(page)).to_have_count(3)
    assert "And now?" not in results(page).last.inner_text()


def test_the_page_says_what_pruning_is_and_what_each_method_does(page, clips):
    intro = page.locator("#intro")
    assert "Token pruning" in intro.inner_text() and intro.bounding_box()["y"] < tb.DESKTOP["height"] / 3
    expect(intro.locator("a", has_text="docs/pruning.md")).to_have_attribute("href", re.compile(r"pruning\.md$"))
    page.locator("#method-help summary").click()
    listed = page.locator("#method-help li")
    expect(listed).to_have_count(len(REGISTRY.names()))
    for name in REGISTRY.names():  # every registered method, with the description it declares
        assert f"{name}: {REGISTRY.get(name).help}" in page.locator("#method-help").inner_text()
    upload(page, clips["walk"])
    page.get_by_role("tab", name="Compare methods").click()
    for name in REGISTRY.names():
        expect(page.locator(f"#compare-{name} .method-help")).to_have_text(REGISTRY.get(name).help)
    legend = page.locator("#compare-legend").inner_text()
    assert "kept" in legend and "hatched" in legend and "merged" in legend


def test_demo_long_offers_its_long_clips_and_shows_pruning(browser, long_server):
    url, qa = long_server
    context = browser.new_context(viewport=tb.DESKTOP)
    page = open_page(context, url)
    try:
        own = json.loads((packaged_path("clips_long") / "questions.json").read_text())
        examples = page.locator(".example")
        expect(examples).to_have_count(len(own))
        assert sorted(e.inner_text().strip() for e in examples.all()) == sorted(q["question"] for q in own)
        assert any(q["type"].startswith("event") or q["type"] == "count" for q in own)  # event questions
        # auto would keep every token at 8 frames: R starts at 0.5 and a line says why and what to set.
        expect(page.locator("#r textarea, #r input").first).to_have_value("0.5")
        assert "keeps every visual token" in page.locator("#r").inner_text()
        assert "Starts at content" in page.locator("#sampler").inner_text()
        most = max_frames_for_context(qa.dims, qa.text_tokens("?"), qa.policy)
        assert most > 32 and f"at most {most}" in page.locator("#frames").inner_text()  # was capped at 32
        event = next(i for i, q in enumerate(own) if q["type"] == "event_colour")
        examples.nth(event).click()
        expect(page.locator("#question textarea")).to_have_value(own[event]["question"])  # loaded: ask it
        page.locator("#ask").click()
        expect(results(page)).to_have_count(1, timeout=180_000)  # a 46 s clip decoded on a busy machine
        block = open_results(page)
        kept, total = map(int, re.search(r"Kept (\d+) of (\d+)", block.inner_text()).groups())
        assert kept < total  # the default shows pruning
        page.get_by_role("tab", name="Compare methods").click()
        page.locator("#compare-run").click()
        expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=180_000)
        caption = page.locator("#compare-fastv .caption-label").first.inner_text()
        assert re.search(r"#1\s·\s\d+\.\d\d\ss", caption), caption  # the frame's time, as in the chat
    finally:
        page.screenshot(path=str(tb.REPO / "artifacts" / "browser-demo-long.png"), full_page=True)
        context.close()


def test_smaller_defects(page, clips, tmp_path):
    # The examples are two Tabs from the top of the page (a skip link), not nine.
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('example')")
    # Frames typed out of range: one line saying the range, not a silent clamp.
    upload(page, clips["walk"])
    for bad in ("99", "-3"):
        page.locator("#frames input").fill(bad)
        ask(page, "What colour is it?")
        expect(rows(page).last).to_contain_text("Frames must be a whole number from 0 (the default) up to")
    page.locator("#frames input").fill("0")
    # A stale notice goes with the next load, even one that fails.
    page.locator("#clear").click()
    page.locator("#ask").click()
    expect(page.locator("#notice")).to_contain_text("Type a question first.")
    bad_file = tmp_path / "notes.txt"
    bad_file.write_text("not a video")
    page.locator("#upload input[type=file]").set_input_files(str(bad_file))
    expect(page.locator("#chat")).to_contain_text("not a supported video")
    expect(page.locator("#notice")).to_have_text("")
    # Enter on an example: the question box has the focus, ready to ask.
    page.locator(".example").first.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chat")).to_contain_text("Loaded")
    page.wait_for_function("document.activeElement === document.querySelector('#question textarea')")
    # The clip's name is above its preview, not over it.
    name, video = page.locator("#clip-name").bounding_box(), page.locator("#preview video").bounding_box()
    assert name["y"] + name["height"] <= video["y"] + 1


def test_text_contrast_is_wcag_aa_everywhere(browser, server, clips):
    for viewport in (tb.DESKTOP, tb.PHONE):
        context = browser.new_context(viewport=viewport)
        page = open_page(context, server)
        try:
            upload(page, clips["walk"])
            ask(page, "What colour is it?")
            expect(results(page)).to_have_count(1)
            open_results(page).locator(".turn-stats summary").click()
            page.locator("#method-help summary").click()
            n, low = low_contrast(page)
            assert n > 100 and not low, low  # the chat, its results, the settings, the footer
            page.get_by_role("tab", name="Compare methods").click()
            page.locator("#compare-question textarea").fill("What is happening?")
            page.locator("#compare-run").click()
            expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=120_000)
            n, low = low_contrast(page)
            assert n > 100 and not low, low
            sizes = page.evaluate("[...document.querySelectorAll('.example, .compare-heatmaps .caption-label,"
                                  " #chat figcaption')].map(e => [e.className,"
                                  " parseFloat(getComputedStyle(e).fontSize)])")
            assert sizes and min(px for _, px in sizes) >= 12.5, [s for s in sizes if s[1] < 12.5]  # was 11.2, 11.9
        finally:
            context.close()
