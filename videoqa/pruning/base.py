"""The vocabulary shared by every pruning method: model dimensions, the visual layout, what was kept."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class ModelDims:
    """Language-model and vision-tower sizes, read from a checkpoint's config by its family (`Family.dims`)."""

    n_layers: int  # T
    hidden: int  # d
    ffn: int  # m
    n_heads: int
    n_kv_heads: int
    head_dim: int
    context: int  # max_position_embeddings
    tokens_per_frame: int  # visual tokens a frame gives the LLM (Video-LLaVA: (image_size / patch)^2 + its CLS)
    grid: int  # patches per side
    dtype_bytes: int = 2

    @classmethod
    def from_text_config(cls, t, grid: int, dtype_bytes: int = 2, cls_token: bool = True) -> ModelDims:
        """A decoder config (LlamaConfig, Qwen2Config, ...) with frames of grid x grid patches (+ a CLS)."""
        return cls(
            n_layers=t.num_hidden_layers,
            hidden=t.hidden_size,
            ffn=t.intermediate_size,
            n_heads=t.num_attention_heads,
            n_kv_heads=getattr(t, "num_key_value_heads", None) or t.num_attention_heads,
            head_dim=getattr(t, "head_dim", None) or t.hidden_size // t.num_attention_heads,
            context=t.max_position_embeddings,
            tokens_per_frame=grid * grid + int(cls_token),
            grid=grid,
            dtype_bytes=dtype_bytes,
        )


@dataclass(frozen=True)
class VisualLayout:
    """How the visual span is laid out: frames of (1 CLS + grid*grid patches), or images of grid*grid. A frame
    may be a group of several frames sharing its tokens (Qwen-VL: two) and its grid may be grid rows x cols."""

    n_frames: int
    grid: int
    has_cls: bool = True
    cols: int | None = None  # None: square, grid x grid
    frames_per_token: int = 1  # source frames behind one frame of tokens (Qwen-VL's temporal patch: 2)
    summary: int = 0  # tokens after all frames' (LLaVA-OneVision's newline): no cell, never pruned before the LLM

    @property
    def n_cols(self) -> int:
        return self.cols or self.grid

    @property
    def tokens_per_frame(self) -> int:
        return self.grid * self.n_cols + int(self.has_cls)

    @property
    def n_tokens(self) -> int:
        return self.n_frames * self.tokens_per_frame + self.summary

    def frames_only(self) -> VisualLayout:
        """The layout without its summary tokens: what a before-the-LLM method chooses among."""
        return replace(self, summary=0) if self.summary else self

    def locate(self, i: int) -> tuple[int, int, int]:
        """Visual-span index -> (frame, row, col); row = col = -1 for a frame's CLS token, and frame = -1 too
        for a summary token."""
        if i >= self.n_frames * self.tokens_per_frame:
            return -1, -1, -1
        frame, j = divmod(i, self.tokens_per_frame)
        if self.has_cls:
            if j == 0:
                return frame, -1, -1
            j -= 1
        return frame, j // self.n_cols, j % self.n_cols


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
        """Kept count per frame (CLS included; summary tokens are in no frame)."""
        counts = [0] * self.layout.n_frames
        for i in self.kept:
            if (f := self.layout.locate(i)[0]) >= 0:
                counts[f] += 1
        return counts

    def frame_masks(self) -> list[dict]:
        """Per frame: the kept (row, col) patches, whether the CLS token was kept, and the dropped patches
        merged into a kept token ("merged", empty for methods that do not merge)."""
        frames = [{"cls_kept": False, "patches": [], "merged": []} for _ in range(self.layout.n_frames)]
        for i in self.kept:
            f, row, col = self.layout.locate(i)
            if f < 0:
                continue  # a summary token belongs to no frame
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
