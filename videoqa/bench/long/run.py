"""One row of `bench long` as a resumable eval run."""

from __future__ import annotations

from pathlib import Path

from ...batch.local import local_records
from ...batch.run import summarize_answer
from ...batch.store import latest_by_key, read_records
from ...eval.datasets import QADataset
from ...eval.judges import ExactJudge
from ...eval.run import run_eval
from .core import Row
from .rows import row_inputs


def run_row(qa, ds: QADataset, runs: Path, row: Row, model: str, split: str, frames: dict) -> dict[str, dict]:
    """Evaluate one row (resumable); its predictions by question id."""
    cfg = row.prune.validate(qa.dims.n_layers)
    qa.policy = row.policy or qa.model_policy.policy

    def answer(video: str, question: str) -> dict:
        n = row.frames if isinstance(row.frames, int) else frames.get((video, question))
        if n is None and row.frames != "auto":
            raise ValueError(f"no reference run gives this question's frames for {row.label!r}")
        shown, cfg_q, n, sampler = row_inputs(qa, row, cfg, video, question, n)
        return summarize_answer(qa.ask(shown, question, prune=cfg_q, frames=n, sampler=sampler).to_dict())

    out = runs / row.folder(model, split, qa.model_policy)
    run_eval(ds, out, lambda todo: local_records(todo, answer), ExactJudge(), row.config(model, split, qa.model_policy),
             progress=False)
    wanted = {it.question_id for it in ds.present}
    return {k: v for k, v in latest_by_key(read_records(out / "predictions.jsonl")).items() if k in wanted}
