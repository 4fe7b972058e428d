"""`--engine ray` on a local Ray (2 CPUs): the same records as the local engine, written by the driver."""

from __future__ import annotations

import pytest
from clipgen import write_clip, write_text

from videoqa.batch.local import local_records, qa_answer_fn
from videoqa.batch.ray_engine import RayOptions, ray_records
from videoqa.batch.run import run_batch
from videoqa.batch.store import latest_by_key, read_records
from videoqa.batch.worklist import collect_work

ray = pytest.importorskip("ray")

QUESTION = "What is shown?"


def test_ray_engine_matches_local_engine(tmp_path):
    import torch

    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig
    from videoqa.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "model")
    clips = tmp_path / "clips"
    clips.mkdir()
    write_clip(clips / "a.mp4", n_frames=12)
    write_clip(clips / "b.avi", n_frames=20, fmt="avi-mpeg4")
    write_clip(clips / "c.gif", n_frames=9, fmt="gif")
    write_text(clips / "d_broken.mp4")
    items = collect_work([clips], [QUESTION])
    prune = PruneConfig("fastv", k=2, r=0.5)
    kwargs = {"model": str(model), "device": "cpu", "dtype": None, "attn_implementation": "sdpa",
              "prune": {**prune.__dict__}, "frames": None, "max_new_tokens": 6}

    # Ray actors run torch on one thread; so does the local reference, for bit-identical arithmetic.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        qa = VideoQA.from_pretrained(str(model), device="cpu", prune=prune, max_new_tokens=6)
        local = run_batch(items, tmp_path / "local.jsonl", lambda todo: local_records(todo, qa_answer_fn(qa)),
                          progress=False)
    finally:
        torch.set_num_threads(threads)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tmp_path / "ray.jsonl"
        summary = run_batch(items, out, lambda todo: ray_records(todo, kwargs, RayOptions(actors=1, timeout_s=60)),
                            progress=False)
        # Resuming a finished Ray run starts nothing.
        again = run_batch(items, out, lambda todo: pytest.fail("nothing should run"), progress=False)
    finally:
        ray.shutdown()
    print(f"local: {local.line()}\nray:   {summary.line()}")

    assert (summary.ran, summary.ok, summary.errors) == (4, 3, 1) == (local.ran, local.ok, local.errors)
    assert (again.ran, again.already_done, again.skipped_errors) == (0, 3, 1)
    got = read_records(out)
    assert len(got) == len({r["key"] for r in got}) == 4
    want, got = latest_by_key(read_records(tmp_path / "local.jsonl")), latest_by_key(got)
    assert set(got) == set(want) == {it.key for it in items}
    for key, w in want.items():
        g = got[key]
        assert g["engine"] == "ray" and w["engine"] == "local"
        assert g["answer"] == w["answer"], key
        assert g["error"] == w["error"], key
        if w["error"] is None:
            assert g["kept"] == w["kept"]  # the same kept token indices, per frame counts, layout
            assert g["frames"]["indices"] == w["frames"]["indices"]
            assert g["kept"]["n_kept"] == 8 * 65 // 2
        else:
            assert "d_broken.mp4" in key and "not a video" in g["error"]
