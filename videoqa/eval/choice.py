"""Multiple-choice questions: the item every benchmark loader yields, reading a letter out of a reply, and
accuracy with its blind baselines.

Scoring needs no judge: a reply is read into one option letter (`extract_choice`) and compared with the
reference letter. A reply that names no option is scored wrong and counted (`no_option`), as is a reference
that is no option (`bad_reference`, a defect of the data file).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .datasets import ByVideo

LETTERS = string.ascii_uppercase
BAD_REFERENCE = "?"  # the data file's answer is none of the options: scored wrong and counted

# The answer prefixes Video-MME's and LongVideoBench's reference parsers remove before looking for a letter.
ANSWER_PREFIXES = (
    "The best answer is", "The correct answer is", "The answer is", "The answer",
    "The best option is", "The correct option is", "Best answer:", "Best option:",
)


@dataclass
class MCItem:
    question_id: str
    video_name: str  # as the data file names it (for messages and the export)
    video: Path | None  # None: not found on disk
    question: str  # the question alone
    options: list[str]  # option texts, without their letters, in the file's order: A, B, C, ...
    answer: str | None  # reference letter; None: no published answer (EgoSchema full, LVB test); BAD_REFERENCE
    prompt: str  # the full text the model is asked (benchmark instruction, question, lettered options)
    categories: dict[str, str] = field(default_factory=dict)  # e.g. {"duration": "short", "task_type": ...}
    raw: dict = field(default_factory=dict)  # the row's own fields the official export needs


@dataclass
class MCDataset(ByVideo):
    name: str
    root: Path
    items: list[MCItem]  # selected (after --split / --limit), in file order
    n_questions: int  # questions in the files, before selection
    category_keys: tuple[str, ...]  # the benchmark's own breakdowns, in the order they are printed
    macro_key: str | None = None  # headline = mean over this key's categories (MLVU's M-Avg), else None



def lettered(options: list[str], style: str = "{L}. {text}") -> list[str]:
    """Options as a benchmark prints them: 'A. text' (Video-MME, LongVideoBench, NExT-QA) or '(A) text'."""
    return [style.format(L=LETTERS[i], text=o) for i, o in enumerate(options)]


def strip_letter(option: str, index: int) -> str:
    """'A. text' / '(A) text' / 'A) text' -> 'text' when the letter is this option's own; else unchanged."""
    m = re.match(rf"^\(?{LETTERS[index]}[.):]\s*(.*)$", option.strip(), re.S)
    return m.group(1).strip() if m else option.strip()


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def extract_choice(reply: str, options: list[str]) -> str | None:
    """The option letter a reply names, or None.

    The answer prefixes ("The best answer is", ...) are removed; a reply that is an option's text (bare, or
    after its letter) is that option; otherwise the first option letter standing alone ("A", "(A)", "A. ...",
    "B)"). A reply with neither is no answer, however long (Video-MME's parser says so for replies over 10
    words; shorter ones end the same way there, as it too then finds no letter). Letters beyond the options
    never count, and a letter inside a word ("Apple") is not one (Video-MME's parser takes the first capital
    A-D anywhere)."""
    letters = LETTERS[: len(options)]
    s = reply.strip()
    for prefix in ANSWER_PREFIXES:
        s = re.sub(re.escape(prefix), " ", s, flags=re.I)
    s = s.strip().strip(":").strip()
    norm = _norm(s)
    for letter, text in zip(letters, options, strict=True):
        if norm and norm == _norm(text):
            return letter
    found = re.search(rf"(?<![A-Za-z])([{letters}])(?![A-Za-z])", s) if letters else None
    return found.group(1) if found else None


# -- scoring ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """One question with a reference and a prediction."""

    item: MCItem
    pred: str | None  # the extracted letter; None: the reply named no option

    @property
    def correct(self) -> bool:
        return self.pred is not None and self.pred == self.item.answer


def _option_prior_credit(items: list[MCItem]) -> list[float]:
    """Per question, the expected credit of picking the option whose text is most often the right answer in the
    REST of the set (leave-one-out), ties split evenly: how far option wording alone goes, without the video."""
    right = Counter(_norm(it.options[LETTERS.index(it.answer)]) for it in items if _valid(it))
    credit = []
    for it in items:
        if not _valid(it):
            credit.append(0.0)
            continue
        own = _norm(it.options[LETTERS.index(it.answer)])
        counts = [right[_norm(o)] - (_norm(o) == own) for o in it.options]
        best = [i for i, c in enumerate(counts) if c == max(counts)]
        credit.append(1.0 / len(best) if LETTERS.index(it.answer) in best else 0.0)
    return credit


def _valid(it: MCItem) -> bool:
    return it.answer is not None and it.answer in LETTERS[: len(it.options)]


def _cell(scored: list[Scored], prior: dict[int, float]) -> dict:
    n = len(scored)
    letters = Counter(s.item.answer for s in scored)
    top = letters.most_common(1)[0] if letters else (None, 0)
    correct = sum(s.correct for s in scored)
    return {
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "no_option": sum(s.pred is None for s in scored),
        "most_common_letter": top[0],
        "letter_baseline": top[1] / n if n else None,
        "option_prior": sum(prior[id(s.item)] for s in scored) / n if n else None,
        "chance": sum(1 / len(s.item.options) for s in scored) / n if n else None,
    }


def score(scored: list[Scored], category_keys: tuple[str, ...], macro_key: str | None = None) -> dict:
    """Overall and per-category accuracy, each beside its blind baselines:

    - letter baseline: always answering the most common reference letter (overall: of the whole set; per
      category: of that category) - what a model with a letter bias and no video can reach;
    - option prior: picking the option whose text is most often right elsewhere in the set (leave-one-out);
    - chance: 1 / number of options.

    The overall `letter_baseline_per_category` answers each category's own most common letter."""
    prior = dict(zip((id(s.item) for s in scored), _option_prior_credit([s.item for s in scored]), strict=True))
    out = {"overall": _cell(scored, prior), "categories": {}}
    for key in category_keys:
        groups: dict[str, list[Scored]] = {}
        for s in scored:
            groups.setdefault(s.item.categories.get(key, "?"), []).append(s)
        out["categories"][key] = {value: _cell(group, prior) for value, group in sorted(groups.items())}
    if category_keys:
        first = out["categories"][category_keys[0]].values()
        n = out["overall"]["n"]
        out["overall"]["letter_baseline_per_category"] = (
            sum(c["letter_baseline"] * c["n"] for c in first) / n if n else None
        )
    if macro_key and out["categories"].get(macro_key):
        cells = [c for c in out["categories"][macro_key].values() if c["n"]]
        out["overall"]["macro_accuracy"] = sum(c["accuracy"] for c in cells) / len(cells)
    return out
