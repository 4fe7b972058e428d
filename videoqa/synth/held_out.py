"""The phrasings held out of every demo fine-tune, to measure how the demo models do on questions asked in words
they never trained on (scripts/measure_phrasings.py), and the check that keeps them out of training.

demo: fifteen a type (four written with the trained forms, three later, then sets D and E of four); demo-long:
twenty-one a type, sets A, B and C of three (A with the trained forms, B and C later) and sets D, E and F of four,
each written on 2026-12-04 before any run that could be shaped by it (docs/demo-models.md says when each was written and
first measured).
"""

from __future__ import annotations

import re
from functools import cache

UNKNOWN_HELD_OUT = [
    "What is behind the shape?",
    "How quickly does it move?",
    "Who is in the video?",
    "What happens after the clip ends?",
]

SHORT_HELD_OUT: dict[str, list[str]] = {
    "colour": [
        "Could you tell me the colour of the moving shape?",
        "What is the color of the object in this clip?",
        "Which colour is the {shape} in this video?",
        "What colour does the object have?",
        "What's the colour of the shape?",
        "Can you tell what colour the object is?",
        "The shape is what colour?",
        "Do you know the object's colour?",
        "What colour would you say the shape is?",
        "Which colour is the thing in the clip?",
        "The object's colour?",
        "What's the colour of the thing in the video?",
        "Tell me what colour the shape is.",
        "What would you call the colour of the object?",
        "What colour has the object in the clip got?",
    ],
    "shape": [
        "What sort of shape is moving in the clip?",
        "Which shape does the {colour} object have?",
        "Tell me what shape the object is.",
        "What shape can you see in this video?",
        "What's the object's shape?",
        "Can you tell what shape it is?",
        "Which of the shapes is it?",
        "Do you know which shape this is?",
        "What's the shape of the thing in the clip?",
        "Which shape can be seen here?",
        "What shape is the object, would you say?",
        "What type of shape is in the clip?",
        "Which shape is moving here?",
        "Tell me which shape you see.",
        "Is the object a circle, a square or a triangle?",
    ],
    "direction": [
        "Which way is the object heading?",
        "Where does the {colour} {shape} go?",
        "In which direction does the object travel in the clip?",
        "What direction does it go?",
        "Where is the shape headed?",
        "Can you tell which way the object moves?",
        "The shape goes which way?",
        "Do you know which way the shape goes?",
        "Towards which edge does the object move?",
        "What's the direction of the moving object?",
        "Can you say where the object is going?",
        "Where's the shape going?",
        "In what direction is the object moving?",
        "Which side does the object move to?",
        "Tell me the direction the shape moves in.",
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
    "unknown": UNKNOWN_HELD_OUT,
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
        "What colour is the thing moving across the screen?",
        "Do you know the moving object's color?",
        "How would you describe the colour of the moving shape?",
        "Moving object: which colour?",
        "What's the colour of the shape going across?",
        "Tell me what colour the moving thing is.",
        "Which colour is the object that's moving?",
        "In this video, what colour is the object that moves around?",
        "What colour would you call the figure that is moving?",
        "Could you name the colour of the object that is moving?",
        "What's the colour of whatever is moving in the clip?",
        "The object that travels through the video has which colour?",
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
        "What's the shape of the thing in motion?",
        "Do you know which shape is moving?",
        "Which shape can be seen moving?",
        "Moving shape: circle, square or triangle?",
        "Which shape is going across the screen?",
        "What type of shape is moving?",
        "What's the moving thing, a circle, a square or a triangle?",
        "In the clip, which shape is in motion?",
        "What is the shape of the figure that moves about?",
        "Could you name the shape that is moving?",
        "Is it a circle, a square or a triangle that moves across the clip?",
        "The object moving through the video, which shape is it?",
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
        "Do you know where the moving shape is heading?",
        "Which way is the moving object travelling?",
        "Can you say in which direction the shape moves?",
        "What's the moving object's direction?",
        "Where's the moving shape going?",
        "In what direction is the object moving?",
        "Which side does the moving object head to?",
        "Tell me the direction the moving shape takes.",
        "In which direction is the figure travelling?",
        "Could you say which direction the object is moving in?",
        "Toward which edge of the screen does the moving shape travel?",
        "The object that travels through the video goes in which direction?",
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
        "Do you know what colour the brief object was?",
        "What was the colour of the object seen only for a moment?",
        "Say what colour the momentary shape is.",
        "The briefly appearing object's colour?",
        "The shape that briefly shows up, what colour is it?",
        "What colour is the object that appears just for a moment?",
        "Which colour did the briefly visible object have?",
        "What colour was the shape that came and went?",
        "What colour is the shape that pops into view for an instant?",
        "Could you name the colour of the object that appears only briefly?",
        "There's a shape that appears for a second: what colour is it?",
        "Which colour was the quick shape that disappears again?",
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
        "What was the shape of the object seen only for a moment?",
        "Do you know which shape showed up briefly?",
        "Briefly, a shape appears: which one?",
        "Which shape made a brief appearance?",
        "The object that briefly shows up, what shape is it?",
        "What shape was the object that appeared just for a moment?",
        "Something appears briefly: what shape is it?",
        "Which shape is only there for a moment?",
        "What kind of shape flickers into view for a moment?",
        "Could you name the shape of the object that appears only briefly?",
        "There's a shape that appears for a second: which one is it?",
        "What shape was the quick object that disappears again?",
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
        "What is the number of flashes?",
        "Do you know how often the screen flashes?",
        "How many flashes were there in total?",
        "Number of flashes?",
        "How many flashes does the screen make?",
        "Count how many times the background flashes.",
        "How many times do you see a flash?",
        "What's the total number of flashes?",
        "How many times does the screen go bright?",
        "Could you count the flashes for me?",
        "How many flashes occur during the clip?",
        "Tell me the number of times the background flashes.",
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
        "Which one shows up earlier, the {a} or the {b}?",
        "Do you know which came first, the {a} or the {b}?",
        "Which was there first, the {a} or the {b}?",
        "The {a} or the {b}: which one appears first?",
        "Which shape came before the other, the {a} or the {b}?",
        "Which of the shapes, the {a} or the {b}, showed up first?",
        "Which showed up first: the {a} or the {b}?",
        "Which of the two came first, the {a} or the {b}?",
        "Which came on screen first, the {a} or the {b}?",
        "Could you say which was shown first, the {a} or the {b}?",
        "Out of the {a} and the {b}, which one was visible first?",
        "Which one turned up before the other, the {a} or the {b}?",
    ],
    "unknown": UNKNOWN_HELD_OUT,
}


