"""LanguageBind's video tower, the one Video-LLaVA was published with: a CLIP ViT whose every encoder layer first
lets the frames meet (a learned temporal embedding, then self-attention over the frames at each token position,
[CLS] included, with its own layer norm and a residual), then runs the usual spatial attention and MLP.

transformers' `VideoLlavaModel` builds the tower as a plain `CLIPVisionModel`, and the `-hf` checkpoint dropped the
temporal weights. `add_temporal_attention` swaps the encoder layers of one tower instance for `TemporalEncoderLayer`
(no library class is patched), keeping the layers' own spatial modules, so every `-hf` weight name stays valid and
the temporal ones are added under LanguageBind's names without its `vision_model.` prefix:
`encoder.layers.N.{temporal_embedding, temporal_layer_norm1.*, temporal_attn.{q,k,v,out}_proj.*}`.

Frames, as published: the tower's batch is a run of clips of `num_frames` (8) frames each, one after the other.
A clip of another length goes through by `frame_mode`:
  "interpolate"  (default) the clip's frames attend to each other; the embedding is linearly resampled to their
                 count (at 8 frames: the published layer exactly).
  "groups"       consecutive groups of `num_frames`; a shorter last group takes the first positions of the
                 embedding, as the published code slices it.
The measurement behind the default: docs/demo-models.md ("Frame counts other than 8"). The tower's batch is one
clip, unless `clip_frames` says how many frames each clip has (follow_video_batches sets it for transformers'
batched videos).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F
from transformers.models.clip.modeling_clip import CLIPAttention, CLIPEncoderLayer

from ..errors import ModelLoadError

TEMPORAL_FILE = "temporal_attention.safetensors"  # beside model.safetensors in a converted folder
FRAME_MODES = ("groups", "interpolate")
DEFAULT_FRAME_MODE = "interpolate"  # measured: docs/demo-models.md
TEMPORAL_PARTS = ("temporal_embedding", "temporal_layer_norm1.weight", "temporal_layer_norm1.bias") + tuple(
    f"temporal_attn.{proj}_proj.{p}" for proj in ("k", "v", "q", "out") for p in ("weight", "bias"))


class TemporalEncoderLayer(CLIPEncoderLayer):
    """One LanguageBind encoder layer: temporal embedding + temporal attention, then CLIP's spatial layer.

    Built from a loaded CLIPEncoderLayer, whose spatial modules it takes over (no copy); the temporal parts are new
    and hold zeros until their weights are loaded."""

    def __init__(self, layer: CLIPEncoderLayer, num_frames: int, frame_mode: str = DEFAULT_FRAME_MODE):
        nn.Module.__init__(self)  # not CLIPEncoderLayer's: the spatial modules are the loaded layer's own
        if frame_mode not in FRAME_MODES:
            raise ValueError(f"frame_mode must be one of {FRAME_MODES}, got {frame_mode!r}")
        self.embed_dim = layer.embed_dim
        self.self_attn, self.layer_norm1 = layer.self_attn, layer.layer_norm1
        self.mlp, self.layer_norm2 = layer.mlp, layer.layer_norm2
        ref = layer.layer_norm1.weight
        config = layer.self_attn.config  # the tower's: its attention kernel (sdpa, eager) serves the frames too
        self.temporal_embedding = nn.Parameter(torch.zeros(1, num_frames, self.embed_dim, dtype=ref.dtype,
                                                           device=ref.device))
        self.temporal_layer_norm1 = nn.LayerNorm(self.embed_dim, eps=config.layer_norm_eps, dtype=ref.dtype,
                                                 device=ref.device)
        self.temporal_attn = CLIPAttention(config).to(device=ref.device, dtype=ref.dtype)
        self.num_frames = num_frames
        self.frame_mode = frame_mode
        self.clip_frames: int | None = None  # frames per clip in this call's batch; None: the batch is one clip
        # transformers records hidden_states with forward hooks on the layers; keep any already installed
        for hook in layer._forward_hooks.values():
            self.register_forward_hook(hook)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs) -> torch.Tensor:
        return super().forward(self.temporal_mix(hidden_states), attention_mask, **kwargs)

    def temporal_mix(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[F, N, D] frames' tokens -> the same after the temporal embedding and attention (the spatial
        attention's input; VisPruner's [CLS] attention is computed from it). The frames are one clip, or clips
        of `clip_frames` (transformers' batched videos, see follow_video_batches)."""
        clip = self.clip_frames or hidden_states.shape[0]
        if clip != hidden_states.shape[0]:
            return torch.cat([self._mix_clip(part) for part in hidden_states.split(clip)])
        return self._mix_clip(hidden_states)

    def _mix_clip(self, hidden_states: torch.Tensor) -> torch.Tensor:
        n_frames = hidden_states.shape[0]
        if self.frame_mode == "interpolate":
            return self._mix_group(hidden_states, self.embedding_for(n_frames))
        full = n_frames - n_frames % self.num_frames
        parts = []
        if full:  # every whole group at once: [G*T, N, D] -> [G, T, N, D]
            whole = hidden_states[:full].unflatten(0, (-1, self.num_frames))
            parts.append(self._mix_group(whole, self.temporal_embedding[0]).flatten(0, 1))
        if full < n_frames:
            parts.append(self._mix_group(hidden_states[full:], self.embedding_for(n_frames - full)))
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def embedding_for(self, n_frames: int) -> torch.Tensor:
        """[n_frames, D]: the published embedding for up to num_frames frames (its first positions in "groups"
        mode), resampled linearly over the clip in "interpolate" mode."""
        emb = self.temporal_embedding[0]
        if self.frame_mode == "groups" or n_frames == self.num_frames:
            if n_frames > self.num_frames:
                raise ValueError(f"a group has at most {self.num_frames} frames, got {n_frames}")
            return emb[:n_frames]
        if self.num_frames == 1:
            return emb.expand(n_frames, -1)
        resampled = F.interpolate(emb.T[None].float(), size=n_frames, mode="linear", align_corners=True)
        return resampled[0].T.to(emb.dtype)

    def _mix_group(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """x [..., T, N, D] (T frames of one clip) + emb [T, D]: attention over T at each of the N positions."""
        x = x + emb[:, None, :]
        seq = x.movedim(-3, -2)  # [..., N, T, D]: one sequence of T frames per token position
        lead = seq.shape[:-2]
        flat = seq.reshape(-1, *seq.shape[-2:])
        mixed, _ = self.temporal_attn(self.temporal_layer_norm1(flat))
        return x + mixed.reshape(*lead, *mixed.shape[-2:]).movedim(-2, -3)


def encoder_layers(tower: nn.Module) -> nn.ModuleList:
    """The tower's encoder layers (transformers 5's CLIPVisionModel, or its vision_model in older layouts)."""
    inner = getattr(tower, "vision_model", tower)
    return inner.encoder.layers


def add_temporal_attention(tower: nn.Module, num_frames: int, frame_mode: str = DEFAULT_FRAME_MODE) -> None:
    """Swap this tower's encoder layers (this instance only) for TemporalEncoderLayers; weights: load_temporal."""
    layers = encoder_layers(tower)
    for i, layer in enumerate(layers):
        if isinstance(layer, TemporalEncoderLayer):
            raise ValueError("the tower already has temporal attention")
        layers[i] = TemporalEncoderLayer(layer, num_frames, frame_mode)


def follow_video_batches(video_model: nn.Module) -> None:
    """transformers' VideoLlavaModel flattens a [B, F] batch of videos into one tower batch: hooks on this
    instance tell the temporal layers F for the call (and forget it after, whatever happens), so each video stays
    a clip of its own in "interpolate" mode too. A direct tower call (videoqa's encode stage) is one clip."""
    layers = encoder_layers(video_model.video_tower)

    def before(module, args, kwargs):
        videos = kwargs.get("pixel_values_videos")
        for layer in layers:
            layer.clip_frames = None if videos is None else int(videos.shape[1])

    def after(module, args, kwargs, output):
        for layer in layers:
            layer.clip_frames = None

    video_model.register_forward_pre_hook(before, with_kwargs=True)
    video_model.register_forward_hook(after, with_kwargs=True, always_call=True)


def add_temporal_tower(model: nn.Module, num_frames: int, frame_mode: str = DEFAULT_FRAME_MODE) -> None:
    """A VideoLlavaForConditionalGeneration instance gets the published tower (weights: load_temporal)."""
    add_temporal_attention(model.model.video_tower, num_frames, frame_mode)
    follow_video_batches(model.model)


def has_temporal_attention(tower: nn.Module | None) -> bool:
    try:
        return isinstance(encoder_layers(tower)[0], TemporalEncoderLayer)
    except (AttributeError, IndexError, TypeError):
        return False


def temporal_keys(n_layers: int, prefix: str = "encoder.layers.") -> list[str]:
    """The temporal weight names of a tower of n_layers (LanguageBind's, after `prefix`)."""
    return [f"{prefix}{i}.{part}" for i in range(n_layers) for part in TEMPORAL_PARTS]


def temporal_state_dict(tower: nn.Module) -> dict[str, torch.Tensor]:
    """Only the temporal weights, under `encoder.layers.N.temporal_*` (what TEMPORAL_FILE holds)."""
    out = {}
    for i, layer in enumerate(encoder_layers(tower)):
        for name, value in layer.state_dict().items():
            if name.startswith("temporal_"):
                out[f"encoder.layers.{i}.{name}"] = value
    return out


def load_temporal(tower: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """Load the temporal weights strictly: every one present, nothing else, shapes as the tower's."""
    layers = encoder_layers(tower)
    want = set(temporal_keys(len(layers)))
    missing, unused = sorted(want - set(state)), sorted(set(state) - want)
    if missing or unused:
        what = [f"{len(missing)} missing (e.g. {missing[0]})"] if missing else []
        what += [f"{len(unused)} unused (e.g. {unused[0]})"] if unused else []
        raise ModelLoadError(f"{where}: the temporal weights do not match the tower: {', '.join(what)}")
    for i, layer in enumerate(layers):
        own = {name: state[f"encoder.layers.{i}.{name}"] for name in TEMPORAL_PARTS}
        try:
            for part in ("temporal_layer_norm1", "temporal_attn"):
                getattr(layer, part).load_state_dict(
                    {k.removeprefix(part + "."): v for k, v in own.items() if k.startswith(part + ".")}, strict=True)
            if own["temporal_embedding"].shape != layer.temporal_embedding.shape:
                raise RuntimeError(f"temporal_embedding: {tuple(own['temporal_embedding'].shape)} in the file, "
                                   f"{tuple(layer.temporal_embedding.shape)} in the tower")
            with torch.no_grad():
                layer.temporal_embedding.copy_(own["temporal_embedding"])
        except RuntimeError as e:  # a shape that is not the config's
            raise ModelLoadError(f"{where}: layer {i}'s temporal weights do not fit the tower "
                                 f"({str(e).strip().splitlines()[-1].strip()})") from None


def attach_temporal_tower(model: nn.Module, path: str, name: str, local_only: bool = False,
                          frame_mode: str = DEFAULT_FRAME_MODE) -> bool:
    """A loaded VideoLlava whose config says `add_time_attn` (a `videoqa convert video-llava` folder) gets the
    temporal tower and its weights from TEMPORAL_FILE, strictly; True when it did. A temporal file without the
    config's word, or the word without the file, is refused."""
    vision = model.config.vision_config
    wanted = bool(getattr(vision, "add_time_attn", False))
    local = Path(path) / TEMPORAL_FILE if Path(path).is_dir() else None
    if local is not None and local.exists() and not wanted:
        raise ModelLoadError(f"cannot load model {name!r}: {local} is there but config.json's vision_config does not "
                             f"say add_time_attn: true; convert the folder again")
    if not wanted:
        return False
    if local is None:
        from huggingface_hub import hf_hub_download

        local = Path(hf_hub_download(path, TEMPORAL_FILE, local_files_only=local_only))
    if not local.is_file():
        raise ModelLoadError(f"cannot load model {name!r}: config.json says add_time_attn but {TEMPORAL_FILE} is "
                             f"not in {path}")
    from safetensors.torch import load_file

    add_temporal_tower(model, int(vision.num_frames), frame_mode)
    load_temporal(model.model.video_tower, load_file(str(local)), f"cannot load model {name!r}: {local}")
    return True
