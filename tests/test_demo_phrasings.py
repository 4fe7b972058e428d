"""How the demo models are asked (issue 36): many trained phrasings per question type, held-out phrasings never
trained on, and the answers to questions the synthetic world cannot answer."""

from __future__ import annotations

import numpy as np
import pytest

from videoqa.synth import built, held_out
from videoqa.synth import long as synth_long
from videoqa.synth import short as synth

# The questions a newcomer asked in the web chat (issue 36), with the type each is trained as.
ISSUE_FORMS = {
    "What shape is moving in this video clip?": "shape",
    "Which way does it move?": "direction",
    "Where is it going?": "direction",
    "Is there a {a}?": "exists",
    "What is the background?": "unknown",
    "Is it moving fast?": "unknown",
    "How many objects are there?": "how_many",
}


def _all(templates: dict[str, list[str]]) -> set[str]:
    return {t for forms in templates.values() for t in forms}


def test_ten_phrasings_a_type_and_the_issue_forms_are_trained():
    for templates in (synth.TEMPLATES, synth_long.TEMPLATES):
        assert all(len(forms) >= 10 and len(set(forms)) == len(forms) for forms in templates.values())
    assert set(synth.TEMPLATES) == set(synth.ALL_TYPES) and set(synth_long.TEMPLATES) >= set(synth_long.QUESTION_TYPES)
    for form, qtype in ISSUE_FORMS.items():
        assert form in synth.TEMPLATES[qtype], form


def test_held_out_phrasings_are_never_trained():
    """Neither model trains on the other's held-out forms either: demo-long trains on the short clips' forms too."""
    trained = _all(synth.TEMPLATES) | _all(synth_long.TEMPLATES)
    for held, templates in ((synth.HELD_OUT_TEMPLATES, synth.TEMPLATES), (synth_long.HELD_OUT_TEMPLATES,
                                                                         synth_long.TEMPLATES)):
        assert set(held) == set(templates) and all(held.values())
        assert not _all(held) & trained
        norm = {t.lower().strip("?. ") for t in trained}
        assert not {t.lower().strip("?. ") for t in _all(held)} & norm  # not even by case or punctuation


def test_varied_questions_keep_their_words_and_never_make_a_held_out_form():
    """`phrasings.vary` (the fine-tunes' --vary) makes many forms of each trained one, none of them held out, and
    keeps the words a question's answer depends on (the named shape, colour, blank)."""
    from videoqa.synth import phrasings

    def plain(text: str) -> str:
        return " ".join(text.lower().replace("?", " ").replace(".", " ").replace(":", " ").split())

    held = [t.format(colour=c, shape=s, a=s, b=b) for table in (synth.HELD_OUT_TEMPLATES, synth_long.HELD_OUT_TEMPLATES)
            for forms in table.values() for t in forms for c in synth.COLOURS for s in synth.SHAPES
            for b in synth.SHAPES]
    held = {plain(h) for h in held}
    rng = np.random.default_rng(0)
    variants: dict[str, set[str]] = {}
    for templates in (synth.TEMPLATES, synth_long.TEMPLATES):
        for forms in templates.values():
            for t in forms:
                q = t.format(colour="red", shape="circle", a="square", b="triangle")
                for _ in range(60):
                    v = phrasings.vary(q, rng)
                    assert plain(v) not in held, (q, v)
                    for word in ("red", "circle", "square", "triangle"):
                        assert (word in q) == (word in v), (q, v)
                    variants.setdefault(q, set()).add(v)
    assert sum(len(v) for v in variants.values()) >= 8 * len(variants)  # many forms of each
    # a trained form that would become a held-out one stays as it is: "Which colour is the circle in this video?"
    assert "Which colour is the {shape} in this video?" in synth.HELD_OUT_TEMPLATES["colour"]