# The sets each model's held-out forms were written in, in their order in each type's list (docs/demo-models.md
# says when): the earlier sets were looked at while recipes were chosen; each later one was written before any run
# that could be shaped by it.
SETS = {"demo": (("A", 4), ("B", 3), ("D", 4), ("E", 4)),
        "demo-long": (("A", 3), ("B", 3), ("C", 3), ("D", 4), ("E", 4), ("F", 4))}


def set_of(model: str, qtype: str, form: str) -> str:
    """The set ("A" … "F") a held-out form of `model` ("demo" or "demo-long") was written in. The types that only
    set A has (yes/no, how many, "unknown": not in the shipped recipes) have shorter lists, all of them set A."""
    listed = (SHORT_HELD_OUT if model == "demo" else LONG_HELD_OUT)[qtype]
    i = listed.index(form)
    if len(listed) < sum(size for _, size in SETS[model]):
        return SETS[model][0][0]
    for name, size in SETS[model]:
        if i < size:
            return name
        i -= size
    raise ValueError(f"{form!r} is past the sets of {model}'s {qtype} forms")


def forms() -> list[str]:
    """Every held-out form, both models'."""
    return [t for table in (SHORT_HELD_OUT, LONG_HELD_OUT) for ts in table.values() for t in ts]


def slotted(text: str) -> str:
    """`plain` with each blank ("{colour}", "{a}") as the word "slot", which the checks let match any one word."""
    return plain(re.sub(r"\{\w+\}", "slot", text))


@cache
def _held_out_patterns() -> tuple[re.Pattern, ...]:
    return tuple(re.compile(re.escape(slotted(t)).replace("slot", r"[a-z]+")) for t in forms())


def plain(text: str) -> str:
    """Lower-case words only, punctuation dropped: what the held-out checks compare."""
    return " ".join(re.findall(r"[a-z]+", text.lower().replace("'", "")))  # "what's" is one word


def held_out(question: str) -> bool:
    """Whether a question is one of the held-out forms (either model's, any words in the blanks), letter case and
    punctuation aside: what no fine-tune trains on."""
    words = plain(question)
    return any(p.fullmatch(words) for p in _held_out_patterns())
