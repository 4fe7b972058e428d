"""What the page says about pruning: the line above the fold, each method's description (from its declaration),
the link to docs/pruning.md, and why R starts where it does."""

from __future__ import annotations

from pathlib import Path

from videoqa.pruning import REGISTRY

from .turns import file_url

PRUNING_DOC = Path(__file__).resolve().parents[1] / "docs" / "pruning.md"  # in a checkout; not in the wheel
WHAT_IT_SHOWS = ("A video model turns each frame into hundreds of **visual tokens** (one per image patch) and reads "
                 "them all before answering. **Token pruning** drops the ones a method judges least useful, so "
                 "answering costs less compute. Ask about a clip: under each answer, open its heatmaps to see "
                 "which tokens were kept; **Compare methods** answers with every method side by side.")


def pruning_link() -> str:
    """A link to docs/pruning.md when the page can serve it (a checkout), else where to find it."""
    if PRUNING_DOC.is_file():
        return f"<a href='{file_url(PRUNING_DOC)}' target='_blank'>docs/pruning.md</a>"
    return "docs/pruning.md in the repository"


def methods_html() -> str:
    """Every registered method's one-line description, from its declaration (a new method gets one)."""
    items = "".join(f"<li><b>{name}</b>: {REGISTRY.get(name).help}</li>" for name in REGISTRY.names())
    return (f"<details id='method-help'><summary>What each method does</summary><ul>{items}</ul>"
            f"<p>More: {pruning_link()}</p></details>")


def auto_r_note(qa) -> str:
    """Why the R box starts where it does, when "auto" would keep every token for this model."""
    if not keeps_everything(qa):
        return ""
    return (f"R starts at 0.5 here: with auto, {qa.name}'s policy keeps every visual token at its "
            f"{qa.policy.base_frames} base frames (its base R is {qa.policy.base_r:g}, measured best for it) and "
            "prunes only the frames a long clip adds. Type auto for the model's own choice.")


def keeps_everything(qa) -> bool:
    return qa.prune.r == "auto" and qa.policy.base_r == 0