def test_noisy_questions_only_add_fillers_and_drop_words_that_carry_nothing():
    """`phrasings.noisy` (train_demo --vary --noise) starts from `vary`'s variant (same random draws) and only puts
    fillers in, none of them a word that only the held-out forms use (those stay unseen), and drops at most one
    DROPPABLE word: every word that says what is asked or decides the answer stays."""
    import re
    from collections import Counter

    from videoqa.synth import phrasings

    def words(text: str) -> Counter:
        return Counter(re.findall(r"[a-z]+", text.lower()))

    trained_forms = _all(synth.TEMPLATES) | _all(synth_long.TEMPLATES)
    held_only = set().union(*map(words, _all(synth.HELD_OUT_TEMPLATES) | _all(synth_long.HELD_OUT_TEMPLATES))) \
        - set().union(*map(words, trained_forms)) - built.HELD_OUT_WORDS_USED
    assert not set(phrasings._FILLERS) & held_only
    changed = n = 0
    for t in sorted(trained_forms):
        q = t.format(colour="red", shape="circle", a="square", b="triangle")
        for seed in range(30):
            base = words(phrasings.vary(q, np.random.default_rng(seed)))
            got = words(phrasings.noisy(q, np.random.default_rng(seed)))
            dropped, added = base - got, got - base
            assert sum(dropped.values()) <= 1 and set(dropped) <= phrasings.DROPPABLE, (q, base, got)
            assert set(added) <= set(phrasings._FILLERS) and sum(added.values()) <= 2, (q, base, got)
            changed += got != base
            n += 1
    assert changed > 0.5 * n  # most variants gain or lose a word


def test_noisy_never_makes_a_held_out_form(monkeypatch):
    """Where every noisy variant would match a held-out form, `noisy` gives none of them: with such patterns `vary`
    keeps the trained question, and so does `noisy`."""
    import re

    from videoqa.synth import phrasings

    monkeypatch.setattr(held_out, "_held_out_patterns", lambda: (re.compile(r".*"),))
    for t in sorted(_all(synth.TEMPLATES)):
        q = t.format(colour="red", shape="circle", a="square", b="triangle")
        assert {phrasings.noisy(q, np.random.default_rng(seed)) for seed in range(10)} == {q}


def test_answers_follow_the_clip():
    """Recomputed from the scene: yes exactly when the named shape is the clip's, "one" object, "unknown"."""
    seen = {"yes": 0, "no": 0}
    for i, scene in enumerate(synth.make_split("train", 40)):
        for templates in (synth.TEMPLATES, synth.HELD_OUT_TEMPLATES):
            qs = synth.questions(scene, np.random.default_rng(i), synth.ALL_TYPES, templates)
            got = {t: (q, a) for q, a, t in qs}
            assert [t for *_, t in qs] == synth.ALL_TYPES
            for qtype in synth.QUESTION_TYPES:
                assert got[qtype][1] == getattr(scene, qtype)
            q, a = got["exists"]
            named = next(s for s in synth.SHAPES if f" {s}" in q.replace(f"{scene.shape}s", ""))
            assert a == ("yes" if named == scene.shape else "no"), q
            seen[a] += 1
            assert got["how_many"][1] == "one" and got["unknown"][1] == "unknown"
            assert "{" not in "".join(q for q, *_ in qs)
    assert min(seen.values()) >= 20  # both answers, about evenly


def test_eval_splits_ask_the_three_types_as_before():
    """The eval splits keep their three types (the extra ones are trained, never scored as if published) and their
    phrasings: the first forms of each type, the ones the splits asked before TEMPLATES grew."""
    assert all(synth.EVAL_TEMPLATES[t] == synth.TEMPLATES[t][:3] for t in synth.QUESTION_TYPES)
    assert all(synth_long.EVAL_TEMPLATES[t] == synth_long.TEMPLATES[t][:2] for t in synth_long.QUESTION_TYPES)
    scene = synth.make_split("test", 1)[0]
    asked = synth.questions(scene, np.random.default_rng(0))
    assert [t for *_, t in asked] == synth.QUESTION_TYPES
    assert all(any(q == f.format(colour=scene.colour, shape=scene.shape) for f in synth.EVAL_TEMPLATES[t])
               for q, _, t in asked)
    long_scene = synth_long.make_split("test", 3)[2]
    types = [t for *_, t in synth_long.questions(long_scene, np.random.default_rng(0))]
    assert "unknown" not in types and types[:3] == ["colour", "shape", "direction"]
    assert [t for *_, t in synth_long.questions(long_scene, np.random.default_rng(0), extra=True)][-1] == "unknown"


