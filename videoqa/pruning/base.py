"""The vocabulary shared by every pruning method: model dimensions, the user's choice, what was kept."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from ..errors import InputError

METHODS = ("none", "fastv", "vispruner", "random", "fastvid")
# The PruneConfig fields each method reads; the others do not change its answers.
FIELDS_USED = {
    "none": (),
    "fastv": ("k", "r", "rank_by", "frame_floor"),
    "vispruner": ("r", "important_ratio", "keep_positions"),
    "random": ("r", "seed", "keep_positions"),
    "fastvid": ("r", "context_share", "keep_positions"),
}


@dataclass(frozen=True)
class ModelDims:
    """Language-model and vision-tower sizes, read from a checkpoint's config (never hard-coded)."""

    n_layers: int  # T
    hidden: int  # d
    ffn: int  # m
    n_heads: int
    n_kv_heads: int
    head_dim: int
    context: int  # max_position_embeddings
    tokens_per_frame: int  # (image_size / patch)^2 + 1 (the frame's CLS is kept for video)
    grid: int  # patches per side
    dtype_bytes: int = 2

    @classmethod
    def from_config(cls, config, dtype_bytes: int = 2) -> ModelDims:
        """`config` is a VideoLlavaConfig (or anything with .text_config and .vision_config)."""
        v = config.vision_config
        return cls.from_text_config(config.text_config, v.image_size // v.patch_size, dtype_bytes)

    @classmethod
    def from_text_config(cls, t, grid: int, dtype_bytes: int = 2) -> ModelDims:
        """A decoder config (LlamaConfig, Qwen2Config, ...) with frames of grid x grid patches + CLS."""
        return cls(
            n_layers=t.num_hidden_layers,
            hidden=t.hidden_size,
            ffn=t.intermediate_size,
            n_heads=t.num_attention_heads,
            n_kv_heads=getattr(t, "num_key_value_heads", None) or t.num_attention_heads,
            head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
            context=t.max_position_embeddings,
            tokens_per_frame=grid * grid + 1,
            grid=grid,
            dtype_bytes=dtype_bytes,
        )


@dataclass(frozen=True)
class PruneConfig:
    """What the user asked for; immutable (`dataclasses.replace` makes a changed copy, `validate` a checked one).

    `r` is the fraction of visual tokens to drop, or "auto" (adaptive policy).

    `k` is the LLM layer at which FastV prunes (layers >= k see only kept tokens); methods that prune
    before the LLM (vispruner, random, fastvid) ignore it. `rank_by` selects FastV's ranking query: "last" (the
    last prompt token, as the official code) or "text" (mean over text tokens after the visual span).
    """

    method: str = "fastv"
    k: int = 2
    r: float | str = "auto"
    rank_by: str = "last"
    seed: int = 0
    important_ratio: float = 0.5  # VisPruner: share of the budget given to [CLS]-important tokens
    context_share: float = 0.4  # FastVID: share of each segment's budget chosen by density (the rest by attention)
    # Before-LLM methods: give each kept token its original RoPE position (gaps, as FastV and the official
    # FastVID code do) instead of contiguous positions (the official VisPruner code). None: the method's
    # own rule, original positions for fastvid only; `validate` resolves it.
    keep_positions: bool | None = None
    # FastV: this share of the kept tokens is spread evenly over the frames (each frame's best) before the
    # rest go to the best scores anywhere; 0 = FastV's plain global top-k.
    frame_floor: float = 0.0

    def validate(self, n_layers: int | None = None) -> PruneConfig:
        """A checked copy with a numeric `r` (or "auto"); raises InputError naming the first bad field.

        `n_layers` (the language model's depth) also bounds FastV's K."""
        if self.method not in METHODS:
            raise InputError(f"unknown pruning method {self.method!r}; choose one of {', '.join(METHODS)}")
        r = self.r if self.r == "auto" else _ratio(self.r)
        if self.method == "fastv":
            if not isinstance(self.k, int) or self.k < 1:
                raise InputError(f"K must be an integer >= 1 for FastV (K=0 is pruning before the LLM: "
                                 f"use --prune random or vispruner), got {self.k}")
            if n_layers is not None and self.k >= n_layers:
                raise InputError(f"K={self.k} is out of range: the language model has {n_layers} layers, "
                                 f"so K must be in [1, {n_layers - 1}]")
        if self.rank_by not in ("last", "text"):
            raise InputError(f"rank_by must be 'last' or 'text', got {self.rank_by!r}")
        if not isinstance(self.frame_floor, (int, float)) or not 0.0 <= self.frame_floor <= 1.0:
            raise InputError(f"the frame floor must be a share in [0, 1], got {self.frame_floor!r}")
        if self.frame_floor and self.method != "fastv":
            raise InputError(f"the frame floor is part of FastV's ranking; {self.method} does not use it")
        if not 0.0 <= self.important_ratio <= 1.0:
            raise InputError(f"important_ratio must be in [0, 1], got {self.important_ratio}")
        if not 0.0 <= self.context_share <= 1.0:
            raise InputError(f"context_share must be in [0, 1], got {self.context_share}")
        return replace(self, r=r, keep_positions=self.original_positions)

    def for_method(self, method: str) -> PruneConfig:
        """This configuration with another method (e.g. picked in the web chat). `keep_positions` carries over
        only where it was chosen against this method's own rule; otherwise the new method's own rule applies
        (a validated fastv default says False, which must not renumber a fastvid picked later)."""
        chosen = self.keep_positions is not None and self.keep_positions != replace(
            self, keep_positions=None).original_positions
        return replace(self, method=method, keep_positions=self.keep_positions if chosen else None)

    @property
    def original_positions(self) -> bool:
        """Whether tokens kept before the LLM keep their unpruned RoPE positions."""
        return self.method == "fastvid" if self.keep_positions is None else bool(self.keep_positions)

    @property
    def layer(self) -> int | None:
        """Where pruning happens: None (never), 0 (before the LLM) or K."""
        return {"none": None, "fastv": self.k}.get(self.method, 0)


def _ratio(value) -> float:
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise InputError(f"R must be a number in [0, 1) or 'auto', got {value!r}") from None
    if not 0.0 <= r < 1.0:
        raise InputError(f"R must be in [0, 1) (the fraction of visual tokens dropped), got {r}")
    return r


def keep_count(n_visual: int, r: float) -> int:
    """FastV's rule: keep round(n_vis * (1 - R)) visual tokens (at least one when there are any)."""
    if n_visual == 0:
        return 0
    return max(1, min(n_visual, round(n_visual * (1.0 - r))))


@dataclass(frozen=True)
class VisualLayout:
    """How the visual span is laid out: frames of (1 CLS + grid*grid patches), or images of grid*grid."""

    n_frames: int
    grid: int
    has_cls: bool = True

    @property
    def tokens_per_frame(self) -> int:
        return self.grid * self.grid + int(self.has_cls)

    @property
    def n_tokens(self) -> int:
        return self.n_frames * self.tokens_per_frame

    def locate(self, i: int) -> tuple[int, int, int]:
        """Visual-span index -> (frame, row, col); row = col = -1 for a frame's CLS token."""
        frame, j = divmod(i, self.tokens_per_frame)
        if self.has_cls:
            if j == 0:
                return frame, -1, -1
            j -= 1
        return frame, j // self.grid, j % self.grid


@dataclass
class KeptTokens:
    """What a pruning method kept, for one sample. Indices are into the visual span (0..n_visual-1).

    `offset` is where the visual span starts in the prompt, so `offset + i` is the sequence index.
    `scores` (optional) is the ranking score of every visual token, for heatmaps.
    `absorbed` (methods that merge, i.e. FastVID) lists, per kept token in `kept` order, the visual tokens
    averaged into it; a dropped token may be merged into several kept ones, and a kept one into another.
    """

    method: str
    layer: int | None
    n_visual: int
    kept: list[int]
    layout: VisualLayout
    offset: int = 0
    r: float = 0.0
    scores: list[float] | None = None
    details: dict = field(default_factory=dict)
    absorbed: list[list[int]] | None = None

    @property
    def n_kept(self) -> int:
        return len(self.kept)

    def merged_dropped(self) -> list[int]:
        """Sorted dropped tokens whose features live on, merged into a kept token."""
        kept = set(self.kept)
        return sorted({i for group in self.absorbed or [] for i in group} - kept)

    def per_frame(self) -> list[int]:
        """Kept count per frame (CLS included)."""
        counts = [0] * self.layout.n_frames
        for i in self.kept:
            counts[self.layout.locate(i)[0]] += 1
        return counts

    def frame_masks(self) -> list[dict]:
        """Per frame: the kept (row, col) patches, whether the CLS token was kept, and the dropped patches
        merged into a kept token ("merged", empty for methods that do not merge)."""
        frames = [{"cls_kept": False, "patches": [], "merged": []} for _ in range(self.layout.n_frames)]
        for i in self.kept:
            f, row, col = self.layout.locate(i)
            if row < 0:
                frames[f]["cls_kept"] = True
            else:
                frames[f]["patches"].append((row, col))
        for i in self.merged_dropped():
            f, row, col = self.layout.locate(i)
            if row >= 0:
                frames[f]["merged"].append((row, col))
        return frames

    def to_dict(self, with_indices: bool = True) -> dict:
        d = {
            "method": self.method,
            "layer": self.layer,
            "r": self.r,
            "n_visual": self.n_visual,
            "n_kept": self.n_kept,
            "offset": self.offset,
            "per_frame": self.per_frame(),
            "layout": asdict(self.layout),
            "details": self.details,
        }
        if self.absorbed is not None:
            d["n_merged_dropped"] = len(self.merged_dropped())
        if with_indices:
            d["kept"] = list(self.kept)
            if self.absorbed is not None:  # only the kept tokens that absorbed something
                d["absorbed"] = {str(i): group for i, group in zip(self.kept, self.absorbed, strict=True) if group}
        return d
