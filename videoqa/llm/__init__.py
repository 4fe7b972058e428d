"""The language model: prefill with FastV pruning and greedy decoding, over transformers' own decoder layers.

    state = llm.prefill(model, embeds, attention_mask, visual_mask, FastVPlan(k=2, r=0.5))
    for tokens in llm.decode_loop_for(model, "static").decode_n_tokens(state, 64, eos):
        ...

- adapter: where transformers keeps the LM's parts (layers, rotary embedding, norm, head, cache keyword),
  resolved once per model into a `LanguageModel`; the only module here that reads transformers internals.
- masks: attention masks in the form each kernel takes.
- prompt: the prefill (the prompt through the layers), FastV's ranking and slicing at layer K.
- decode: one greedy loop over the prefill's cache or a preallocated one, whose step `torch.compile` wraps.
"""

from .adapter import KERNELS, LanguageModel, adapt, check_kernel
from .decode import (
    BUCKET,
    DECODE_MODES,
    DecodeLoop,
    StaticKVCache,
    cache_bytes,
    decode_loop_for,
    decode_n_tokens,
    decode_one_token,
    eos_ids,
)
from .prefill import PrefillResult, prefill

__all__ = [
    "BUCKET", "DECODE_MODES", "KERNELS", "DecodeLoop", "LanguageModel", "PrefillResult", "StaticKVCache", "adapt",
    "cache_bytes", "check_kernel", "decode_n_tokens", "decode_one_token", "decode_loop_for", "eos_ids", "prefill",
]