@pytest.mark.parametrize("templates", [synth_long.TEMPLATES, synth_long.HELD_OUT_TEMPLATES])
def test_long_questions_fill_every_placeholder(templates):
    for i, scene in enumerate(synth_long.make_split("train", 12)):
        for q, a, t in synth_long.questions(scene, np.random.default_rng(i), True, templates):
            assert "{" not in q and a
            if t == "order":
                assert a in q


def test_fine_tune_conversations_ask_every_type_in_every_trained_form_and_learn_only_answers():
    """train_demo.py --extra-types: the learned tokens are the answers (and </s>), recomputed from the scene."""
    from transformers import VideoLlavaProcessor

    from scripts import train_demo
    from videoqa.models.tiny import EOS_ID, VIDEO_ID
    from videoqa.synth.phrasings import HOW_MANY, UNKNOWN, YES_NO

    tok = VideoLlavaProcessor.from_pretrained(train_demo.HERE / "demo-model").tokenizer
    allowed = {*synth.COLOURS, *synth.SHAPES, *synth.DIRECTIONS, *YES_NO, HOW_MANY, UNKNOWN}
    rng = np.random.default_rng(1)
    learned_words = set()
    for scene in synth.make_split("train", 30):
        ids, weights = train_demo.build_sequence(tok, scene, rng, n_video=4, dir_weight=2.0, turns=12, extra=True)
        assert ids.count(VIDEO_ID) == 4
        answer, words = [], []
        for i, w in zip(ids, weights, strict=True):
            if w and i == EOS_ID:
                words.append(tok.decode(answer).strip())
                answer = []
            elif w:
                answer.append(i)
        assert words and set(words) <= allowed | {scene.colour}, words
        learned_words |= set(words)
    assert {UNKNOWN, HOW_MANY, "yes", "no"} <= learned_words


def test_long_fine_tune_asks_the_trained_forms_and_unknown():
    """train_long_frozen_tower.py --extra-types 1: long clips get "unknown" too, in the grown TEMPLATES; an event
    question only when the frames show the event, "none" / "zero" about an erased clip."""
    from scripts import train_long_frozen_tower as tl

    trained = _all(synth_long.TEMPLATES)
    for i, scene in enumerate(synth_long.make_split("train", 12)):
        idx = synth_long.sample_indices(scene.n_frames, 8)
        for erased in (False, True):
            qas = tl.questions(scene, np.random.default_rng(i), idx, erased, True, True)
            got = {t: a for _, a, t, _ in qas}
            assert got["unknown"] == "unknown" and got["colour"] == scene.main.colour
            events = [t for t in got if t in synth_long.KIND_TYPES[scene.kind]]
            assert bool(events) == (erased or synth_long.shows(scene, idx))
            if erased:
                assert {got[t] for t in events} <= {"none", "zero"}
            assert all(any(_matches(q, f) for f in trained) for q, *_ in qas), qas


def _matches(question: str, form: str) -> bool:
    shapes = synth.SHAPES
    return any(question == form.format(a=a, b=b) for a in shapes for b in shapes)


def test_training_clips_are_rendered_in_a_folder_of_their_own(tmp_path):
    """train_demo writes each clip it decodes into a private folder under --cache: two runs sharing a cache folder
    each render a clip of the same name, and one must not read or delete the other's file."""
    from scripts import train_demo

    scene = synth.make_split("test", 1)[0]
    other_run = tmp_path / f"{scene.name}.mp4"
    other_run.write_bytes(b"another run's clip, mid-write")
    frames = train_demo.clip_frames(scene, tmp_path)
    assert frames.shape == (8, synth.CLIP_SIZE, synth.CLIP_SIZE, 3)
    assert other_run.read_bytes() == b"another run's clip, mid-write" and list(tmp_path.iterdir()) == [other_run]


