"""Regenerate the screenshots of the web chat (README.md, docs/web-chat.md): desktop and phone, chat and compare mode.

    python scripts/shoot.py                  # in a checkout: writes ui/screenshots/*.png

Uses the shipped demo model and sample clips, and Debian's Chromium through Playwright (as the browser
tests do). Each picture shows an example picked with one click and asked, so it shows real answers.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

from PIL import Image
from playwright.sync_api import expect, sync_playwright
from videoqa.ui.app import DEFAULT_SAMPLES, build_app, launch

from videoqa.pipeline import VideoQA

OUT = Path(__file__).resolve().parents[1] / "ui" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
QUESTION = "Which direction does the orange circle move?"
FOLLOW_UP = "What shape is moving?"
MAX_HEIGHT = 2600  # a full-page picture is cut below this (the rest is more of the same)
expect.set_options(timeout=60_000)  # waits on a possibly busy machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(page) -> None:
    """Pick the example with one click, ask it, then a follow-up."""
    page.locator("#examples .example", has_text=QUESTION).click()
    expect(page.locator("#question textarea")).to_have_value(QUESTION)
    page.locator("#ask").click()
    rows = page.locator("#chat .message-row")
    expect(rows).to_have_count(3)
    page.locator("#stats table").wait_for(state="attached")
    page.locator("#question textarea").fill(FOLLOW_UP)
    page.locator("#ask").click()
    expect(rows).to_have_count(5)
    expect(rows.nth(4)).not_to_have_text(re.compile(r"^\s*…?\s*$"))
    expect(page.locator("#heatmaps img")).to_have_count(8)


def compare(page) -> None:
    page.get_by_role("tab", name="Compare methods").click()
    expect(page.locator("#compare-question textarea")).to_have_value(QUESTION)
    page.locator("#compare-run").click()
    expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=120_000)


def shoot(page, name: str, full_page: bool = True) -> None:
    page.mouse.move(0, 0)  # no hover highlight in the picture
    # Images below the fold load lazily, which a full-page picture never triggers.
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("[...document.images].every(i => i.complete)")
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    img = Image.open(path)
    if img.height > MAX_HEIGHT:
        img = img.crop((0, 0, img.width, MAX_HEIGHT))
    img.save(path, optimize=True)
    print(f"{path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}: {img.width}x{img.height}")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    qa = VideoQA.from_pretrained("demo", max_new_tokens=16)
    app = build_app(qa, samples_dir=DEFAULT_SAMPLES)
    _, url, _ = launch(app, port=free_port(), samples_dir=DEFAULT_SAMPLES, block=False)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for name, viewport in (("desktop", {"width": 1400, "height": 1000}),
                                   ("phone", {"width": 390, "height": 844})):
                context = browser.new_context(viewport=viewport, device_scale_factor=1)
                page = context.new_page()
                page.set_default_timeout(60_000)
                page.goto(url)
                chat(page)
                if name == "phone":  # the clip box and examples come first: show the conversation's screen
                    page.evaluate("window.scrollTo(0, document.querySelector('#tabs').getBoundingClientRect().top"
                                  " + scrollY)")
                else:
                    page.evaluate("window.scrollTo(0, 0)")
                shoot(page, f"{name}-chat", full_page=name == "desktop")
                compare(page)
                if name == "phone":
                    page.locator("#compare-question").scroll_into_view_if_needed()
                shoot(page, f"{name}-compare")
                context.close()
            browser.close()
    finally:
        app.close()


if __name__ == "__main__":
    main()
