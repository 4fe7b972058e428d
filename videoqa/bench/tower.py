"""`videoqa bench tower`: the video tower's time with and without LanguageBind's temporal attention (the published
Video-LLaVA tower vs the -hf one), at Video-LLaVA-7B's tower shapes: CLIP ViT-L/14, 224 px, 8 frames, random
weights, run as the encode stage runs it (all hidden states kept, for the feature layer -2)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..measure import Timer, device_clock
from ..models.languagebind import add_temporal_attention


@dataclass(frozen=True)
class TowerRow:
    tower: str
    frames: int
    seconds: float
    params_m: float
    gflops: float
    cpu_seconds: float | None = None  # this process's CPU time (on a CPU device): steady on a shared machine


def tower_flops(config, frames: int, temporal: bool) -> float:
    """Multiply-adds x 2 of the encoder (patch embedding left out): per layer the spatial attention's projections
    and scores, the MLP, and with `temporal` the temporal attention's projections and its scores over frames."""
    d, inner = config.hidden_size, config.intermediate_size
    n = (config.image_size // config.patch_size) ** 2 + 1
    tokens = frames * n
    layer = 2 * tokens * (4 * d * d + 2 * d * inner) + 4 * frames * n * n * d
    if temporal:
        layer += 2 * tokens * 4 * d * d + 4 * n * frames * frames * d
    return config.num_hidden_layers * layer / 1e9


def tower_7b_config(attn: str = "sdpa"):
    """Video-LLaVA-7B's video tower config (VideoLlavaConfig's default vision_config: ViT-L/14, 224 px)."""
    from transformers import VideoLlavaConfig

    vision = VideoLlavaConfig().vision_config
    vision._attn_implementation = attn
    return vision


@torch.inference_mode()
def time_tower(tower: torch.nn.Module, pixels: torch.Tensor, repeats: int) -> tuple[float, float]:
    """Median (wall, process CPU) seconds of one tower forward, after a warm-up on one frame (first-call costs, at
    an eighth of a run: on a CPU one run of the 7B shapes is its own figure). Where other processes share the
    CPUs, wall time measures them too; the process's CPU time (torch's threads included) does not."""
    clock = device_clock(pixels.device)
    tower(pixels[:1], output_hidden_states=True)
    walls, cpus = [], []
    for _ in range(repeats):
        cpu0 = time.process_time()
        with Timer(clock) as t:
            tower(pixels, output_hidden_states=True)
        walls.append(t.seconds)
        cpus.append(time.process_time() - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def tower_rows(device: str = "cpu", dtype: torch.dtype = torch.float32, frames: int = 8, repeats: int = 1,
               config=None) -> list[TowerRow]:
    """The -hf tower, then the same tower with temporal attention added over the `frames` (one group)."""
    from transformers import CLIPVisionModel

    config = config or tower_7b_config()
    torch.manual_seed(0)
    with torch.device(device):
        tower = CLIPVisionModel(config).to(dtype).eval()
        pixels = torch.randn(frames, 3, config.image_size, config.image_size, dtype=dtype)
    rows = []
    for name in ("-hf (frames independent)", "published (temporal attention)"):
        if name.startswith("published"):
            add_temporal_attention(tower, frames)  # its weights as built: values do not change the time
        params = sum(p.numel() for p in tower.parameters()) / 1e6
        flops = tower_flops(config, frames, temporal=name.startswith("published"))
        wall, cpu = time_tower(tower, pixels, repeats)
        rows.append(TowerRow(name, frames, wall, params, flops, cpu if device == "cpu" else None))
    return rows


def format_tower_table(rows: list[TowerRow], where: str) -> str:
    base = rows[0].seconds
    lines = [f"{where}.", "",
             "| tower | frames | params (M) | GFLOPs | seconds | CPU seconds | vs -hf: time | vs -hf: CPU time "
             "| vs -hf: FLOPs |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cpu = ("–", "–") if r.cpu_seconds is None else (f"{r.cpu_seconds:.3f}",
                                                         f"{r.cpu_seconds / rows[0].cpu_seconds:.2f}x")
        lines.append(f"| {r.tower} | {r.frames} | {r.params_m:.0f} | {r.gflops:.0f} | {r.seconds:.3f} | {cpu[0]} | "
                     f"{r.seconds / base:.2f}x | {cpu[1]} | {r.gflops / rows[0].gflops:.2f}x |")
    return "\n".join(lines)


def run_tower(device: str = "cpu", dtype: str = "float32", repeats: int = 1) -> str:
    rows = tower_rows(device, getattr(torch, dtype), repeats=repeats)
    where = (f"Video-LLaVA-7B tower shapes, ViT-L/14 224 px, random weights, {device} {dtype}, "
             f"median of {repeats}")
    return "### Video tower: temporal attention's cost\n\n" + format_tower_table(rows, where)
