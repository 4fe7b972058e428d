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


def test_two_stage_rows_count_both_stages():
    """PruneVid and DyCoke act before the LLM and at their scaled layer inside it: the row's kept count is what the
    stage inside left, its K that layer, and its FLOPs the per-layer formula (4nd² + 2n²d + 2ndm) with layers below
    K at the selection's count and the rest at the kept one."""
    from videoqa.bench.lm import build_lm, dims_of, llm_inputs
    from videoqa.pruning import PruneConfig

    setup = Setup(preset="tiny", frames=2)
    rows = method_rows(setup, [("prunevid", 0.5), ("dycoke", 0.5)], repeats=1, decode_tokens=2)
    model = build_lm(setup)
    dims = dims_of(model, model.dtype)
    n_text, n_vis, t = 60, 2 * 257, dims.n_layers
    d, m = dims.hidden, dims.ffn

    def layer(n: int) -> int:
        return 4 * n * d * d + 2 * n * n * d + 2 * n * d * m

    for row, name in zip(rows, ("prunevid", "dycoke"), strict=True):
        cfg = PruneConfig(name, r=0.5).validate(t)
        selected = llm_inputs(model, 2, cfg, 0.5)[2]
        k = cfg.options["vtp_layer" if name == "prunevid" else "dp_layer"]
        assert row["k"] == k and 0 < row["kept"] <= selected < n_vis, name
        if name == "dycoke":  # its stage inside acts while decoding: the prefill keeps the selection
            assert row["kept"] == selected
        flops = k * layer(n_text + selected) + (t - k) * layer(n_text + row["kept"])
        assert row["flops_ratio"] == pytest.approx(flops / (t * layer(n_text + n_vis))), name


@pytest.mark.slow
def test_bench_command_prints_tables(capsys):
    # --no-memory: the peak-memory column (a fresh process per registered method, ~3 minutes of CI) is tested
    # below on two methods; here the flag must leave it out.
    argv = ["bench", "llm", "frames", "--preset", "tiny", "--repeats", "1", "--decode-tokens", "1", "--no-memory"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"FastV K=2 R=0.5: measured prefill ratio [\d.]+ vs theoretical FLOPs ratio [\d.]+", out)
    assert "peak MB" not in out and "15 frames with FastV auto R" in out
    rows15 = [line for line in out.splitlines() if line.startswith("| 15 |")]
    assert len(rows15) == 5  # none, fastv 0.5, and auto for fastv, vispruner, random
    # decode: eager and static-cache steps, full cache vs FastV's (layers >= K hold 1028 of 2056 visual tokens)
    decode = out.split("Decode, preset tiny")[1].splitlines()
    assert "static ms/token" in decode[1] and "compiled" not in decode[1]
    assert decode[3].startswith("| 8 | none | - | 0.00 | 2116 |")
    assert decode[4].startswith("| 8 | fastv | 2 | 0.50 | 2116 / 1088 |")


@pytest.mark.slow
def test_peak_memory_column_is_measured_per_method_in_fresh_processes():
    import math

    from videoqa.bench.llm import format_llm_table
    from videoqa.bench.memory import measure_peaks

    setup, methods = Setup(preset="tiny", frames=8), [("none", 0.0), ("fastv", 0.5)]
    peaks = measure_peaks(setup, methods, k=2)
    assert set(peaks) == {"none", "fastv"} and all(math.isfinite(v) for v in peaks.values())
    table = format_llm_table(method_rows(setup, methods, repeats=1, decode_tokens=1), peaks).splitlines()
    assert table[0].endswith("| peak MB |")
    assert [line.rsplit("|", 2)[1].strip() for line in table[2:]] == [f"{peaks[m]:.0f}" for m, _ in methods]


