"""`videoqa bench` runs end to end (on a tiny decoder) and its figures are consistent with each other."""

from __future__ import annotations

import re

import pytest
from conftest import SAMPLE_CLIPS

from videoqa.bench.llm import Setup, method_rows
from videoqa.cli import main
from videoqa.pruning import keep_count


def test_method_rows_are_consistent():
    rows = method_rows(Setup(preset="tiny", frames=2), [("none", 0.0), ("fastv", 0.5), ("random", 0.75)],
                       repeats=1, decode_tokens=2)
    none, fastv, rand = rows
    assert none["time_ratio"] == 1.0 and none["flops_ratio"] == 1.0
    assert fastv["kept"] == keep_count(2 * 257, 0.5) and rand["kept"] == keep_count(2 * 257, 0.75)
    # The pruned caches hold fewer tokens: layers >= K (FastV) or all layers (before-LLM pruning).
    assert rand["cache_mb"] < fastv["cache_mb"] < none["cache_mb"]
    assert 0 < rand["flops_ratio"] < fastv["flops_ratio"] < 1


@pytest.mark.slow
def test_bench_command_prints_tables(capsys):
    assert main(["bench", "llm", "frames", "--preset", "tiny", "--repeats", "1", "--decode-tokens", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"FastV K=2 R=0.5: measured prefill ratio [\d.]+ vs theoretical FLOPs ratio [\d.]+", out)
    assert "peak MB" in out and "15 frames with FastV auto R" in out
    rows15 = [line for line in out.splitlines() if line.startswith("| 15 |")]
    assert len(rows15) == 5  # none, fastv 0.5, and auto for fastv, vispruner, random
    # decode: eager and static-cache steps, full cache vs FastV's (layers >= K hold 1028 of 2056 visual tokens)
    decode = out.split("Decode, preset tiny")[1].splitlines()
    assert "static ms/token" in decode[1] and "compiled" not in decode[1]
    assert decode[3].startswith("| 8 | none | - | 0.00 | 2116 |")
    assert decode[4].startswith("| 8 | fastv | 2 | 0.50 | 2116 / 1088 |")


def test_bench_video_times_both_backends_on_the_given_clips(capsys):
    clip = SAMPLE_CLIPS[0]
    assert main(["bench", "video", "--videos", str(clip), "--repeats", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(clip.name)]
    assert [r[1] for r in rows] == ["pyav", "decord"]
    assert all(r[7] == "yes" for r in rows)  # both sample the same frame indices


def test_bench_accuracy_names_the_model_and_measures_every_method(tmp_path, capsys):
    """The short table is published for both demo models: its title says which one it measured, and it has a row
    for every method (FastVID included), the unpruned one holding all of that model's visual tokens."""
    assert main(["bench", "accuracy", "--model", "demo-long", "--clips", "2", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Accuracy vs pruning: demo-long, " in out
    rows = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")} - {"method"}
    assert {"none", "fastv K=2", "vispruner", "random", "vispruner+pos", "random+pos", "fastvid", "fastvid+pos"} <= rows
    assert re.search(r"^\| none \| 0\.00 \| 136 / 136 \| 100\.0 \|", out, re.M)  # 8 frames x 17 tokens