def test_naming_the_object_never_gives_the_answer_away():
    """`phrasings.named` (train_demo --noise) names the object by the clip's colour or shape so that a colour word
    in a question says nothing of its type; a colour question never gains the colour, a shape question never the
    shape, and no held-out form is made."""
    from videoqa.synth import phrasings

    changed = n = 0
    rng = np.random.default_rng(0)
    for qtype in synth.QUESTION_TYPES:
        for t in synth.TEMPLATES[qtype]:
            for colour, shape in (("red", "circle"), ("blue", "square")):
                q = t.format(colour=colour, shape=shape)
                for _ in range(20):
                    v = phrasings.named(q, qtype, colour, shape, rng)
                    if qtype == "colour":
                        assert v.lower().count(colour) == q.lower().count(colour), (q, v)
                    if qtype == "shape":
                        assert v.lower().count(shape) == q.lower().count(shape), (q, v)
                    noisy = phrasings.noisy(q, rng, qtype, colour, shape)
                    assert not phrasings.held_out(noisy), (q, noisy)
                    changed += v != q
                    n += 1
    assert changed > 0.3 * n  # most forms have a word for the object to name


def test_one_word_from_a_held_out_form_is_near_it():
    """`near_held_out`, the guard on built questions: a held-out form, one with a word changed, put in or left out
    (a blank matches any word) is near; two words away is not."""

    assert built.near_held_out("Of the {a} and the {b}, which appears first?")
    assert built.near_held_out("Of the circle and the square, which appears first?")
    assert built.near_held_out("Of the {a} and the {b}, which comes first?")  # one word changed
    assert built.near_held_out("What colour was the shape that appeared briefly here?")  # one put in
    assert built.near_held_out("What colour was shape that appeared briefly?")  # one left out
    assert not built.near_held_out("Between the {a} and the {b}, which comes first?")
    assert not built.near_held_out("What colour is the moving shape?")


def test_built_questions_stay_away_from_the_held_out_forms_and_keep_their_type_words():
    """demo-long's --compose: many questions a type, none a held-out form or one word from one, none using a word
    that only the held-out forms use, each keeping the words that say its type."""
    import re

    from videoqa.synth import phrasings

    def words(forms) -> set[str]:
        return {w for f in forms for w in re.findall(r"[a-z]+", f.lower())}

    trained = _all(synth.TEMPLATES) | _all(synth_long.TEMPLATES)
    varied = {w for group in phrasings.SWAPS for w in group} | words(phrasings.OPENERS + phrasings.ENDINGS)
    held_only = words(_all(synth.HELD_OUT_TEMPLATES) | _all(synth_long.HELD_OUT_TEMPLATES)) - words(trained) - varied
    assert held_only  # the guard below has something to guard
    held_only -= built.HELD_OUT_WORDS_USED
    key = {"colour": "colour", "event_colour": "colour", "shape": "shape|a circle, a square",
           "event_shape": "shape|a circle, a square", "count": "flash|how many times|how often",
           "direction": r"\b(way|direction|where|side|left, right)\b", "order": "first|earlier"}
    assert set(built.COMPOSED_TYPES) == set(synth_long.QUESTION_TYPES)
    for qtype in built.COMPOSED_TYPES:
        forms = built.composed_forms(qtype)
        assert len(forms) >= 40 and len(set(forms)) == len(forms), qtype
        assert not words(forms) & held_only, qtype
        for f in forms:
            assert not built.near_held_out(f) and re.search(key[qtype], f.lower()), f
            if qtype == "order":
                assert "{a}" in f and "{b}" in f
        event_words = r"brief|moment|second|appears|pops|popped|comes and|shown|other|extra|goes away"
        events = [f for f in forms if re.search(event_words, f)]
        assert (len(events) == len(forms)) == qtype.startswith("event_"), qtype  # the object named as asked
    # demo's (train_demo --compose): its three types, the clip's own colour or shape in some, never the answer
    assert set(built.SHORT_COMPOSED_TYPES) == set(synth.QUESTION_TYPES)
    for qtype in built.SHORT_COMPOSED_TYPES:
        forms = built.composed_forms(qtype, short=True)
        assert len(forms) >= 40 and not words(forms) & held_only, qtype
        assert not any(f"{{{qtype}}}" in f for f in forms) and any("{" in f for f in forms), qtype
        for f in forms:
            assert not built.near_held_out(f) and re.search(key[qtype], f.lower()), f