def test_bench_video_times_every_path_and_checks_its_frames(capsys):
    """Every sampling path is timed at 8/32/64 frames and checked against decoding in order; the verdict names the
    default and whether it is the fastest correct path."""
    clip = SAMPLE_CLIPS[0]
    assert main(["bench", "video", "--videos", str(clip), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(clip.name + " ")][:9]  # then the scan table
    assert [(r[1], " ".join(r[2:-5])) for r in rows] == [
        (n, p) for n in ("8", "32", "64") for p in ("pyav seek", "pyav sequential", "decord")]
    assert all(r[-2] == "yes" and r[-1] == "0" for r in rows)  # same indices, same pixels as the in-order decode
    assert "Default (--backend auto): pyav seek" in out
    assert "Paths whose frames differ from the reference somewhere: none." in out


def test_pyav_seek_returns_the_frames_decoding_in_order_gives(tmp_path):
    """Seeking to keyframes gives exactly the frames a plain decode of every frame has at the uniform indices."""
    import av
    import numpy as np

    from videoqa.bench.video import write_bench_clip
    from videoqa.video.pyav import _sample_pyav

    path = write_bench_clip(tmp_path / "g.mp4", 120, (64, 48), "libx264", gop=10)
    with av.open(str(path)) as c:
        every = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    want = np.linspace(0, len(every) - 1, 8, dtype=int)
    clip = _sample_pyav(path, 8, allow_seek=True)
    assert clip.indices == want.tolist()
    assert np.array_equal(clip.frames, np.stack([every[i] for i in want]))


def test_bench_accuracy_names_the_model_and_measures_every_method(tmp_path, capsys):
    """The short table is published for both demo models: its title says which one it measured, and it has a row
    for every method (FastVID included), the unpruned one holding all of that model's visual tokens."""
    assert main(["bench", "accuracy", "--model", "demo-long", "--clips", "2", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Accuracy vs pruning: demo-long, " in out
    rows = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")} - {"method"}
    assert {"none", "fastv K=2", "vispruner", "random", "vispruner+pos", "random+pos", "fastvid", "fastvid+pos"} <= rows
    assert re.search(r"^\| none \| 0\.00 \| 136 / 136 \| 100\.0 \|", out, re.M)  # 8 frames x 17 tokens


@pytest.mark.slow
def test_bench_e2e_times_each_stage_and_keeps_the_answers():
    """The e2e suite's measurement on a small workload: the prefix cache changes no answer, every question after a
    clip's first reuses its prefix, the stages add up to the wall time, and the table says so."""
    from videoqa.bench.e2e import cache_bound, clip_questions, format_tables, measure
    from videoqa.model import load_model
    from videoqa.pipeline import VideoQA
    from videoqa.pruning import PruneConfig

    loaded = load_model("demo")
    work = [(SAMPLE_CLIPS[0], clip_questions("blue", "triangle")[:3]), (SAMPLE_CLIPS[1], ["What shape is moving?"])]
    results = {}
    for method in ("none", "vispruner"):
        for cached in (False, True):
            qa = VideoQA(loaded, max_new_tokens=4, prefix_cache_bytes=None if cached else 0)
            cfg = qa._config(PruneConfig(method=method, **({"r": 0.5} if method != "none" else {})), None)[0]
            results[method, cached] = r = measure(qa, work, cfg, batched=cached)
            assert r["n"] == 4 and r["hits"] == (2 if cached else 0)
            assert abs(sum(r["per_q"].values()) - r["wall_per_q"]) < 1e-6 or r["per_q"]["other"] == 0.0
        assert results[method, True]["answers"] == results[method, False]["answers"]
    table = format_tables(results, "test")
    row = r"^\| vispruner \| on \| [\d.]+ \| .* \| 2/4 \| [\d.]+x \| ([\d.]+)x \| [\d.]+ \| [\d.]+x \| yes \|$"
    assert re.search(row, table, re.M)
    # The cache's bound, recomputed from the prompts' own ids: the prefix runs to the last video token.
    off, on = results["vispruner", False], results["vispruner", True]
    qa = VideoQA(loaded, max_new_tokens=4)
    cfg = qa._config(PruneConfig(method="vispruner", r=0.5), None)[0]
    lengths = []
    for clip, questions in work:
        for q in questions:
            ids = qa.prepare(clip, q, None, cfg, None, 4).ids
            lengths.append((len(ids), int((ids == qa.visual_token_id).nonzero()[-1]) + 1))
    assert off["tokens"] == lengths
    prompt, prefix = (sum(x[i] for x in lengths) / 4 for i in (0, 1))
    floor = (sum(on["per_q"][s] for s in ("frames", "vision", "select", "decode"))
             + off["per_q"]["prefill"] / prompt * (prefix / 2 + prompt - prefix))  # 2 questions a clip here
    assert float(re.search(row, table, re.M).group(1)) == pytest.approx(off["wall_per_q"] / floor, abs=0.006)
    assert cache_bound({**off, "question_independent": False}, on) is None  # a method inside the LLM: no such bound
    flops = sum(a.flops.ratio for a in VideoQA(loaded, max_new_tokens=4).ask_batch(
        [(c, q) for c, qs in work for q in qs], prune=PruneConfig(method="vispruner", r=0.5))) / 4
    assert f"| vispruner | {100 * flops:.1f} | {1 / flops:.2f}x |" in table  # FLOPs % and the speed-up it promises
