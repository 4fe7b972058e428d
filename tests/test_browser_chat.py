"""Issue 22's behaviour items in a real browser (what only a page shows: the export file offered, toasts,
the stopping state). Same server, browser and helpers as test_browser.py."""

from __future__ import annotations

import test_browser as tb
from test_browser import ask, first_token_shown, message, results, rows, upload

# test_browser's fixtures: its server (answers held on request), browser and a fresh tab per test
held, clips, server, browser, desktop, page = tb.held, tb.clips, tb.server, tb.browser, tb.desktop, tb.page

pytestmark = tb.BROWSER_MARKS
expect = tb.expect


def wait_answered(page, n: int = 1) -> None:
    expect(results(page)).to_have_count(n)  # each answer's results block comes with its last words
    expect(page.locator("#stop")).to_be_disabled()


# -- item 5: the offered export is always the conversation on screen -----------------------------------

def test_export_is_withdrawn_when_the_chat_changes_and_an_empty_chat_has_none(page, clips):
    offered = page.locator("#export-file")
    upload(page, clips["walk"])
    page.locator("#export").click()  # nothing answered yet: nothing to export
    expect(page.locator("#notice")).to_contain_text("Nothing to export yet")
    expect(offered).to_be_hidden()
    ask(page, "What colour is it?")
    wait_answered(page)
    page.locator("#export").click()
    expect(offered).to_be_visible()
    ask(page, "Where does it go?")  # the file on offer no longer holds the conversation on screen
    expect(offered).to_be_hidden()
    wait_answered(page, 2)
    page.locator("#export").click()
    expect(offered).to_be_visible()
    upload(page, clips["avi"])  # another clip: a new conversation
    expect(offered).to_be_hidden()


# -- item 12: notices about the controls are not chat turns ---------------------------------------------

def test_notices_about_the_controls_do_not_pile_up_in_the_chat(page, clips):
    upload(page, clips["walk"])
    for _ in range(3):
        page.locator("#ask").click()  # an empty box
        expect(page.locator("#notice")).to_contain_text("Type a question first.")
        page.locator("#retry").click()
        expect(page.locator("#notice")).to_contain_text("Nothing to retry yet")
    expect(rows(page)).to_have_count(1)  # only the clip's "Loaded" message
    ask(page, "What colour is it?")
    expect(page.locator("#notice")).to_have_text("")  # a question asked: the notice is gone
    wait_answered(page)


# -- item 7: Stop shows at once that it is stopping -----------------------------------------------------

def test_stop_shows_the_stopping_state_at_once(page, clips, held):
    upload(page, clips["walk"])
    held.hold()
    ask(page, "What colour is it?")
    partial = first_token_shown(page, 2)
    page.locator("#stop").click()
    # The answer is still held (its loop has not seen the Stop yet): the page says so anyway, at once.
    expect(message(page, 2)).to_have_text(f"{partial} (stopping…)", timeout=2_000)
    expect(page.locator("#stop")).to_be_disabled(timeout=2_000)
    held.release()
    expect(message(page, 2)).to_have_text(f"{partial} (stopped)")


def test_a_new_clip_mid_answer_disables_stop_at_once(page, clips, held):
    upload(page, clips["walk"])
    held.hold()
    ask(page, "What colour is it?")
    first_token_shown(page, 2)
    expect(page.locator("#stop")).to_be_enabled()
    upload(page, clips["avi"])  # the old answer is still held: only the new clip can have disabled Stop
    expect(page.locator("#stop")).to_be_disabled(timeout=2_000)
    held.release()
