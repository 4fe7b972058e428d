"""How the demo models are asked: the phrasings they are trained on and the ones kept back to measure them.

`short.TEMPLATES` / `long.TEMPLATES` are the trained forms (question type -> phrasings; "{colour}", "{shape}" are
filled with the clip's own moving shape, "{a}" / "{b}" with shapes the question names); `HELD_OUT_TEMPLATES`
have the same shape and are never trained on: `scripts/measure_phrasings.py` compares the two per type.

The synthetic world has one moving shape on a plain textured background, so some questions a person asks have
no answer in it. What the models say to those (docs/demo-models.md, "What it answers"):

* "How many objects are there?" -> "one" (true of every short clip: type ``how_many``);
* "Is there a square?" -> "yes" / "no" (type ``exists``: is the moving shape the one named);
* the background, speed, size, sound, who or why -> the fixed word "unknown" (type ``unknown``): a short,
  visibly non-committal answer rather than a confident colour.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

UNKNOWN = "unknown"  # the answer to questions the synthetic world cannot answer
YES_NO = ["yes", "no"]
HOW_MANY = "one"  # the short clips hold exactly one object

_UNKNOWN_TRAINED = [
    "What is the background?",
    "Is it moving fast?",
    "How fast is it moving?",
    "What is the background made of?",
    "What sound does it make?",
    "Who made this video?",
    "Why is it moving?",
    "What time of day is it?",
    "What is the weather like?",
    "How big is the shape?",
    "Where was this filmed?",
    "What will happen next?",
]
_UNKNOWN_HELD_OUT = [
    "What is behind the shape?",
    "How quickly does it move?",
    "Who is in the video?",
    "What happens after the clip ends?",
]

SHORT: dict[str, list[str]] = {
    "colour": [
        "What colour is the shape?",
        "What color is the moving object?",
        "Which colour is the {shape}?",
        "What colour is it?",
        "What color is the shape in the video?",
        "Which color is the object?",
        "What is the colour of the moving shape?",
        "Tell me the colour of the object.",
        "What colour is the thing that moves?",
        "Name the colour of the {shape}.",
        "What color is the moving {shape}?",
        "Which colour does the moving shape have?",
        "Which colour does the {shape} have?",
    ],
    "shape": [
        "What shape is moving?",
        "What is the shape of the {colour} object?",
        "Which shape is in the video?",
        "What shape is it?",
        "What shape is moving in this video clip?",
        "What kind of shape is it?",
        "Which shape moves across the video?",
        "What is the moving object?",
        "Name the shape.",
        "What shape is the {colour} thing?",
        "Is it a circle, a square or a triangle?",
        "What shape do you see?",
        "Which shape does the video show?",
        "Which shape is the {colour} object?",
    ],
    "direction": [
        "Which direction does the {colour} {shape} move?",
        "In which direction is the shape moving?",
        "Where is the object moving: left, right, up or down?",
        "Which direction does it move?",
        "Which way does it move?",
        "Where is it going?",
        "Which way is the {shape} going?",
        "What direction is the object moving in?",
        "Where does the shape move?",
        "Is it moving left, right, up or down?",
        "In what direction does the {colour} object travel?",
        "Which way does the shape go?",
    ],
    "exists": [
        "Is there a {a}?",
        "Is there a {a} in the video?",
        "Do you see a {a}?",
        "Is the moving shape a {a}?",
        "Is it a {a}?",
        "Does the video show a {a}?",
        "Is the object a {a}?",
        "Can you see a {a}?",
        "Is a {a} moving?",
        "Does a {a} appear in the clip?",
    ],
    "how_many": [
        "How many objects are there?",
        "How many shapes are there?",
        "How many shapes are in the video?",
        "How many objects move?",
        "How many things are moving?",
        "How many moving objects are there?",
        "Count the shapes.",
        "How many shapes do you see?",
        "How many objects are in the clip?",
        "How many {shape}s are there?",
    ],
    "unknown": _UNKNOWN_TRAINED,
}

SHORT_HELD_OUT: dict[str, list[str]] = {
    "colour": [
        "Could you tell me the colour of the moving shape?",
        "What is the color of the object in this clip?",
        "Which colour is the {shape} in this video?",
        "What colour does the object have?",
        "What's the colour of the shape?",
        "Can you tell what colour the object is?",
        "The shape is what colour?",
    ],
    "shape": [
        "What sort of shape is moving in the clip?",
        "Which shape does the {colour} object have?",
        "Tell me what shape the object is.",
        "What shape can you see in this video?",
        "What's the object's shape?",
        "Can you tell what shape it is?",
        "Which of the shapes is it?",
    ],
    "direction": [
        "Which way is the object heading?",
        "Where does the {colour} {shape} go?",
        "In which direction does the object travel in the clip?",
        "What direction does it go?",
        "Where is the shape headed?",
        "Can you tell which way the object moves?",
        "The shape goes which way?",
    ],
    "exists": [
        "Is there any {a} in this clip?",
        "Is the {colour} object a {a}?",
        "Do I see a {a} here?",
        "Is the thing that moves a {a}?",
    ],
    "how_many": [
        "How many objects can you see?",
        "What is the number of shapes in the video?",
        "How many things are in this clip?",
        "How many moving shapes are there?",
    ],
    "unknown": _UNKNOWN_HELD_OUT,
}

LONG: dict[str, list[str]] = {
    "colour": [
        "What colour is the moving shape?",
        "What color is the moving object?",
        "What colour is the shape that moves?",
        "Which colour is the moving shape?",
        "What is the colour of the moving object?",
        "What color is the shape moving across the video?",
        "Tell me the colour of the moving shape.",
        "What colour is the object that keeps moving?",
        "Which color does the moving object have?",
        "What colour is the moving thing?",
    ],
    "shape": [
        "What shape is moving?",
        "Which shape moves across the video?",
        "What shape is moving in this video clip?",
        "What is the moving shape?",
        "Which shape is the moving one?",
        "What kind of shape moves?",
        "Name the moving shape.",
        "What shape does the moving object have?",
        "What shape crosses the video?",
        "Is the moving shape a circle, a square or a triangle?",
    ],
    "direction": [
        "Which direction does the moving shape go?",
        "In which direction is the shape moving?",
        "Which way does it move?",
        "Where is it going?",
        "Which way does the moving shape go?",
        "What direction is the moving object going in?",
        "Where does the moving shape move?",
        "Is the moving shape going left, right, up or down?",
        "In what direction does the moving object travel?",
        "Which way is the moving shape heading?",
    ],
    "event_colour": [
        "What colour is the shape that appears briefly?",
        "What color is the object that shows up for a moment?",
        "What colour is the brief shape?",
        "Which colour is the shape that appears for a moment?",
        "What colour is the object that appears briefly?",
        "What colour is the second shape?",
        "What colour is the shape that appears and disappears?",
        "Which color has the brief object?",
        "What colour is the shape that shows up briefly?",
        "What is the colour of the shape that appears for a short time?",
    ],
    "event_shape": [
        "What shape appears briefly?",
        "Which shape shows up for a moment?",
        "What shape is the brief object?",
        "What shape appears for a moment?",
        "Which shape appears and disappears?",
        "What is the shape that shows up briefly?",
        "What shape is the second object?",
        "Which shape appears briefly?",
        "What shape pops up for a moment?",
        "Name the shape that appears briefly.",
    ],
    "count": [
        "How many times does the screen flash?",
        "How many flashes are there?",
        "How many times does the background flash?",
        "How often does the screen flash?",
        "How many flashes do you see?",
        "Count the flashes.",
        "How many times does it flash?",
        "How many times does the screen light up?",
        "How many times does the background turn light?",
        "How many flashes happen in the video?",
    ],
    "order": [
        "Which appears first, the {a} or the {b}?",
        "Which shape shows up first: the {a} or the {b}?",
        "Which comes first, the {a} or the {b}?",
        "Which shape appears first, the {a} or the {b}?",
        "Does the {a} or the {b} appear first?",
        "Which is shown first: the {a} or the {b}?",
        "Which appears earlier, the {a} or the {b}?",
        "Which shape comes first: the {a} or the {b}?",
        "What appears first, the {a} or the {b}?",
        "Which of the {a} and the {b} shows up first?",
    ],
    "unknown": _UNKNOWN_TRAINED,
}

LONG_HELD_OUT: dict[str, list[str]] = {
    "colour": [
        "Could you tell me the colour of the moving shape?",
        "What is the color of the object moving in this clip?",
        "Which colour has the shape that crosses the video?",
        "What's the colour of the object in motion?",
        "Can you tell what colour the moving object is?",
        "The moving shape is what colour?",
        "What colour does the moving shape appear to be?",
        "Say which colour the moving object has.",
        "Identify the moving shape's colour.",
    ],
    "shape": [
        "What sort of shape is moving in the clip?",
        "Tell me the shape of the moving object.",
        "Which shape travels across the video?",
        "What's the moving object's shape?",
        "Can you tell what shape is moving?",
        "Which of the three shapes is moving?",
        "What shape would you say is moving?",
        "Identify which shape is moving.",
        "The thing in motion, what shape is it?",
    ],
    "direction": [
        "Where does the moving object go?",
        "What direction does the moving shape travel in?",
        "Which way does the moving object go in this clip?",
        "Towards which side does the moving shape go?",
        "Can you tell which way the object moves?",
        "The moving shape goes which way?",
        "Which direction is the moving thing going in?",
        "Left, right, up or down: where does the moving shape go?",
        "Identify the direction of the moving shape.",
    ],
    "event_colour": [
        "What colour was the shape that appeared briefly?",
        "Which colour does the briefly shown object have?",
        "What is the color of the shape that pops up for a moment?",
        "What's the colour of the shape that only shows up for a moment?",
        "Can you tell what colour the brief shape is?",
        "The object that appears for a moment is what colour?",
        "Identify the brief shape's colour.",
        "What colour did that brief shape have?",
        "The short-lived shape: what colour?",
    ],
    "event_shape": [
        "What shape was shown for a moment?",
        "Which shape briefly appears in the clip?",
        "What is the shape of the object that appears briefly?",
        "What's the brief object's shape?",
        "Can you tell what shape appears briefly?",
        "Which shape was it that appeared for a moment?",
        "Identify the shape that shows up briefly.",
        "What shape did the brief object have?",
        "What was the briefly visible shape?",
    ],
    "count": [
        "How many times did the screen flash?",
        "How many flashes does the clip have?",
        "How often does the background light up?",
        "How many flashes can you count?",
        "Can you tell how many times the screen flashes?",
        "The background flashes how many times?",
        "Identify the number of flashes.",
        "How many flashes did you spot?",
        "What's the flash count?",
    ],
    "order": [
        "Which one is seen first, the {a} or the {b}?",
        "Which shape was shown first, the {a} or the {b}?",
        "Of the {a} and the {b}, which appears first?",
        "Can you tell which appears first, the {a} or the {b}?",
        "Which do we see first, the {a} or the {b}?",
        "Is the {a} or the {b} shown first?",
        "Identify whichever shows up first, the {a} or the {b}.",
        "Was it the {a} or the {b} that appeared first?",
        "First to appear: the {a} or the {b}?",
    ],
    "unknown": _UNKNOWN_HELD_OUT,
}


# The fine-tunes vary each trained form at random (`vary`) so that a tiny model learns the words that carry a
# question's type instead of memorising a dozen whole strings: word swaps, an opener, an ending. A variant that
# is a held-out form is never produced, so the held-out forms stay unseen.
_SWAPS = (("colour", "color"), ("object", "thing"), ("video", "clip"), ("moves", "goes"), ("move", "go"))
_OPENERS = ("", "", "", "Please tell me: ", "Look at the video. ", "Question: ", "Answer this: ", "About the video: ")
_ENDINGS = ("?", "?", " in the video?", " in this video?", " here?", " now?")


@cache
def _held_out_patterns() -> tuple[re.Pattern, ...]:
    forms = [t for table in (SHORT_HELD_OUT, LONG_HELD_OUT) for ts in table.values() for t in ts]
    slots = (_plain(re.sub(r"\{\w+\}", "slot", t)) for t in forms)  # a blank matches any one word
    return tuple(re.compile(re.escape(f).replace("slot", r"[a-z]+")) for f in slots)


def _plain(text: str) -> str:
    return " ".join(re.findall(r"[a-z]+", text.lower().replace("'", "")))  # "what's" is one word


def held_out(question: str) -> bool:
    """Whether a question is one of the held-out forms (either model's, any words in the blanks), letter case and
    punctuation aside: what no fine-tune trains on."""
    plain = _plain(question)
    return any(p.fullmatch(plain) for p in _held_out_patterns())


def vary(question: str, rng: np.random.Generator) -> str:
    """A random variant of a trained question (its answer unchanged): some words swapped for others of the same
    meaning here, maybe an opener, maybe another ending; the question itself when the variant would be a held-out
    form."""
    words = question.split(" ")
    for i, word in enumerate(words):
        core = word.rstrip("?.,:")
        group = next((g for g in _SWAPS if core.lower() in g), None)
        if group is not None and rng.random() < 0.5:
            new = group[int(rng.integers(len(group)))]
            words[i] = (new.capitalize() if core[:1].isupper() else new) + word[len(core):]
    text = " ".join(words)
    if text.endswith("?") and not re.search(r"\b(video|clip)\b", text) and rng.random() < 0.5:
        text = text[:-1] + _ENDINGS[int(rng.integers(len(_ENDINGS)))]
    opener = _OPENERS[int(rng.integers(len(_OPENERS)))]
    if opener:
        text = opener + (text if opener.endswith(". ") else text[:1].lower() + text[1:])
    return question if held_out(text) else text


# `noisy` goes further than `vary` (the fine-tunes' --noise): filler words, some of them made up, are put in and a word
# that says nothing of the question's type may go, so that the type has to be read from its key words (what, shape,
# colour, way, how many, ...) whatever else a question says. No filler is a word that only the held-out forms use.
_FILLERS = ("please", "now", "exactly", "really", "just", "there", "you", "can", "see", "kind", "of", "tell", "me",
            "that", "this", "little", "thing", "frame", "picture", "then", "actually", "currently", "so", "well",
            "okay", "hmm", "zorb", "flim", "quax", "dremp", "blick", "snoo", "vark", "plonk")
# What `noisy` may drop: words that say nothing of a question's type or answer (never a colour, shape or key word).
DROPPABLE = frozenset({"the", "this", "that", "in", "of", "video", "clip", "please", "tell", "me", "question",
                       "answer", "look", "at", "about", "now", "here", "it", "you"})


# Where `noisy` may name the object by what it looks like: "the object" -> "the green object" / "the circle".
_NOUNS = ("object", "thing", "shape")


def named(question: str, qtype: str, colour: str, shape: str, rng: np.random.Generator) -> str:
    """The question with one word for the object ("object", "thing", "it", or "shape" when it is not the asked-for
    word) given the clip's colour before it or replaced by the clip's shape name, at random, never naming the answer:
    so that a colour or shape word in a question says nothing of what the question asks."""
    words = question.split(" ")
    said = {w.rstrip("?.,:").lower().removesuffix("s") for w in words}  # "circles" names a circle too
    spots = [i for i, w in enumerate(words) if w.rstrip("?.,:").lower() in (*_NOUNS, "it")
             and not (qtype == "shape" and w.rstrip("?.,:").lower() == "shape")
             and not (i and words[i - 1].lower() in (colour, "what", "which", "of", "kind"))]
    if not spots or colour in said and shape in said:
        return question
    i = spots[int(rng.integers(len(spots)))]
    core = words[i].rstrip("?.,:")
    tail = words[i][len(core):]
    the = "the " if core.lower() == "it" else ""  # "it" -> "the green object" / "the circle"
    noun = "object" if the else core
    if qtype != "colour" and colour not in said and (qtype == "shape" or rng.random() < 0.5):
        words[i] = f"{the}{colour} {noun}{tail}"
    elif qtype != "shape" and shape not in said:
        words[i] = the + shape + tail
    return " ".join(words)


def noisy(question: str, rng: np.random.Generator, qtype: str = "", colour: str = "", shape: str = "") -> str:
    """`vary`'s variant of a trained question, then maybe one DROPPABLE word dropped and up to two fillers put in;
    the variant itself when that would be a held-out form. Given the question's type and the clip's colour and
    shape, the object is also named by one of them half the time (`named`)."""
    text = vary(question, rng)
    if qtype and rng.random() < 0.5:
        text = named(text, qtype, colour, shape, rng)
    words = text.split(" ")
    if rng.random() < 0.3 and len(words) > 3:
        droppable = [i for i, w in enumerate(words[:-1]) if w.rstrip("?.,:").lower() in DROPPABLE]
        if droppable:
            del words[int(rng.choice(droppable))]
    for _ in range(int(rng.integers(0, 3))):
        words.insert(int(rng.integers(1, len(words))), _FILLERS[int(rng.integers(len(_FILLERS)))])
    out = " ".join(words)
    return text if held_out(out) else out


# demo-long's fine-tunes also build questions from parts (`compose`, train_long_frozen_tower --compose): a head that
# says what is asked ("What colour is", "Which shape has", "How often does") joined to the words for what it is asked
# about ("the shape that appears briefly", "the background"). A type then has to be read from its head whatever
# follows it, and the object from its description, which the ten written forms a type has do not force on a model
# this small. No part uses a word that only the held-out forms use, and a built question one word away from a
# held-out form (a blank matching any word) is never given: the held-out forms stay unseen, builds and words.
_MOVING = ("the moving shape", "the shape that moves", "the moving object", "the object that moves",
           "the shape moving across the video", "the object that keeps moving", "the moving thing",
           "the shape that is moving", "the object moving across the video", "the shape that goes across the video",
           "the thing that keeps moving", "the object that is moving", "the object", "it", "the thing")
_BRIEF = ("the shape that appears briefly", "the object that shows up for a moment", "the brief shape",
          "the brief object", "the second shape", "the second object", "the shape that appears and disappears",
          "the shape that shows up briefly", "the object that appears for a moment", "the shape that pops up",
          "the object that is there just for a moment", "the object that appears for a short time",
          "the shape that comes and goes", "the object that shows up briefly", "the thing that appears briefly",
          "the shape that is there for a moment", "the briefly shown shape", "the shape shown for a moment",
          "the other shape", "the extra object", "the shape that shows up and goes away", "the object shown briefly",
          "the briefly appearing shape")
_COLOUR_HEADS = ("What colour is {S}?", "Which colour is {S}?", "What is the colour of {S}?",
                 "Tell me the colour of {S}.", "Name the colour of {S}.", "Which colour does {S} have?",
                 "What colour does {S} have?", "Which colour has {S}?", "State the colour of {S}.",
                 "What colour has {S}?", "Give the colour of {S}.", "What is {S}'s colour?", "{S}: what colour is it?",
                 "{S} has which colour?", "{S} is what colour?", "Can you tell me what colour {S} is?",
                 "Do you know what colour {S} is?", "Colour of {S}?", "{S}'s colour?", "{S}, colour?")
_SHAPE_HEADS = ("What shape is {S}?", "Which shape is {S}?", "What is the shape of {S}?", "Tell me the shape of {S}.",
                "Name the shape of {S}.", "What shape does {S} have?", "Which shape does {S} have?",
                "What kind of shape is {S}?", "Which shape has {S}?", "State the shape of {S}.",
                "Give the shape of {S}.", "{S}: what shape is it?", "{S} is which shape?",
                "Is {S} a circle, a square or a triangle?", "Can you tell me what shape {S} is?",
                "Do you know what shape {S} is?", "{S} has what shape?", "Shape of {S}?", "{S}'s shape?", "{S}, shape?")
_DIRECTION_HEADS = ("Which way does {S} go?", "Which way does {S} move?", "In which direction does {S} move?",
                    "Where does {S} go?", "What direction does {S} move in?", "Which direction is {S} heading?",
                    "Is {S} going left, right, up or down?", "Where is {S} heading?", "Which way is {S} going?",
                    "In what direction does {S} go?", "{S}: which way does it go?", "Tell me which way {S} moves.",
                    "{S} moves which way?", "Can you tell me which way {S} goes?", "Do you know which way {S} moves?",
                    "{S} is going in which direction?", "Direction of {S}?", "{S}'s direction?", "{S}, which way?")
_FLASHERS = ("the screen", "the background", "the video", "it", "the picture", "the whole screen")
_COUNT_HEADS = ("How many times does {S} flash?", "How many times does {S} light up?", "How often does {S} flash?",
                "How many times does {S} turn light?", "How often does {S} light up?", "How many flashes are there?",
                "How many flashes do you see?", "How many flashes happen?", "Count the flashes.",
                "How many flashes are in the video?", "How many times is there a flash?",
                "Count how often {S} flashes.", "How many times does {S} get brighter?",
                "Tell me how many times {S} flashes.", "How many flashes does {S} have?", "{S} flashes how often?",
                "Can you tell me how many times {S} flashes?", "Do you know how many flashes there are?",
                "How many times is {S} lit up?", "Count how many flashes there are.", "How many flashes are shown?",
                "How many flashes?", "Flashes, how many?", "How many flashes in total?", "Total flashes?")
_FIRST_VERBS = ("appears", "comes", "shows up", "is shown", "is there", "turns up")
_ORDER_HEADS = ("Which {V} first, the {a} or the {b}?", "Which shape {V} first: the {a} or the {b}?",
                "What {V} first, the {a} or the {b}?", "Which object {V} first, the {a} or the {b}?",
                "Which of the {a} and the {b} {V} first?", "Between the {a} and the {b}, which {V} first?",
                "The {a} or the {b}: which {V} first?", "Which {V} earlier, the {a} or the {b}?",
                "Tell me which {V} first, the {a} or the {b}.", "Which {V} first of the two, the {a} or the {b}?",
                "Can you tell me which {V} first, the {a} or the {b}?",
                "Do you know which {V} first, the {a} or the {b}?", "The {a} or the {b}, which {V} first?",
                "First, the {a} or the {b}?", "{V} first: the {a} or the {b}?")
_COMPOSED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "colour": (_COLOUR_HEADS, _MOVING), "shape": (_SHAPE_HEADS, _MOVING), "direction": (_DIRECTION_HEADS, _MOVING),
    "event_colour": (_COLOUR_HEADS, _BRIEF), "event_shape": (_SHAPE_HEADS, _BRIEF), "count": (_COUNT_HEADS, _FLASHERS),
    "order": (_ORDER_HEADS, _FIRST_VERBS),
}
COMPOSED_TYPES = tuple(_COMPOSED)


def _built(head: str, part: str) -> str:
    if "{V}" in head:
        return head.replace("{V}", part)
    text = head.replace("{S}", part).replace("it's", "its")
    return text[:1].upper() + text[1:]


@cache
def _held_out_words() -> tuple[tuple[str, ...], ...]:
    forms = [t for table in (SHORT_HELD_OUT, LONG_HELD_OUT) for ts in table.values() for t in ts]
    return tuple(tuple(_plain(re.sub(r"\{\w+\}", "slot", t)).split()) for t in forms)


def _within_one_word(words: list[str], form: tuple[str, ...]) -> bool:
    """Whether one word changed, put in or left out turns `words` into `form` ("slot" in either matches any word)."""
    if abs(len(words) - len(form)) > 1:
        return False
    same = lambda x, y: x == y or "slot" in (x, y)  # noqa: E731
    i = 0
    while i < min(len(words), len(form)) and same(words[i], form[i]):
        i += 1
    a, b = words[i:], list(form[i:])
    return any(all(same(x, y) for x, y in zip(p, q, strict=False)) and len(p) == len(q)
               for p, q in ((a[1:], b[1:]), (a[1:], b), (a, b[1:])))


def near_held_out(question: str) -> bool:
    """Whether a question is a held-out form or one word away from one (blanks match any word)."""
    words = _plain(re.sub(r"\{\w+\}", "slot", question)).split()
    return any(_within_one_word(words, form) for form in _held_out_words())


@cache
def composed_forms(qtype: str) -> tuple[str, ...]:
    """Every question `compose` may give for a type, "{a}" / "{b}" left for the order question's shapes."""
    heads, parts = _COMPOSED[qtype]
    built = dict.fromkeys(_built(h, p) for h in heads for p in parts if "{S}" in h or "{V}" in h or p == parts[0])
    return tuple(q for q in built if not near_held_out(q))


def compose(qtype: str, rng: np.random.Generator) -> str:
    """A question of the type built from a head and a description (see above), drawn at random."""
    forms = composed_forms(qtype)
    return forms[int(rng.integers(len(forms)))]
