"""`videoqa bench`: what pruning buys, measured, next to what the FLOPs formula promises.

Suites (all ratios come from one run; these machines are noisy, so compare rows, not runs):
- llm: LLM prefill time and peak memory, none vs FastV vs VisPruner vs random, on a random-weight
  decoder of the chosen shape; measured time ratio next to the theoretical FLOPs ratio; the share of
  prefill spent ranking; decode time per token on the pruned vs full cache; cache bytes.
- frames: prefill time for 8/12/15 frames with no pruning, fixed R=0.5 and adaptive R.
- video: frame-sampling backends (PyAV, decord) on real clips.
- accuracy: the demo model on its held-out split for every method and R (samples/README, issue 5).

Presets: `mid` (d=1024, 8 layers, fp32: runs on a laptop CPU) and `7b` (Video-LLaVA-7B's language
model shapes, random weights; use on a GPU with --dtype bfloat16).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import torch

from . import engine
from .pruning import ModelDims, PruneConfig, keep_count
from .pruning.flops import estimate_flops

PRESETS = {
    "tiny": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=4, max_position_embeddings=4096, vocab_size=256),  # smoke tests
    "mid": dict(hidden_size=1024, intermediate_size=2752, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=16, max_position_embeddings=4096, vocab_size=1024),
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, max_position_embeddings=4096, vocab_size=32064),
}
TOKENS_PER_FRAME = 257  # Video-LLaVA: 16x16 patches + the frame's CLS
TEXT_BEFORE, TEXT_AFTER = 35, 25  # "USER: " + system prefix before the video, the question after it


@dataclass
class Setup:
    preset: str = "mid"
    frames: int = 8
    device: str = "cpu"
    dtype: str = "float32"
    attn: str = "sdpa"
    seed: int = 0


def build_lm(setup: Setup):
    """A random-weight causal LM of the preset's shape (Llama, the Video-LLaVA-7B decoder family)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**PRESETS[setup.preset], attn_implementation=setup.attn)
    torch.manual_seed(setup.seed)
    dtype = getattr(torch, setup.dtype)
    with torch.device(setup.device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    return model


def dims_of(model, dtype: torch.dtype) -> ModelDims:
    return ModelDims.from_text_config(model.config, grid=16, dtype_bytes=torch.finfo(dtype).bits // 8)


def make_prompt(model, frames: int, n_keep: int | None = None, seed: int = 0):
    """Embeddings of [text | frames*257 visual | text]; with n_keep, only that many visual tokens."""
    g = torch.Generator().manual_seed(seed)
    n_vis = frames * TOKENS_PER_FRAME if n_keep is None else n_keep
    n = TEXT_BEFORE + n_vis + TEXT_AFTER
    p = next(model.parameters())
    embeds = (torch.randn(1, n, model.config.hidden_size, generator=g) * 0.02).to(p.device, p.dtype)
    vis = torch.zeros(1, n, dtype=torch.bool, device=p.device)
    vis[0, TEXT_BEFORE:TEXT_BEFORE + n_vis] = True
    return embeds, torch.ones(1, n, dtype=torch.long, device=p.device), vis


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_prefill(model, inputs, plan, device: str, repeats: int) -> tuple[float, float, object]:
    """Best-of-`repeats` prefill seconds, its ranking seconds, and the last state."""
    best, rank, state = float("inf"), 0.0, None
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        state = engine.prefill(model, *inputs, plan)
        _sync(device)
        dt = time.perf_counter() - t0
        if dt < best:
            best, rank = dt, state.t_rank
    return best, rank, state


def time_decode(model, state, n_tokens: int, device: str) -> float:
    """Seconds per decoded token on `state`'s cache (greedy, fixed token count)."""
    embed = model.get_input_embeddings()
    token = embed(torch.zeros(1, 1, dtype=torch.long, device=state.logits.device))
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(n_tokens):
        engine.decode_one_token(model, state, token)
    _sync(device)
    return (time.perf_counter() - t0) / n_tokens


def method_rows(setup: Setup, methods: list[tuple[str, float | str]], repeats: int, decode_tokens: int,
                k: int = 2) -> list[dict]:
    """Time every (method, R) on one model in one process, interleaved so machine noise hits all alike."""
    from .pruning.adaptive import decide, free_memory_bytes

    model = build_lm(setup)
    dtype = getattr(torch, setup.dtype)
    dims = dims_of(model, dtype)
    n_vis = setup.frames * TOKENS_PER_FRAME
    n_text = TEXT_BEFORE + TEXT_AFTER
    rows = []
    for method, r in methods:
        decision = None
        if r == "auto":
            decision = decide(None, dims, n_text + 64, free_memory_bytes(setup.device),
                              k=k if method == "fastv" else 0, frames=setup.frames)
            r = decision.r
        kept = n_vis if method == "none" else keep_count(n_vis, r)
        layer = {"none": None, "fastv": k}.get(method, 0)
        if method == "fastv":
            inputs, plan = make_prompt(model, setup.frames), engine.FastVPlan(k=k, r=r)
        else:  # before-LLM methods: the LLM simply sees `kept` visual tokens from layer 0
            inputs, plan = make_prompt(model, setup.frames, n_keep=kept), None
        t_select = _selection_seconds(method, setup.frames, kept, setup.seed)
        engine.prefill(model, *inputs, plan)  # warm-up
        t, t_rank, state = time_prefill(model, inputs, plan, setup.device, repeats)
        t_dec = time_decode(model, state, decode_tokens, setup.device)
        flops = estimate_flops(dims, n_text, n_vis, kept, layer)
        rows.append(dict(frames=setup.frames, method=method, k=layer, r=round(r, 3), kept=kept,
                         auto=decision is not None, prefill_s=t + t_select, rank_s=t_rank + t_select,
                         decode_ms=1000 * t_dec, cache_mb=engine.cache_bytes(state.cache) / 2**20,
                         flops_ratio=flops.ratio))
    base = next((row["prefill_s"] for row in rows if row["method"] == "none"), None)
    for row in rows:
        row["time_ratio"] = row["prefill_s"] / base if base else float("nan")
    return rows


def _selection_seconds(method: str, frames: int, kept: int, seed: int) -> float:
    """Cost of choosing tokens before the LLM (VisPruner's similarity passes, random's draw)."""
    n_vis = frames * TOKENS_PER_FRAME
    t0 = time.perf_counter()
    if method == "random":
        from .pruning.random import select_random

        select_random(n_vis, kept, seed)
    elif method == "vispruner":
        from .pruning.base import VisualLayout
        from .pruning.vispruner import select_vispruner

        g = torch.Generator().manual_seed(seed)
        attn = torch.rand(frames, TOKENS_PER_FRAME, generator=g).softmax(-1)
        feats = torch.randn(frames, TOKENS_PER_FRAME, 1024, generator=g)
        select_vispruner(attn, feats, kept, PruneConfig().important_ratio, VisualLayout(frames, 16))
    else:
        return 0.0
    return time.perf_counter() - t0


def peak_memory_worker(setup: Setup, method: str, r: float, k: int) -> dict:
    """Runs in a fresh process: peak memory of one prefill above the weights and inputs."""
    model = build_lm(setup)
    n_vis = setup.frames * TOKENS_PER_FRAME
    if method == "fastv":
        inputs, plan = make_prompt(model, setup.frames), engine.FastVPlan(k=k, r=r)
    else:
        n_keep = None if method == "none" else keep_count(n_vis, r)
        inputs, plan = make_prompt(model, setup.frames, n_keep=n_keep), None
    if setup.device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        engine.prefill(model, *inputs, plan)
        peak = torch.cuda.max_memory_allocated() - base
    else:
        # The process high-water mark (ru_maxrss) is set by building the model, so sample the resident
        # size while the prefill runs instead.
        base = _rss_bytes()
        samples, stop = [base], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(_rss_bytes())
                time.sleep(0.001)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        engine.prefill(model, *inputs, plan)
        stop.set()
        thread.join()
        peak = max(samples) - base
    return {"method": method, "peak_mb": peak / 2**20}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def measure_peaks(setup: Setup, methods: list[tuple[str, float]], k: int) -> dict[str, float]:
    """One fresh process per method, so each high-water mark is its own."""
    peaks = {}
    for method, r in methods:
        cmd = [sys.executable, "-m", "videoqa.bench", "--peak-worker",
               json.dumps(dict(setup=setup.__dict__, method=method, r=r, k=k))]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        peaks[method] = json.loads(out)["peak_mb"]
    return peaks


def format_llm_table(rows: list[dict], peaks: dict[str, float] | None = None) -> str:
    head = ("| frames | method | K | R | kept visual | prefill s | time ratio | FLOPs ratio | time/FLOPs "
            "| ranking % | decode ms/token | KV cache MB |" + (" peak MB |" if peaks else ""))
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        rank_pct = 100 * r["rank_s"] / r["prefill_s"] if r["prefill_s"] else 0.0
        k = "-" if r["k"] is None else r["k"]
        line = (f"| {r['frames']} | {r['method']}{' (auto)' if r['auto'] else ''} | {k} "
                f"| {r['r']:.2f} | {r['kept']} | {r['prefill_s']:.3f} | {r['time_ratio']:.3f} "
                f"| {r['flops_ratio']:.3f} | {r['time_ratio'] / r['flops_ratio']:.2f} | {rank_pct:.2f} "
                f"| {r['decode_ms']:.1f} | {r['cache_mb']:.1f} |")
        if peaks:
            line += f" {peaks.get(r['method'], float('nan')):.0f} |" if not r["auto"] else " |"
        lines.append(line)
    return "\n".join(lines)


def run_llm(args) -> str:
    setup = Setup(args.preset, 8, args.device, args.dtype, args.attn)
    methods = [("none", 0.0), ("fastv", 0.5), ("vispruner", 0.5), ("random", 0.5)]
    rows = method_rows(setup, methods, args.repeats, args.decode_tokens, k=args.k)
    peaks = None if args.no_memory else measure_peaks(setup, methods, args.k)
    fastv = next(r for r in rows if r["method"] == "fastv")
    table = format_llm_table(rows, peaks)
    return (f"LLM prefill, preset {args.preset} ({setup.dtype}, {setup.device}, {setup.attn}), 8 frames = "
            f"{8 * TOKENS_PER_FRAME} visual + {TEXT_BEFORE + TEXT_AFTER} text tokens, best of {args.repeats}:\n"
            f"{table}\n"
            f"FastV K={args.k} R=0.5: measured prefill ratio {fastv['time_ratio']:.3f} vs theoretical FLOPs "
            f"ratio {fastv['flops_ratio']:.3f} (x{fastv['time_ratio'] / fastv['flops_ratio']:.2f}); ranking "
            f"{100 * fastv['rank_s'] / fastv['prefill_s']:.2f}% of prefill")


def run_frames(args) -> str:
    rows = []
    for frames in (8, 12, 15):
        setup = Setup(args.preset, frames, args.device, args.dtype, args.attn)
        methods = [("none", 0.0), ("fastv", 0.5), ("fastv", "auto"), ("vispruner", "auto"), ("random", "auto")]
        rows += method_rows(setup, methods, args.repeats, 1, k=args.k)
    base8 = next(r["prefill_s"] for r in rows if r["frames"] == 8 and r["method"] == "none")
    auto15 = next(r["prefill_s"] for r in rows if r["frames"] == 15 and r["method"] == "fastv" and r["auto"])
    return (f"Prefill vs frames, preset {args.preset} (time ratio is against the same frame count unpruned):\n"
            f"{format_llm_table(rows)}\n"
            f"15 frames with FastV auto R: {auto15:.3f} s vs unpruned 8 frames {base8:.3f} s "
            f"(ratio {auto15 / base8:.2f})")


def run_video(args) -> str:
    import tempfile
    from pathlib import Path

    from .video_bench import benchmark_backends, default_paths, format_table

    with tempfile.TemporaryDirectory(prefix="videoqa-bench-") as tmp:
        rows = benchmark_backends(default_paths(Path(tmp)), num_frames=8, repeats=args.repeats)
    return "Frame sampling backends (8 frames vs decoding every frame):\n" + format_table(rows)


SUITES = {"llm": run_llm, "frames": run_frames, "video": run_video}


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: prefill/decode with and without pruning, frames, decoders",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("suites", nargs="*", default=["llm", "frames"], choices=[*SUITES, "accuracy"],
                   help="which tables (default: llm frames)")
    p.add_argument("--preset", default="mid", choices=list(PRESETS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "flash_attention_2", "eager"])
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--decode-tokens", type=int, default=16)
    p.add_argument("--no-memory", action="store_true", help="skip the per-method peak-memory processes")
    p.add_argument("--out", help="also write the tables to this markdown file")
    g = p.add_argument_group("accuracy suite")
    g.add_argument("--model", default="demo", help="model evaluated by the accuracy suite (default: demo)")
    g.add_argument("--clips", type=int, default=100, help="held-out clips (3 questions each)")
    g.add_argument("--runs-dir", default="runs/accuracy", help="run folders (resumable) and the plot")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    outputs = []
    for suite in args.suites:
        if suite == "accuracy":
            from .eval.accuracy import run_accuracy_bench

            text = run_accuracy_bench(args)
        else:
            text = SUITES[suite](args)
        print(text + "\n", flush=True)
        outputs.append(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n\n".join(outputs) + "\n")
    return 0


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--peak-worker":
    spec = json.loads(sys.argv[2])
    print(json.dumps(peak_memory_worker(Setup(**spec["setup"]), spec["method"], spec["r"], spec["k"])))
