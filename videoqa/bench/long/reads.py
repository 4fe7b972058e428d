"""`videoqa bench long`, "reads the event": whether event answers come from the frames, by erasing the event.

Every event question (the brief object's colour or shape, the number of flashes, which shape came first) is
answered twice per frame count, unpruned: on the clip, and on the same clip rendered with its events erased
(`videoqa.synth.long.erased`; same moving shape, background and question). An answer *reads the event* when
it is right with the event and different without it. A question counts as "shown" at a frame count when the
sampled frames see every event (and, between two, a frame without one: `synth.long.shows`); only those can
be read, so reading and the counterfactual are reported over shown questions, and accuracy separately over
shown and hidden ones. Beside each accuracy, the blind baseline: answering each question type's most common
answer of the split. Direction (a question about the whole clip) is reported per frame count too.

Runs are resumable eval runs like the table's rows; the 8-frame and "max" rows are the table's own.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from ...eval.datasets import load_dataset
from ...eval.judges import normalize
from ...pruning import PruneConfig
from ..accuracy import exact_hits, split_rows
from .core import Row, read_scenes, resolve_frames
from .run import run_row

FRAME_COUNTS: tuple[int | str, ...] = (8, 16, 24, "max")


@dataclass
class ReadsRow:
    """Counts for one frame count (event questions unless named otherwise)."""

    frames: int | str
    shown: int = 0  # event questions whose sampled frames show the event
    right_shown: int = 0
    changed: int = 0  # shown, and a different answer when the event is erased
    reads: int = 0  # shown, right, and a different answer when the event is erased
    hidden: int = 0
    right_hidden: int = 0
    blind_shown: int = 0  # the most common answer of the type would be right
    blind_hidden: int = 0
    direction: tuple[int, int] = (0, 0)  # (right, questions)
    frames_used: tuple[int, int] = (0, 0)  # (least, most) frames asked at this count


def event_types() -> set[str]:
    from ...synth import long as synth_long

    return {t for types in synth_long.KIND_TYPES.values() for t in types}


def blind_answers(root: Path) -> dict[str, str]:
    """Each question type's most common answer on the split (ties: alphabetical, so it is reproducible)."""
    by_type: dict[str, Counter] = {}
    for a in split_rows(root, "test_a.json", "type", "answer"):
        by_type.setdefault(a["type"], Counter())[a["answer"]] += 1
    return {t: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for t, c in by_type.items()}


def shown_at(scene: dict, frames: int) -> bool:
    """Whether `frames` uniformly sampled frames of the clip in scenes.json show its events (synth.long.shows)."""
    from ...synth import long as synth_long

    idx = synth_long.sample_indices(scene["n_frames"], frames)
    events = scene["events"]
    if not all(any(e["start"] <= i < e["stop"] for i in idx) for e in events):
        return False
    return all(any(a["stop"] <= i < b["start"] for i in idx) for a, b in zip(events, events[1:], strict=False))


def tally(frames: int | str, preds: dict[str, dict], erased: dict[str, dict], hits: dict[str, bool],
          root: Path, blind: dict[str, str]) -> ReadsRow:
    """One row from the predictions on the clips (`preds`, all questions) and on the erased clips (`erased`,
    event questions), keyed by question id."""
    answers = {a["question_id"]: a for a in split_rows(root, "test_a.json", "type", "answer")}
    videos = {q["question_id"]: q["video_name"] for q in split_rows(root, "test_q.json", "video_name")}
    scenes = read_scenes(root)
    row = ReadsRow(frames)
    used = [rec["stats"]["frames"] for rec in preds.values() if not rec.get("error")]
    row.frames_used = (min(used), max(used)) if used else (0, 0)
    direction = [0, 0]
    for qid, rec in preds.items():
        a = answers[qid]
        if a["type"] == "direction":
            direction[0] += bool(hits.get(qid))
            direction[1] += 1
        if a["type"] not in event_types() or rec.get("error"):
            continue
        blind_right = normalize(blind[a["type"]]) == normalize(a["answer"])
        if shown_at(scenes[videos[qid]], rec["stats"]["frames"]):
            row.shown += 1
            row.right_shown += bool(hits.get(qid))
            row.blind_shown += blind_right
            other = erased.get(qid)
            changed = other is not None and not other.get("error") and (
                normalize(other["answer"]) != normalize(rec["answer"]))
            row.changed += changed
            row.reads += changed and bool(hits.get(qid))
        else:
            row.hidden += 1
            row.right_hidden += bool(hits.get(qid))
            row.blind_hidden += blind_right
    row.direction = (direction[0], direction[1])
    return row


def evaluate_reads(qa, root: Path, erased_root: Path, runs: Path, model: str, split: str,
                   counts: tuple[int | str, ...] = FRAME_COUNTS) -> list[ReadsRow]:
    """Run (or resume) each frame count on the clips and, for event questions, on the erased clips."""

    ds = load_dataset("msvd", root)
    ds_erased = load_dataset("msvd", erased_root)
    types = {a["question_id"]: a["type"] for a in split_rows(root, "test_a.json", "type")}
    ds_erased = replace(ds_erased, items=[it for it in ds_erased.items if types[it.question_id] in event_types()])
    blind = blind_answers(root)
    # uniform frames: "shown" is decided from the uniform sample (shown_at), whatever the model's card prefers
    def unpruned(f: int | str) -> Row:
        return Row(f"{f} frames, unpruned", PruneConfig(method="none"), f, sampler="uniform")

    ref = unpruned(8)
    done: dict[str, dict] = {}
    rows = []
    for f in counts:
        row = ref if f == 8 else unpruned(f)
        if ref.label not in done:
            done[ref.label] = run_row(qa, ds, runs / split, ref, model, split, {})
        frames = resolve_frames(row, [ref], done, qa.dims)
        preds = done[row.label] if row.label in done else run_row(qa, ds, runs / split, row, model, split, frames)
        done[row.label] = preds
        by_qid = {qid: rec["stats"]["frames"] for qid, rec in preds.items() if not rec.get("error")}
        frames_erased = {(str(it.video), it.question): by_qid[it.question_id] for it in ds_erased.present
                         if it.question_id in by_qid}
        erased = run_row(qa, ds_erased, runs / f"{split}-erased", row, model, f"{split}-erased", frames_erased)
        hits = exact_hits(root, runs / split / row.folder(model, split) / "predictions.jsonl")
        rows.append(tally(f, preds, erased, hits, root, blind))
    return rows


def _pct(k: int, n: int) -> str:
    return "–" if not n else f"{100 * k / n:.1f}"


def format_reads(rows: list[ReadsRow]) -> str:
    head = ["frames", "event shown (questions)", "right when shown %", "blind %", "changed when erased %",
            "reads the event %", "event hidden (questions)", "right when hidden %", "blind %", "direction %"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        label = str(r.frames) if r.frames != "max" else f"max ({r.frames_used[0]}–{r.frames_used[1]})"
        cells = [label, str(r.shown), _pct(r.right_shown, r.shown), _pct(r.blind_shown, r.shown),
                 _pct(r.changed, r.shown), _pct(r.reads, r.shown), str(r.hidden), _pct(r.right_hidden, r.hidden),
                 _pct(r.blind_hidden, r.hidden), _pct(*r.direction)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
