"""What the `llm` and `frames` suites time: the decoder presets and a `Setup`. No torch here, so the command
line can offer the presets without loading it."""

from __future__ import annotations

from dataclasses import dataclass

PRESETS = {
    "tiny": dict(hidden_size=64, intermediate_size=172, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=4, max_position_embeddings=4096, vocab_size=256),  # smoke tests
    "mid": dict(hidden_size=1024, intermediate_size=2752, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=16, max_position_embeddings=4096, vocab_size=1024),
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, max_position_embeddings=4096, vocab_size=32064),
}


@dataclass(frozen=True)
class Setup:
    """The decoder being timed: preset shape, frames in the prompt, where and how it runs."""

    preset: str = "mid"
    frames: int = 8
    device: str = "cpu"
    dtype: str = "float32"
    attn: str = "sdpa"
    seed: int = 0
