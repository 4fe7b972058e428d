"""The phrasings held out of every demo fine-tune, to measure how the demo models do on questions asked in words
they never trained on (scripts/measure_phrasings.py), and the check that keeps them out of training.

demo: seven a type (four written with the trained forms, three later); demo-long: nine a type in three sets of three
(A with the trained forms, B and C later; docs/demo-models.md says when each was written and first measured).
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
    "unknown": UNKNOWN_HELD_OUT,
}


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
