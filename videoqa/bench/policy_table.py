"""The adaptive policy's decisions at Video-LLaVA-7B's shapes, as a printed table:
`python -m videoqa.bench.policy_table`."""

from __future__ import annotations

from ..models.video_llava import video_llava_7b_dims
from ..pruning.adaptive import AdaptivePolicy, GiB, decide
from ..pruning.base import ModelDims


def decision_table(dims: ModelDims, durations: list[float], free_gb: list[float], text_tokens: int = 64,
                   k: int = 2, policy: AdaptivePolicy | None = None) -> list[dict]:
    """Decisions for each clip length x free memory, as rows for a printed table."""
    rows = []
    for duration in durations:
        for gb in free_gb:
            d = decide(duration, dims, text_tokens, int(gb * GiB), k, policy=policy)
            rows.append({"duration_s": duration, "free_gib": gb, "frames": d.frames,
                         "visual": d.visual_tokens, "r": d.r, "kept": d.kept, "bound": d.bound,
                         "kv_gib": d.memory["kv_bytes"] / GiB, "kv_full_gib": d.memory["kv_bytes_full"] / GiB,
                         "warnings": len(d.warnings)})
    return rows


def main() -> None:
    """Print the decisions for 5 s / 30 s / 3 min clips under 80 / 24 / 8 GiB free (7B, bf16, K=2)."""
    dims = video_llava_7b_dims()
    print(f"Video-LLaVA-7B dims (bf16, K=2, 64 text tokens, context {dims.context})")
    print(f"policy: {AdaptivePolicy()}")
    print(f"{'clip':>6} {'free':>7} {'frames':>6} {'visual':>6} {'R':>6} {'kept':>5} {'bound':>8} "
          f"{'KV GiB':>7} {'KV unpruned':>11}")
    for row in decision_table(dims, [5, 30, 180], [80, 24, 8, 2, 1.25]):
        print(f"{row['duration_s']:>5g}s {row['free_gib']:>5g}GB {row['frames']:>6} {row['visual']:>6} "
              f"{row['r']:>6.3f} {row['kept']:>5} {row['bound']:>8} {row['kv_gib']:>7.2f} "
              f"{row['kv_full_gib']:>11.2f}")


if __name__ == "__main__":
    main()
