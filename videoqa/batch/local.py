"""Local back ends: one model in this process, answering one item at a time or a left-padded batch at a time."""

from __future__ import annotations

import time
from collections.abc import Iterator

from .run import AnswerFn, Produce, answer_one, base_record, summarize_answer
from .worklist import WorkItem, by_clip


def local_backend(model_spec: dict, batch_size: int = 1) -> Produce:
    """The local back end for `model_spec` (see `VideoQA.from_spec`). The model is loaded when there is work,
    before the progress bar starts, so the bar's rate counts clips only. Work goes clip by clip (`by_clip`)."""

    def produce(todo: list[WorkItem]) -> Iterator[dict]:
        from ..pipeline import VideoQA

        todo = by_clip(todo)
        qa = VideoQA.from_spec(model_spec)
        if batch_size > 1:
            return batched_records(todo, qa, batch_size)
        return local_records(todo, qa_answer_fn(qa))

    return produce


def qa_answer_fn(qa) -> AnswerFn:
    """The local back end's model call: a loaded VideoQA, with the pruning it was loaded with."""

    def answer(video: str, question: str) -> dict:
        return summarize_answer(qa.ask(video, question).to_dict())

    return answer


def local_records(todo: list[WorkItem], answer_fn: AnswerFn) -> Iterator[dict]:
    """One record per item, in order; a failing item becomes an error record."""
    for it in todo:
        rec = answer_one(it, answer_fn)
        rec["backend"] = "local"
        yield rec


def batched_records(todo: list[WorkItem], qa, batch_size: int) -> Iterator[dict]:
    """Answer `batch_size` items per left-padded batch (`VideoQA.ask_batch`: every answer equals asking
    alone). A batch holding a bad item is answered item by item, so only that item becomes an error."""
    for start in range(0, len(todo), batch_size):
        chunk = todo[start : start + batch_size]
        t0 = time.perf_counter()
        try:
            answers = qa.ask_batch([(it.video, it.question) for it in chunk])
        except Exception:  # a bad clip or question: isolate it
            yield from local_records(chunk, qa_answer_fn(qa))
            continue
        seconds = round((time.perf_counter() - t0) / len(chunk), 4)
        for it, answer in zip(chunk, answers, strict=True):
            rec = {**base_record(it), **summarize_answer(answer.to_dict()), "error": None}
            yield {**rec, "seconds": seconds, "backend": "local"}