def test_long_fine_tune_builds_and_repeats_questions_only_when_asked():
    """train_long_frozen_tower --compose / --reps: at 0 / 1 the questions (and the random draws) are the table's as
    before; --compose 1 asks built questions; --reps 2 asks each type twice, answers unchanged."""
    from scripts import train_long_frozen_tower as tl

    for i, scene in enumerate(synth_long.make_split("train", 9)):
        idx = list(range(scene.n_frames))
        ours, theirs = np.random.default_rng(i), np.random.default_rng(i)
        before = synth_long.questions(scene, theirs, False, synth_long.TEMPLATES)
        assert [q[:3] for q in tl.questions(scene, ours, idx, False)] == before
        assert ours.random() == theirs.random()  # no draw more: the recipes before --compose train as they did
        made = tl.questions(scene, np.random.default_rng(i), idx, False, compose=1.0)
        assert all(any(_matches(q, f) for f in built.composed_forms(t)) for q, _, t, _ in made), made
        assert [(a, t) for _, a, t, _ in made] == [(a, t) for _, a, t in before]
        twice = tl.questions(scene, np.random.default_rng(i), idx, False, compose=0.5, reps=2)
        assert sorted((a, t) for _, a, t, _ in twice) == sorted(2 * [(a, t) for _, a, t in before])


def test_short_fine_tune_builds_questions_only_when_asked(monkeypatch):
    """train_demo --compose: at 0 the conversation (and the random draws) is the trained forms' as before; at 1 every
    colour, shape and direction question is a built one, filled in with the clip's own colour and shape, and every
    answer is unchanged."""
    from scripts import train_demo

    monkeypatch.setattr(train_demo, "pack_turns", lambda tok, turns, *rest: turns)
    for i, scene in enumerate(synth.make_split("train", 12)):
        ours, theirs = np.random.default_rng(i), np.random.default_rng(i)
        before = train_demo.build_sequence(None, scene, theirs, 4, 1.0, turns=12)
        assert train_demo.build_sequence(None, scene, ours, 4, 1.0, turns=12, compose=0.0) == before
        assert ours.random() == theirs.random()  # no draw more: the recipes before --compose train as they did
        made = train_demo.build_sequence(None, scene, np.random.default_rng(i), 4, 1.0, turns=12, compose=1.0)
        assert [a for _, a, _ in made] == [a for _, a, _ in before]
        for q, a, _ in made:
            qtype = next(t for t in synth.QUESTION_TYPES if getattr(scene, t) == a)
            forms = [f.format(colour=scene.colour, shape=scene.shape) for f in built.composed_forms(qtype, short=True)]
            assert q in forms, q


