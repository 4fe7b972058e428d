"""The frame samplers, by name: the one list (a model card names its default from it, the command line and the web
chat offer it) and the one check."""

from __future__ import annotations

from videoqa.errors import InputError

SAMPLERS = ("uniform", "content")  # uniform: even spacing (clip.py); content: where the video changes (changes.py)


def check_sampler(name: str) -> str:
    """`name` if it is a sampler, else an InputError naming the choices."""
    if name not in SAMPLERS:
        raise InputError(f"unknown frame sampler {name!r}; choose {' or '.join(SAMPLERS)}")
    return name
