"""Accuracy on phrasings the demo models were never trained on, beside the trained forms, per question type.

    python -m scripts.measure_phrasings --model demo --clips 60
    python -m scripts.measure_phrasings --model demo-long --clips 40
    python -m scripts.measure_phrasings --model demo-long --form "count=How many times does the screen go bright?"

Each held-out clip (the test split: clips no training run saw) is asked every question type twice, once in a
trained phrasing (TEMPLATES) and once in a held-out one (HELD_OUT_TEMPLATES), each drawn at random, through the
pipeline as `videoqa ask` asks (unpruned; the short model at its 8 frames, demo-long at 24 uniform frames, where
every event of a clip is on a sampled frame). Exact match after lowercasing and stripping punctuation.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from videoqa.pipeline import VideoQA
from videoqa.pruning import PruneConfig
from videoqa.synth import held_out
from videoqa.synth import long as synth_long
from videoqa.synth import short as synth


def _one_each(templates: dict[str, list[str]], every: bool) -> list[dict[str, list[str]]]:
    """The tables to ask a clip from: `templates` itself (one form drawn a type), or with `every` one table per
    form, so that every form of every type is asked once."""
    if not every:
        return [templates]
    return [{t: [forms[i % len(forms)]] for t, forms in templates.items()}
            for i in range(max(map(len, templates.values())))]


def asked(model: str, n: int, folder: Path, seed: int = 0, extra: bool = False, skip: int = 0,
          every: bool = False, forms: dict[str, list[str]] | None = None
          ) -> tuple[list[tuple[Path, str, str, str, str, str | None]], int | None]:
    """(clip, question, answer, type, "trained" | "held-out", form) for `n` held-out clips after the first `skip`,
    and the frames to ask at; the eval splits' question types, and with `extra` the EXTRA_TYPES too. A type is
    asked once a clip in a form drawn at random (form None), or with `every` once in each of its forms. `forms`
    (type -> phrasings) asks those in place of the held-out forms, and only their types."""
    long = model == "demo-long"
    trained, held = (synth_long.TEMPLATES, synth_long.HELD_OUT_TEMPLATES) if long else \
        (synth.TEMPLATES, synth.HELD_OUT_TEMPLATES)
    if forms:
        trained, held = {t: trained[t] for t in forms}, forms
    pairs = (("trained", trained), ("held-out", held))
    base = synth_long.TEMPLATES if long else synth.TEMPLATES  # a table without a type asked gets the trained forms
    types = synth.ALL_TYPES if extra else synth.QUESTION_TYPES
    out = []
    for scene in (synth_long.test_scenes if long else synth.test_scenes)(n + skip, seed)[skip:]:
        render = synth_long.render(scene) if long else synth.render(scene)
        path = synth.write_mp4(render, folder / f"{scene.name}.mp4", **({"fps": scene.fps} if long else {}))
        for kind, templates in pairs:
            seen = set()
            for table in _one_each(templates, every):
                rng = np.random.default_rng([seed, 95, int(scene.name.split("_")[-1])])
                got = synth_long.questions(scene, rng, extra, base | table) if long else \
                    synth.questions(scene, rng, types, base | table)
                for q, a, t in got:
                    if t not in table:
                        continue
                    form = table[t][0] if every else None  # with `every`, a table holds one form a type
                    if (t, form) not in seen:  # a type with fewer forms than another repeats none
                        seen.add((t, form))
                        out.append((path, q, a, t, kind, form))
    return out, 24 if long else None


def by_set(kind: str, by_form: dict[tuple[str, str], list[bool]],
           trained: dict[str, float]) -> list[tuple[str, str, int, float, float]]:
    """(type, held-out set, questions, held-out %, held-out as % of trained) for each type and set
    (held_out.SETS), from each held-out form's hits."""
    pooled: dict[tuple[str, str], list[bool]] = {}
    for (t, template), got in by_form.items():
        pooled.setdefault((t, held_out.set_of(kind, t, template)), []).extend(got)
    rows = []
    for (t, name), got in sorted(pooled.items()):
        acc = 100 * float(np.mean(got))
        rows.append((t, name, len(got), acc, 100 * acc / trained[t] if trained[t] else float("nan")))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="demo", help="demo, demo-long or a model folder of either kind")
    p.add_argument("--clips", type=int, default=60)
    p.add_argument("--long", action="store_true", help="the model is a demo-long kind (implied by demo-long)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--skip", type=int, default=0,
                   help="leave out the first N held-out clips: a set of clips that no earlier measure saw")
    p.add_argument("--extra-types", action="store_true",
                   help="also the questions the clips cannot answer (yes/no, how many, unknown)")
    p.add_argument("--every-form", action="store_true",
                   help="ask each clip every form of each type (not one drawn at random), and print each held-out "
                        "form's accuracy and each held-out set's (held_out.SETS)")
    p.add_argument("--form", action="append", default=[], metavar="TYPE=QUESTION",
                   help="ask this phrasing of a question type in place of the held-out forms, beside the type's "
                        "trained forms (repeatable; {a} / {b} for order's two shapes): how well the model reads "
                        "a question put your way")
    args = p.parse_args(argv)
    kind = "demo-long" if args.long or args.model == "demo-long" else "demo"
    forms = _forms(p, args.form, kind)
    qa = VideoQA.from_pretrained(args.model, max_new_tokens=8)
    hits: dict[tuple[str, str], list[bool]] = {}
    wrong: dict[tuple[str, str], list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        items, frames = asked(kind, args.clips, Path(tmp), extra=args.extra_types, skip=args.skip,
                              every=args.every_form or bool(forms), forms=forms)
        by_form: dict[tuple[str, str], list[bool]] = {}
        for b in range(0, len(items), args.batch):
            chunk = items[b : b + args.batch]
            answers = qa.ask_batch([(v, q) for v, q, *_ in chunk], prune=PruneConfig(method="none"), frames=frames,
                                   sampler="uniform")
            for (_, q, a, t, form, template), ans in zip(chunk, answers, strict=True):
                got = ans.text.strip().lower().strip(".!?,;: ")
                hits.setdefault((t, form), []).append(got == a)
                if form == "held-out" and template:
                    by_form.setdefault((t, template), []).append(got == a)
                if got != a:
                    wrong.setdefault((t, form), []).append(f"{q!r} -> {got!r} (want {a})")
    types = list(dict.fromkeys(t for t, _ in hits))
    after = f" after the first {args.skip}" if args.skip else ""
    how = "in every trained phrasing and each --form" if forms else \
        "in every trained and every held-out phrasing" if args.every_form else \
        "once in a trained and once in a held-out phrasing"
    print(f"Phrasings: {args.model}, {args.clips} held-out clips{after}, each type asked {how} "
          f"(unpruned{', 24 uniform frames' if frames else ''}):")
    mine = "your" if forms else "held-out"
    print(f"| type | n | trained forms % | {mine} forms % | {mine} / trained |")
    print("|---|---|---|---|---|")
    trained = {t: 100 * float(np.mean(hits[(t, "trained")])) for t in types}
    for t in types:
        tr, ho = np.mean(hits[(t, "trained")]), np.mean(hits[(t, "held-out")])
        print(f"| {t} | {len(hits[(t, 'trained')])} | {100 * tr:.1f} | {100 * ho:.1f} | "
              f"{100 * ho / tr if tr else float('nan'):.1f} % |")
    if args.every_form or forms:
        print(f"| type | {mine} form | n | % |")
        print("|---|---|---|---|")
        for (t, template), got in by_form.items():
            print(f"| {t} | {template} | {len(got)} | {100 * np.mean(got):.1f} |")
    if args.every_form and not forms:
        print("| type | held-out set | n | held-out % | held-out / trained |")
        print("|---|---|---|---|---|")
        for t, name, n, acc, ratio in by_set(kind, by_form, trained):
            print(f"| {t} | {name} | {n} | {acc:.1f} | {ratio:.1f} % |")
    for key, lines in wrong.items():
        print(f"  wrong {key[0]} ({key[1]}), first of {len(lines)}: " + "; ".join(lines[:3]))
    return 0


def _forms(p: argparse.ArgumentParser, given: list[str], kind: str) -> dict[str, list[str]]:
    """--form TYPE=QUESTION values by type; a bad one ends the run with the parser's one-line error."""
    types = synth_long.QUESTION_TYPES if kind == "demo-long" else synth.QUESTION_TYPES
    out: dict[str, list[str]] = {}
    for value in given:
        qtype, sep, question = value.partition("=")
        qtype, question = qtype.strip(), question.strip()
        if not sep or not question:
            p.error(f"--form {value!r}: give TYPE=QUESTION, e.g. --form 'colour=Which colour is it?'")
        if qtype not in types:
            p.error(f"--form {value!r}: {kind} is asked {', '.join(types)}, not {qtype!r}")
        if qtype == "order" and not ("{a}" in question and "{b}" in question):
            p.error(f"--form {value!r}: an order question names its two shapes as {{a}} and {{b}}")
        out.setdefault(qtype, []).append(question)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