def test_held_out_sets_split_each_list_in_the_order_written_and_measure_pools_by_set():
    """held_out.SETS: each type's held-out list is its sets one after another (the types asked of both models have
    every set; the others only the first); measure_phrasings' by-set table pools each set's forms' questions and
    divides by the type's trained accuracy, recomputed here by hand."""
    from scripts import measure_phrasings as mp

    for model, table, types in (("demo", synth.HELD_OUT_TEMPLATES, synth.QUESTION_TYPES),
                                ("demo-long", synth_long.HELD_OUT_TEMPLATES, synth_long.QUESTION_TYPES)):
        sizes = [n for _, n in held_out.SETS[model]]
        for qtype, forms in table.items():
            got = [held_out.set_of(model, qtype, f) for f in forms]
            assert len(forms) == sum(sizes) if qtype in types else set(got) == {"A"}, (model, qtype)
            assert got == sorted(got) and got[0] == "A", (model, qtype)
            if qtype in types:
                assert [got.count(name) for name, _ in held_out.SETS[model]] == sizes, (model, qtype)
    d = synth_long.HELD_OUT_TEMPLATES["count"]
    by_form = {("count", d[0]): [True, True], ("count", d[1]): [False, True],  # set A
               ("count", d[9]): [True, False, False, False]}  # set D
    rows = mp.by_set("demo-long", by_form, {"count": 80.0})
    assert rows == [("count", "A", 4, 75.0, 75.0 / 80 * 100), ("count", "D", 4, 25.0, 25.0 / 80 * 100)]


@pytest.mark.parametrize("model", ["demo", "demo-long"])
def test_measure_asks_every_form_once_or_one_drawn_form(model, tmp_path):
    """scripts/measure_phrasings: by default one trained and one held-out form a type a clip, drawn (no form to
    count it under); with --every-form each form of each type exactly once a clip, each question that form filled in."""
    import re

    from scripts import measure_phrasings as mp

    def fills(form: str, question: str) -> bool:
        return re.fullmatch(r"\w+".join(map(re.escape, re.split(r"\{\w+\}", form))), question) is not None

    tables = {"trained": synth_long.TEMPLATES, "held-out": synth_long.HELD_OUT_TEMPLATES} if model == "demo-long" \
        else {"trained": synth.TEMPLATES, "held-out": synth.HELD_OUT_TEMPLATES}
    drawn, _ = mp.asked(model, 2, tmp_path)
    every, _ = mp.asked(model, 2, tmp_path, every=True)
    for items, each in ((drawn, False), (every, True)):
        per = {}
        for clip, q, _, t, kind, form in items:
            assert "{" not in q and any(fills(f, q) for f in tables[kind][t]), q
            assert (fills(form, q) and form in tables[kind][t]) if each else form is None, (form, q)
            per.setdefault((clip, t, kind), []).append(form)
        for (_, t, kind), forms in per.items():
            assert sorted(forms) == sorted(tables[kind][t]) if each else forms == [None]


def test_measure_asks_a_users_own_forms_beside_the_trained_ones_and_refuses_a_bad_one(tmp_path, capsys):
    """measure_phrasings --form TYPE=QUESTION: each given phrasing once a clip, in place of the held-out forms, with
    every trained form of its type and no other type; a form of a type the model is not asked, or without TYPE=,
    ends the run with one line naming it (exit 2)."""
    from scripts import measure_phrasings as mp

    mine = {"count": ["How many times does the screen go bright?"],
            "order": ["Out of the {a} and the {b}, which came first?"]}
    items, frames = mp.asked("demo-long", 3, tmp_path, forms=mine, every=True)
    assert frames == 24
    assert {(t, kind) for *_, t, kind, _ in items} == {(t, k) for t in mine for k in ("trained", "held-out")}
    per = {}
    for clip, q, _, t, kind, form in items:
        table = mine if kind == "held-out" else synth_long.TEMPLATES
        assert form in table[t] and "{" not in q, (kind, form, q)
        per.setdefault((clip, t, kind), []).append(form)
    assert per and all(sorted(f) == sorted(mine[t] if kind == "held-out" else synth_long.TEMPLATES[t])
                       for (_, t, kind), f in per.items())
    for bad, says in (("background=What is behind it?", "not 'background'"), ("How many flashes?", "TYPE=QUESTION"),
                      ("order=Which came first?", "{a} and {b}")):
        with pytest.raises(SystemExit) as stop:
            mp.main(["--model", "demo-long", "--clips", "1", "--form", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert stop.value.code == 2 and says in err[-1] and "Traceback" not in "\n".join(err), err
