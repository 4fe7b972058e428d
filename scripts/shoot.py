"""Regenerate the screenshots of the web chat (README.md, docs/web-chat.md): desktop (1280×900) and phone (390×844),
the first screen, a chat of three answers with their heatmaps open, and Compare.

    python scripts/shoot.py                          # in a checkout: writes ui/screenshots/*.png (demo model)
    python scripts/shoot.py --model demo-long --out /tmp/shots

Uses the shipped demo models and sample clips, and Debian's Chromium through Playwright (as the browser
tests do). Each picture shows an example picked with one click and asked, so it shows real answers.
"""

from __future__ import annotations

import argparse
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
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
MAX_HEIGHT = 3000  # a full-page picture is cut below this (the rest is more of the same)
expect.set_options(timeout=120_000)  # waits on a possibly busy machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(page, n: int = 3) -> None:
    """Pick the first example with one click, ask it, then the clip's next suggested questions; open each
    answer's heatmaps."""
    page.locator("#examples .example").first.click()
    expect(page.locator("#chip-0")).to_be_visible()
    for i in range(n):
        if i:
            page.locator(f"#chip-{i}").click()
        page.locator("#ask").click()
        expect(page.locator("#chat .thought-group")).to_have_count(i + 1)
        expect(page.locator("#stop")).to_be_disabled()
    # The picture shows the whole conversation: the chat box at its full height, not its scroll window.
    page.add_style_tag(content="#chat { height: auto !important; max-height: none !important; }"
                               " #chat .bubble-wrap { height: auto !important; max-height: none !important; }")
    page.wait_for_timeout(1000)  # the answer's last update re-renders the chat: open the blocks after it
    for _ in range(3):
        for block in page.locator("#chat .thought-group").all():
            if block.locator("figure.frame").count() == 0:
                block.locator(".title").first.click()
                page.wait_for_timeout(500)
    for block in page.locator("#chat .thought-group").all():
        expect(block.locator("figure.frame img").first).to_be_visible()


def compare(page) -> None:
    page.get_by_role("tab", name="Compare methods").click()
    page.locator("#compare-run").click()
    expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=600_000)


def shoot(page, path: Path, full_page: bool = True) -> None:
    page.mouse.move(0, 0)  # no hover highlight in the picture
    # Images below the fold load lazily, which a full-page picture never triggers.
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("[...document.images].every(i => i.complete)")
    page.screenshot(path=str(path), full_page=full_page)
    img = Image.open(path)
    if img.height > MAX_HEIGHT:
        img = img.crop((0, 0, img.width, MAX_HEIGHT))
    img.save(path, optimize=True)
    print(f"{path}: {img.width}x{img.height}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    prefix = "" if args.model == "demo" else f"{args.model}-"
    qa = VideoQA.from_pretrained(args.model, max_new_tokens=16)
    app = build_app(qa, samples_dir=DEFAULT_SAMPLES)
    _, url, _ = launch(app, port=free_port(), samples_dir=DEFAULT_SAMPLES, block=False)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            for name, viewport in VIEWPORTS.items():
                context = browser.new_context(viewport=viewport, device_scale_factor=1)
                page = context.new_page()
                page.set_default_timeout(120_000)
                page.goto(url)
                page.locator("#examples .example").first.wait_for()
                shoot(page, args.out / f"{prefix}{name}-first.png", full_page=False)
                chat(page)
                shoot(page, args.out / f"{prefix}{name}-chat.png")
                compare(page)
                shoot(page, args.out / f"{prefix}{name}-compare.png")
                context.close()
            browser.close()
    finally:
        app.close()


if __name__ == "__main__":
    main()
