"""`videoqa batch --batch-size N`: padded batches give the same records as one question at a time."""

from __future__ import annotations

from helpers.clipgen import write_clip, write_text

from videoqa.batch.store import latest_by_key, read_records
from videoqa.cli import main


def test_batched_records_equal_unbatched(tmp_path, tiny_model_dir):
    clips = tmp_path / "clips"
    clips.mkdir()
    write_clip(clips / "a.mp4", n_frames=20)
    write_clip(clips / "b.avi", n_frames=9, size=(80, 60), fmt="avi-mpeg4")
    write_clip(clips / "c.mp4", n_frames=31, size=(48, 64))
    write_text(clips / "d.mp4")  # a bad clip inside a batch
    runs = {}
    for bs in (1, 3):
        out = tmp_path / f"bs{bs}.jsonl"
        argv = ["batch", str(clips), "--question", "What is it?", "--out", str(out), "--model", str(tiny_model_dir),
                "--r", "0.5", "--max-new-tokens", "5", "--batch-size", str(bs), "--no-progress"]
        assert main(argv) == 0
        runs[bs] = latest_by_key(read_records(out))
    assert runs[1].keys() == runs[3].keys() and len(runs[1]) == 4
    for key, one in runs[1].items():
        three = runs[3][key]
        assert (one["error"] is None) == (three["error"] is None)
        if one["error"] is None:
            assert one["answer"] == three["answer"]
            assert one["kept"]["kept"] == three["kept"]["kept"]
    assert sum(r["error"] is not None for r in runs[3].values()) == 1
