"""Running a batch: what is left to do, one record per item, and the summary line.

A back end is a function `produce(todo) -> records` (local, batched or Ray); the model call inside it is
one function `answer_fn(video, question) -> dict`. The bookkeeping here (resume, retries, error records,
counting) is therefore the same for every back end and for the tests.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .lock import exclusive
from .store import ResultsWriter, compact, latest_by_key, needs_compaction, prepare_out, read_records
from .worklist import WorkItem

AnswerFn = Callable[[str, str], dict]
Produce = Callable[[list[WorkItem]], Iterable[dict]]


@dataclass(frozen=True)
class BatchSummary:
    """What a run did, for its one summary line (and for `videoqa eval`'s results.json)."""

    out: str
    total: int  # work items asked for
    already_done: int  # answered in an earlier run and skipped
    skipped_errors: int  # failed in an earlier run and not retried (no --retry-errors)
    ran: int  # attempted in this run
    ok: int
    errors: int
    seconds: float  # from the first record asked for to the last one written
    startup_s: float = 0.0  # starting the back end: loading the model, or joining Ray
    phases: tuple[tuple[str, float], ...] = ()  # the back end's own account (Ray: connect, model load, processing)

    @property
    def clips_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (
            f"{self.ran} run ({self.ok} ok, {self.errors} errors) in {self.seconds:.1f}s "
            f"({self.clips_per_s:.2f} clips/s, {self._timing()}); "
            f"{self.already_done} already done, "
            f"{self.skipped_errors} earlier errors kept (retry with --retry-errors) -> {self.out}"
        )


    def _timing(self) -> str:
        if self.phases:
            return ", ".join(f"{name} {s:.1f}s" for name, s in self.phases)
        return f"back end start {self.startup_s:.1f}s"


def summarize_answer(answer: dict) -> dict:
    """The record fields of an `Answer.to_dict()`: text, warnings about the input, kept-token summary (with
    indices), decision, stats.

    Per-token scores are dropped: they are for heatmaps, and for a 7B model they are 2,056 floats a record.
    """
    rec = {"answer": answer["answer"], "warnings": answer.get("warnings", [])}
    if isinstance(answer.get("kept"), dict):
        rec["kept"] = {k: v for k, v in answer["kept"].items() if k != "scores"}
    for k in ("prune", "prompt", "decision", "flops", "stats"):
        if k in answer:
            rec[k] = answer[k]
    if isinstance(answer.get("video"), dict):  # which frames were sampled, not the whole probe
        rec["frames"] = {
            k: answer["video"][k] for k in ("indices", "timestamps", "backend", "sampler") if k in answer["video"]
        }
    return rec


def base_record(item: WorkItem) -> dict:
    return {"key": item.key, "id": item.id, "video": item.video, "question": item.question, **item.meta}


def error_record(item: WorkItem, exc: BaseException) -> dict:
    return {**base_record(item), "answer": None, "error": f"{type(exc).__name__}: {exc}"}


def answer_one(item: WorkItem, answer_fn: AnswerFn) -> dict:
    """Answer one item; any failure becomes an error record so the run goes on."""
    t0 = time.perf_counter()
    try:
        out = answer_fn(item.video, item.question)
    except Exception as e:  # a bad clip, a decoder failure, a question too long: record it and move on
        rec = error_record(item, e)
    else:
        rec = {**base_record(item), **out, "error": None}
    rec["seconds"] = round(time.perf_counter() - t0, 4)
    return rec


def plan(items: list[WorkItem], done: dict[str, dict], retry_errors: bool) -> tuple[list[WorkItem], int, int]:
    """(items still to run, how many finished earlier, how many earlier errors are kept as they are)."""
    todo, n_done, n_err = [], 0, 0
    for it in items:
        prev = done.get(it.key)
        if prev is None:
            todo.append(it)
        elif prev.get("error"):
            if retry_errors:
                todo.append(it)
            else:
                n_err += 1
        else:
            n_done += 1
    return todo, n_done, n_err


def run_batch(items: list[WorkItem], out: str | Path, produce: Produce, *, retry_errors: bool = False,
              progress: bool = True, wait: bool = False) -> BatchSummary:
    """Run `produce` over the items not yet in `out` and append its records as they arrive.

    `produce(todo)` yields one record per item, in any order (e.g. `local_records`, `ray_records`).
    The run holds `out`'s lock from reading what is done to writing the last record, so two runs never
    do the same item or write the same file; another run holding it raises BusyError (or, with `wait`,
    this run waits, then resumes from what that one wrote). The back end starts only once the lock is held.
    """
    out = Path(out)
    prepare_out(out)
    with exclusive(out, wait=wait):
        records = read_records(out)
        done = latest_by_key(records)
        todo, n_done, n_err = plan(items, done, retry_errors)
        retried = {it.key for it in todo if it.key in done}
        if needs_compaction(records, retried):
            compact(out, records, retried)
        ok = errors = 0
        t0 = time.perf_counter()
        startup, phases = 0.0, ()
        if todo:
            created = not out.exists()
            try:
                with ResultsWriter(out) as writer:  # opened first: an unwritable --out fails before the back end starts
                    produced = produce(todo)  # back ends start (load the model, join Ray) here, before the bar
                    startup = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    ok, errors = _write_all(produced, writer, len(todo), progress)
                    phases = tuple(getattr(produced, "phases", {}).items())
            except BaseException:
                if created and out.exists() and out.stat().st_size == 0:  # the back end never started: no trace
                    out.unlink()
                raise
    return BatchSummary(out=str(out), total=len(items), already_done=n_done, skipped_errors=n_err, ran=ok + errors,
                        ok=ok, errors=errors, seconds=time.perf_counter() - t0, startup_s=startup, phases=phases)


def _write_all(records: Iterable[dict], writer: ResultsWriter, total: int, progress: bool) -> tuple[int, int]:
    """Append every record as it arrives, under a progress bar; returns (ok, errors)."""
    from tqdm import tqdm

    ok = errors = 0
    bar = tqdm(total=total, unit="clip", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    try:
        for rec in records:
            writer.write(rec)
            if rec.get("error"):
                errors += 1
            else:
                ok += 1
            bar.set_postfix(errors=errors, refresh=False)
            bar.update(1)
    finally:
        bar.close()
    return ok, errors
