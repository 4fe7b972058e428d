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

import numpy as np

from videoqa.synth.held_out import held_out

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

# The fine-tunes vary each trained form at random (`vary`) so that a tiny model learns the words that carry a
# question's type instead of memorising a dozen whole strings: word swaps, an opener, an ending. A variant that
# is a held-out form is never produced, so the held-out forms stay unseen.
SWAPS = (("colour", "color"), ("object", "thing"), ("video", "clip"), ("moves", "goes"), ("move", "go"))
OPENERS = ("", "", "", "Please tell me: ", "Look at the video. ", "Question: ", "Answer this: ", "About the video: ")
ENDINGS = ("?", "?", " in the video?", " in this video?", " here?", " now?")


def vary(question: str, rng: np.random.Generator) -> str:
    """A random variant of a trained question (its answer unchanged): some words swapped for others of the same
    meaning here, maybe an opener, maybe another ending; the question itself when the variant would be a held-out
    form."""
    words = question.split(" ")
    for i, word in enumerate(words):
        core = word.rstrip("?.,:")
        group = next((g for g in SWAPS if core.lower() in g), None)
        if group is not None and rng.random() < 0.5:
            new = group[int(rng.integers(len(group)))]
            words[i] = (new.capitalize() if core[:1].isupper() else new) + word[len(core):]
    text = " ".join(words)
    if text.endswith("?") and not re.search(r"\b(video|clip)\b", text) and rng.random() < 0.5:
        text = text[:-1] + ENDINGS[int(rng.integers(len(ENDINGS)))]
    opener = OPENERS[int(rng.integers(len(OPENERS)))]
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
