"""Batch and eval runs go clip by clip: each clip decoded and encoded once and its prefix reused by its questions,
with the records, resumability and answers of a run in the order given."""

from __future__ import annotations

from helpers.clipgen import write_clip

from videoqa.batch.local import local_backend
from videoqa.batch.run import run_batch
from videoqa.batch.store import latest_by_key, read_records
from videoqa.batch.worklist import WorkItem, by_clip
from videoqa.pipeline import VideoQA

QUESTIONS = ["What colour is the shape?", "What shape is moving?", "Which direction does it move?"]


def items(clips) -> list[WorkItem]:
    """Questions interleaved across clips, as an eval's question file may list them."""
    return [WorkItem(key=f"{c.stem}-{i}", video=str(c), question=q) for i, q in enumerate(QUESTIONS) for c in clips]


def test_by_clip_groups_each_clips_questions_in_first_seen_order():
    work = [WorkItem(key=k, video=v, question=k) for k, v in
            [("1", "b"), ("2", "a"), ("3", "b"), ("4", "c"), ("5", "a")]]
    assert [it.key for it in by_clip(work)] == ["1", "3", "2", "5", "4"]
    assert by_clip([]) == []


def test_a_local_run_goes_clip_by_clip_with_the_answers_of_asking_alone(tmp_path):
    clips = [write_clip(tmp_path / f"c{i}.mp4", n_frames=12 + 6 * i) for i in range(2)]
    work = items(clips)
    out = tmp_path / "results.jsonl"
    summary = run_batch(work, out, local_backend({"model": "demo", "prune": {"method": "vispruner", "r": 0.5},
                                                 "max_new_tokens": 4}), progress=False)
    assert summary.ok == len(work)
    records = read_records(out)
    assert [r["video"] for r in records] == [str(c) for c in clips for _ in QUESTIONS]  # written clip by clip
    # each clip's first question fills the prefix cache, the others reuse it
    assert [r["stats"]["prefix_cached"] for r in records] == [False, True, True] * 2
    qa = VideoQA.from_pretrained("demo", max_new_tokens=4, prefix_cache_bytes=0)
    from videoqa.pruning import PruneConfig

    alone = {it.key: qa.ask(it.video, it.question, prune=PruneConfig(method="vispruner", r=0.5)).text for it in work}
    assert {k: r["answer"] for k, r in latest_by_key(records).items()} == alone
    again = run_batch(work, out, local_backend({"model": "demo"}), progress=False)  # resumable: nothing left
    assert (again.already_done, again.ran) == (len(work), 0)


def test_prefix_cache_bytes_0_from_the_command_line_turns_the_cache_off_with_the_same_answers(tmp_path):
    """`--prefix-cache-bytes 0` reaches the pipeline (no question is served a kept prefix) and changes no answer; an
    eval run records it nowhere (resuming with the cache on or off is the same run)."""
    from videoqa.cli import build_parser
    from videoqa.cli.eval import NO_ANSWER_CHANGE
    from videoqa.cli.options import model_spec_from_args

    clips = [write_clip(tmp_path / f"c{i}.mp4", n_frames=12 + 6 * i) for i in range(2)]
    work = items(clips)
    common = ["eval", "--dataset", "msvd", "--root", str(tmp_path), "--prune", "vispruner", "--r", "0.5",
              "--max-new-tokens", "4"]
    answers = {}
    for extra in ([], ["--prefix-cache-bytes", "0"]):
        spec = model_spec_from_args(build_parser().parse_args(common + extra))
        assert spec.get("prefix_cache_bytes") == (0 if extra else None)
        out = tmp_path / f"results{len(extra)}.jsonl"
        assert run_batch(work, out, local_backend(spec), progress=False).ok == len(work)
        records = read_records(out)
        assert [r["stats"]["prefix_cached"] for r in records] == ([False] * 6 if extra else [False, True, True] * 2)
        answers[bool(extra)] = [r["answer"] for r in records]
    assert answers[True] == answers[False]
    assert "prefix_cache_bytes" in NO_ANSWER_CHANGE
