"""The chat's controls read as the library reads them: R, K (bounded by the model's layers), the Frames
control's maximum (the context budget), the frame sampler, and heatmap files written so a page never reads a
half-written one."""

from __future__ import annotations

import uuid
from pathlib import Path

from videoqa.errors import InputError
from videoqa.pruning import REGISTRY, Ratio
from videoqa.pruning import parse_r as parse_ratio
from videoqa.pruning.adaptive import max_frames_for_context
from videoqa.video.samplers import check_sampler


def parse_r(text: str | float | None) -> Ratio:
    """The R box: 'auto' (or empty) or a number in [0, 1) (the one parser of R, pruning.parse_r)."""
    return parse_ratio("" if text is None else text)


def k_range(n_layers: int) -> tuple[int, int]:
    """The K values a model with `n_layers` LLM layers accepts (the registry's K option bounds the low end)."""
    return int(REGISTRY.option("k").low), n_layers - 1


def parse_k(value, n_layers: int) -> int:
    """The K box: a whole number in `k_range`, or an InputError saying so (2.5 is refused, not rounded)."""
    low, high = k_range(n_layers)
    try:
        k = float(value)
    except (TypeError, ValueError):
        k = float("nan")
    if not (k.is_integer() and low <= k <= high):
        shown = f"{k:g}" if k == k else repr(value)
        raise InputError(f"K must be a whole number from {low} to {high} (the model has {n_layers} LLM layers), "
                         f"got {shown}")
    return int(k)


def parse_frames(value, most: int | None = None) -> int | None:
    """The Frames box: 0 or empty for the default, else a whole number from 1 to `most` (what fits the model's
    context); 2.7, -3 or 99 (of 58) are refused with a message, not rounded or clamped (the command line's
    --frames takes whole numbers only, and the API must not differ)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        n = float(value)
    except (TypeError, ValueError):
        n = float("nan")
    top = 1_000_000 if most is None else most
    if not (n.is_integer() and 0 <= n <= top):
        shown = f"{n:g}" if n == n else repr(value)
        limit = "" if most is None else f" up to {most} (what fits the model's context)"
        raise InputError(f"Frames must be a whole number from 0 (the default){limit}, got {shown}")
    return int(n) or None


SAMPLER_INFO = "uniform: evenly spaced · content: more frames where they differ, over a uniform floor"


def sampler_info(default: str) -> str:
    """The Frame sampler control's hint: what each does and why it starts where it does (the loaded model's own
    sampler: its card's, or `videoqa serve --sampler`)."""
    why = ("this model's choice: its frames land on brief events that evenly spaced frames can miss"
           if default == "content" else "this model's choice, Video-LLaVA's rule")
    return f"{SAMPLER_INFO}. Starts at {default}: {why}."


def parse_sampler(value: str | None, default: str) -> str:
    """The Frame sampler control: one of SAMPLERS; empty means `default` (the model's own). Anything else is
    an InputError naming it (the control accepts typed values, so the chat says what is wrong)."""
    if value is None or not str(value).strip():
        return default
    return check_sampler(value)


def gallery_files(images: list, out_dir: Path) -> list[tuple[str, str]]:
    """The heatmaps as PNG files in a folder of their own, each written under a temporary name and renamed
    into place. Gradio saves PIL images under a name made from their content, rewriting that file each
    time the same picture is shown again, possibly while a browser is reading it (a broken image); a file
    path it copies once, atomically, and never rewrites."""
    folder = out_dir / "heatmaps" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    files = []
    for i, (image, caption) in enumerate(images):
        path = folder / f"frame{i + 1:03d}.png"
        partial = folder / f".frame{i + 1:03d}.part.png"
        image.save(partial, format="png")
        partial.replace(path)
        files.append((str(path), caption))
    return files


def frames_that_fit(qa) -> int:
    """The Frames control's maximum: the most frames whose visual tokens fit the model's context beside the
    shortest question and the answer's room, all positions counted (the budget rule `prepare` and the CLI
    apply: pruning/budget.py)."""
    return max(1, max_frames_for_context(qa.dims, qa.text_tokens("?"), qa.policy))
