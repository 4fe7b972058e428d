"""The web chat in a real browser: Debian's headless Chromium driven by Playwright (no bundled browser).

Needs `apt-get install -y chromium` and `pip install playwright` (never `playwright install`); skipped
when /usr/bin/chromium is missing. Leaves a screenshot in artifacts/browser.png.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from clipgen import write_clip

from ui.app import DEFAULT_SAMPLES, build_app, launch

CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[1]
SHARED_CLIP = REPO.parent / "shared" / "media" / "sample_demo_3.mp4"
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

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_upload_ask_and_see_heatmaps(tiny_qa, tmp_path):
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    clip = (
        SHARED_CLIP
        if SHARED_CLIP.exists()
        else write_clip(tmp_path / "clip.mp4", n_frames=30, size=(160, 96))
    )
    app = build_app(tiny_qa, samples_dir=DEFAULT_SAMPLES)  # the repo's examples, when present
    _, url, _ = launch(app, port=free_port(), samples_dir=DEFAULT_SAMPLES, block=False)
    shot = REPO / "artifacts" / "browser.png"
    shot.parent.mkdir(exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            try:
                drive(page, url, clip, tiny_qa)
                page.screenshot(path=str(shot), full_page=True)
            except Exception:  # keep what the page showed when it failed
                page.screenshot(path=str(shot.with_name("browser-failed.png")), full_page=True)
                raise
            finally:
                browser.close()
    finally:
        app.close()
    assert shot.stat().st_size > 10_000


def drive(page, url: str, clip: Path, qa) -> None:
    """Upload, ask, and check the answer, the stats and one heatmap per frame appear."""
    question = "What is happening in this video?"
    page.goto(url, wait_until="domcontentloaded", timeout=30_000)
    page.locator("#upload input[type=file]").set_input_files(str(clip))
    chat = page.locator("#chat")
    chat.get_by_text("Loaded").wait_for(timeout=30_000)
    assert clip.name in chat.inner_text()

    page.locator("#question textarea").fill(question)
    page.locator("#ask").click()
    page.locator("#stats table").wait_for(timeout=30_000)  # the stats come with the final answer
    thumbs = page.locator("#heatmaps img")
    thumbs.nth(7).wait_for(timeout=10_000)
    assert thumbs.count() == 8  # one heatmap per sampled frame
    assert page.locator("#heatmaps").get_by_text("#1 · ").count() >= 1
    rows = chat.locator(".message-row")
    assert rows.count() == 3  # notice, question, answer
    assert question in rows.nth(1).inner_text()
    expected = qa.ask(clip, question).text  # the same pipeline, called directly (greedy: same text)
    shown = rows.nth(2).inner_text()
    assert shown.strip() == expected.strip(), (expected, shown)
    stats = page.locator("#stats").inner_text()
    assert "520 → 260 kept" in stats and "FLOPs" in stats
