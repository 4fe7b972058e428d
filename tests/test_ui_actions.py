"""The chat's actions called directly (no server, no browser): queueing, stop, retry, clear, refusal,
warnings. Answers are compared with `VideoQA.ask` called with the history the chat should have kept."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from helpers.clipgen import write_clip, write_corrupt, write_event_clip
from videoqa.ui.actions import ChatActions
from videoqa.ui.session import ChatSession, shown_text
from videoqa.ui.turns import is_results

from videoqa.pruning import PruneConfig

FASTV = PruneConfig("fastv", 2, 0.5)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return write_clip(tmp_path_factory.mktemp("actions") / "walk.mp4", n_frames=30, size=(80, 48))


@pytest.fixture
def actions(tiny_qa, tmp_path) -> ChatActions:
    return ChatActions(tiny_qa, [], tmp_path)


def loaded(actions: ChatActions, clip: Path) -> ChatSession:
    session = ChatSession()
    actions.load_upload(str(clip), session)
    return session


def enqueue(actions, session, question, method="fastv", r="0.5"):
    return actions.enqueue(question, session, method, 2, r, 0, False)


def shown(session: ChatSession) -> list[str]:
    """The chat's messages as text, each answer's results block left out (tests of its own below)."""
    return [shown_text(m) for m in session.chat() if not is_results(m)]


def test_questions_asked_while_busy_are_answered_in_order_with_their_own_settings(actions, tiny_qa, clip):
    s = loaded(actions, clip)
    q1, q2 = "What colour is it?", "Where does it go?"
    assert enqueue(actions, s, q1)["question"] == "" and shown(s)[1:] == [q1, "…"]
    enqueue(actions, s, q2, method="vispruner", r="0.75")  # asked before the first is answered
    assert shown(s)[3:] == [q2, "(queued: answered after the question above)"]
    list(actions.run(s))
    a1 = tiny_qa.ask(clip, q1, prune=FASTV)
    a2 = tiny_qa.ask(clip, q2, history=[(q1, a1.text)], prune=PruneConfig("vispruner", 2, 0.75))
    assert shown(s)[1:] == [q1, a1.text, q2, a2.text]


def test_stop_keeps_the_partial_answer_and_drops_the_queue(actions, tiny_qa, clip):
    s = loaded(actions, clip)
    q1, q2, q3 = "What colour is it?", "Where does it go?", "How fast?"
    enqueue(actions, s, q1)
    enqueue(actions, s, q2)
    run = actions.run(s)
    next(run)  # the chat as it was
    next(run)  # the first token of the first answer
    partial = shown(s)[2]
    assert partial and partial != "…"
    actions.stop(s)
    list(run)
    assert shown(s)[1:] == [q1, f"{partial} (stopped)", q2, "(stopped before it was answered)"]
    # The partial answer is part of the conversation the model sees; the unanswered question is not.
    enqueue(actions, s, q3)
    list(actions.run(s))
    expected = tiny_qa.ask(clip, q3, history=[(q1, partial)], prune=FASTV)
    assert shown(s)[-1] == expected.text


def test_after_stop_replies_with_the_chat_once_the_stopped_answer_has_ended(actions, clip):
    # Stop's own reply is the chat at the click; the reply after it must be the chat as the answer ended.
    s = loaded(actions, clip)
    enqueue(actions, s, "What colour is it?")
    run = actions.run(s)
    next(run)
    next(run)  # the first token
    partial = shown(s)[2]
    assert shown_text(actions.stop(s)["chat"][2]) == f"{partial} (stopping…)"
    replies = []
    waiter = threading.Thread(target=lambda: replies.append(actions.after_stop(s)))
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive() and not replies  # the answer is still being written: no reply yet
    enqueue(actions, s, "Where does it go?")  # asked after Stop: not waited for
    next(run)  # the stopped answer's last update
    next(run)  # the next question taken: now being answered
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert shown_text(replies[0]["chat"][2]) == f"{partial} (stopped)"
    assert replies[0]["stop"]["interactive"] is True  # the question asked since can still be stopped
    list(run)


def test_retry_replaces_the_last_answer(actions, tiny_qa, clip):
    s = loaded(actions, clip)
    enqueue(actions, s, "What colour is it?", method="none")
    list(actions.run(s))
    actions.retry(s, "fastv", 2, "0.5", 0, False)
    list(actions.run(s))
    direct = tiny_qa.ask(clip, "What colour is it?", prune=FASTV)
    assert shown(s)[1:] == ["What colour is it?", direct.text]
    assert len(s.exchanges) == 1


def test_clear_forgets_what_the_model_saw_too(actions, tiny_qa, clip):
    s = loaded(actions, clip)
    enqueue(actions, s, "What colour is it?")
    list(actions.run(s))
    actions.clear(s)
    assert s.chat() == [] and s.clip == str(clip)  # the clip stays
    enqueue(actions, s, "Where does it go?")
    list(actions.run(s))
    assert shown(s) == ["Where does it go?", tiny_qa.ask(clip, "Where does it go?", prune=FASTV).text]


def test_a_refused_question_goes_back_to_the_box(actions, clip):
    s = loaded(actions, clip)
    enqueue(actions, s, "Is anyone there?")
    assert actions.refused("", s)["question"] == "Is anyone there?"
    assert "Is anyone there?" not in shown(s) and not any("busy" in t for t in shown(s))  # Gradio's toast says it
    assert s.exchanges == []
    enqueue(actions, s, "Still there?")
    box = actions.refused("and typed since", s)["question"]  # nothing typed meanwhile is lost either
    assert box == "Still there?\nand typed since"


def test_a_question_without_a_clip_stays_in_the_box(actions):
    s = ChatSession()
    out = enqueue(actions, s, "What is this?")
    assert "question" not in out  # the box is left as typed
    assert "Upload a clip" in out["notice"] and shown(s) == []  # a notice, not a turn of the chat


def test_answer_warnings_are_shown_as_notices_and_exported(actions, tiny_qa, tmp_path):
    damaged = write_corrupt(tmp_path / "damaged.mkv", n_frames=24, size=(96, 64))  # one frame readable
    warnings = tiny_qa.ask(damaged, "What colour is it?", prune=FASTV).warnings
    assert warnings  # the pipeline reports what the file could not give
    s = loaded(actions, damaged)
    enqueue(actions, s, "What colour is it?")
    enqueue(actions, s, "Where does it go?")
    list(actions.run(s))
    texts = shown(s)
    # Each answer's notices right after it, before the next question.
    notices = [f"⚠️ {w}" for w in warnings]
    assert texts[1:] == ["What colour is it?", texts[2], *notices, "Where does it go?", texts[4 + len(notices)],
                         *notices]
    doc = json.loads(Path(actions.export(s)["export_file"]["value"]).read_text())
    assert [t["warnings"] for t in doc["turns"]] == [warnings, warnings]


def test_fastvid_in_the_chat_keeps_positions_and_shades_merged_patches(actions, tiny_qa, clip):
    assert "fastvid" in actions.methods  # offered by the method picker and compare mode
    s = loaded(actions, clip)
    enqueue(actions, s, "What colour is it?", method="fastvid", r="0.9")
    outputs = list(actions.run(s))
    # The server's default is fastv, where positions mean nothing: fastvid still gets its own rule.
    direct = tiny_qa.ask(clip, "What colour is it?", prune=PruneConfig("fastvid", r=0.9))
    assert direct.prune.keep_positions is True
    assert shown(s)[1:] == ["What colour is it?", direct.text]
    gallery = next(o["gallery"]["value"] for o in reversed(outputs) if o.get("gallery", {}).get("value"))
    merged = [len(m["merged"]) for m in direct.kept.frame_masks()]
    assert sum(merged) > 0
    assert [caption.endswith(f" · {n} merged") if n else "merged" not in caption
            for (_, caption), n in zip(gallery, merged, strict=True)] == [True] * len(merged)
    record = json.loads(Path(actions.export(s)["export_file"]["value"]).read_text())["turns"][0]
    assert record["prune"]["keep_positions"] is True and record["kept"]["absorbed"]
    stats = next(o["stats"] for o in reversed(outputs) if o.get("stats"))
    n_merged = direct.kept.to_dict()["n_merged_dropped"]
    assert f"{direct.kept.n_kept} kept (10.0%), {n_merged} more merged into them" in stats


def test_queued_questions_keep_their_own_sampler_and_retry_takes_the_current_one(actions, tiny_qa, tmp_path):
    event = write_event_clip(tmp_path / "event.mp4")
    s = loaded(actions, event)
    q1, q2 = "What happens?", "And then?"
    actions.enqueue(q1, s, "fastv", 2, "0.5", 0, False, "content")
    actions.enqueue(q2, s, "fastv", 2, "0.5", 0, False, "uniform")  # asked before the first is answered
    list(actions.run(s))
    a1 = tiny_qa.ask(event, q1, prune=FASTV, sampler="content")
    a2 = tiny_qa.ask(event, q2, history=[(q1, a1.text)], prune=FASTV, sampler="uniform")
    assert a1.clip.indices != a2.clip.indices  # the two samplers place this clip's frames differently
    assert [(r["video"]["sampler"], r["video"]["indices"]) for r in s.records()] == [
        ("content", a1.clip.indices), ("uniform", a2.clip.indices)]
    assert shown(s)[1:] == [q1, a1.text, q2, a2.text]
    actions.retry(s, "fastv", 2, "0.5", 0, False, "content")
    list(actions.run(s))
    assert s.records()[-1]["video"]["indices"] == a1.clip.indices
    assert actions.enqueue(q1, s, "fastv", 2, "0.5", 0, False)["chat"]  # no sampler given: the model's own
    list(actions.run(s))
    assert s.records()[-1]["video"]["sampler"] == tiny_qa.sampler


def test_outputs_are_wired_by_name_not_by_position():
    """An action names what it updates: the event's outputs take those values whatever the dict's order, what
    it leaves out stays as it is, and an output the page does not wire is a loud error, not a shifted one."""
    import gradio as gr
    from videoqa.ui.app import wired

    assert wired(lambda: {"stats": "s", "chat": ["c"]}, ("chat", "gallery", "stats"))() == (["c"], gr.skip(), "s")
    api = wired(lambda: {"upload": None, "preview": gr.update(value="v.mp4", label="x"), "chat": []},
                ("chat", "preview"), api=True)
    assert api() == ([], "v.mp4")  # the API picks its outputs by name and gets plain values
    with pytest.raises(KeyError, match="upload"):
        wired(lambda: {"chat": [], "upload": None}, ("chat",))()


def test_compare_alone_sweeps_old_heatmaps(tiny_qa, tmp_path, clip):
    """A page used only for Compare must not keep every heatmap it ever showed: Compare sweeps as chat does."""
    import os

    actions = ChatActions(tiny_qa, [], tmp_path, max_age_s=60)
    old = tmp_path / "heatmaps" / "earlier" / "frame001.png"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"png")
    os.utime(old, (0, 0))  # written long ago
    s = loaded(actions, clip)
    list(actions.compare("What is it?", s, 2, "0.5", 0, False))
    assert not old.exists()
    assert list((tmp_path / "heatmaps").rglob("*.png"))  # this comparison's heatmaps are there
