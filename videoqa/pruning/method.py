"""What a pruning method declares: its options, where it acts, its positions rule and how it selects.

A method is one small module (videoqa/pruning/methods/) holding one `Method`; registering it
(`registry.REGISTRY.register`) is the only edit that makes it appear in the command line, the web chat,
batch record keys and the benchmarks. docs/add-a-pruning-method.md walks through one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .base import VisualLayout
from .hook import scaled_layers

if TYPE_CHECKING:
    from torch import Tensor

    from .hook import LLMPlan


class Acts(Enum):
    """Where a method prunes."""

    NEVER = "never"  # keeps every token (the unpruned baseline)
    BEFORE_LLM = "before the LLM"  # chooses tokens from the vision tower's output; the LLM sees only those
    IN_LLM = "inside the LLM"  # prunes at layers it declares (pruning/hook.py); layers before see every token


class Positions(Enum):
    """The RoPE positions of the tokens a before-the-LLM method keeps."""

    ORIGINAL = "original"  # the positions they had in the unpruned prompt (gaps where tokens were dropped)
    RENUMBERED = "renumbered"  # contiguous, as if the dropped tokens had never been there


@dataclass(frozen=True)
class Option:
    """One option of a method: the single source for validation, the command-line flag, the batch record key,
    the web chat's controls and the benchmarks.

    `low`/`high` bound numbers (`high_open`: the upper bound itself is refused); `choices` bound strings.
    `label` names the option in error messages ("the frame floor")."""

    name: str
    type: type
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    label: str | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """`value` converted to the option's type, or an InputError naming the option and its range."""
        label = self.label or self.name
        if self.type is bool:
            if not isinstance(value, bool):
                raise InputError(f"{label} must be true or false, got {value!r}")
            return value
        if self.type is str:
            if self.choices is not None and value not in self.choices:
                raise InputError(f"{label} must be {' or '.join(repr(c) for c in self.choices)}, got {value!r}")
            return value
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"{label} must be an integer, got {value!r}")
        if self.type is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"{label} must be a number in {self.range_text()}, got {value!r}")
        below = self.low is not None and value < self.low
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if below or above:
            raise InputError(f"{label} must be in {self.range_text()}, got {value!r}")
        return self.type(value)

    def range_text(self) -> str:
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"[{low}, {high}{')' if self.high_open or self.high is None else ']'}"


def keep_positions_option(rule: Positions) -> Option:
    """The option of a before-the-LLM method whose positions rule the user may change."""
    return Option("keep_positions", bool, rule is Positions.ORIGINAL,
                  "pruning before the LLM: kept tokens keep their original RoPE positions, as FastV does "
                  "(default: the method's own rule, as its official code)", label="keep_positions")


@dataclass(frozen=True)
class EncodedVideo:
    """The vision tower's output for one clip: what a before-the-LLM method chooses from."""

    features: Tensor  # [F, T, d_llm] after the projector; T = tokens per frame, CLS at index 0
    vision_features: Tensor  # [F, T, d_vis] tower output at the feature layer
    cls_attention: Tensor  # [F, T] [CLS] -> token attention at the feature layer, mean over heads
    layout: VisualLayout
    summary: Tensor | None = None  # [layout.summary, d_llm] tokens after the frames' (LLaVA-OneVision's newline)
    # What the family's later stages need of this clip (Qwen-VL: the grid, its timing, deepstack features).
    extras: dict = field(default_factory=dict)

    def for_methods(self) -> EncodedVideo:
        """The frames' tokens only: what a before-the-LLM method chooses among (summary tokens always stay)."""
        return replace(self, layout=self.layout.frames_only(), summary=None) if self.layout.summary else self

    def with_summary(self, sel: Selection) -> Selection:
        """A method's selection among the frames' tokens with the summary tokens after them, kept as a frame's
        [CLS] is by VisPruner."""
        if self.summary is None:
            return sel
        import torch

        n_frame_tokens = self.layout.n_tokens - self.layout.summary
        kept = None if sel.kept is None else [*sel.kept, *range(n_frame_tokens, self.layout.n_tokens)]
        # a merging method's record pairs each kept token with what it absorbed: the summary tokens absorb nothing
        absorbed = None if sel.absorbed is None else [*sel.absorbed, *([] for _ in range(self.layout.summary))]
        return replace(sel, kept=kept, visual=torch.cat([sel.visual, self.summary.to(sel.visual)]), absorbed=absorbed)

    def all_features(self) -> Tensor:
        """[n_visual, d_llm]: every visual token's features in prompt order, the summary tokens last."""
        import torch

        flat = self.features.reshape(-1, self.features.shape[-1])
        return flat if self.summary is None else torch.cat([flat, self.summary.to(flat)])


@dataclass(frozen=True)
class Selection:
    """Visual tokens chosen before the LLM and the features it sees for them."""

    kept: list[int] | None  # indices into the visual span, ascending; None: all (FastV, if any, prunes later)
    visual: Tensor  # [n_kept, d_llm]: the kept tokens' features, or their merged features (FastVID)
    scores: list[float] | None = None  # a score per visual token, for heatmaps
    details: dict = field(default_factory=dict)
    absorbed: list[list[int]] | None = None  # methods that merge: per kept token, the tokens merged into it


# (the encoded clip, how many visual tokens to keep, the method's options) -> what the LLM will see
SelectFn = Callable[[EncodedVideo, int, Mapping[str, Any]], Selection]
# (the method's options, R per sample, tokens per frame) -> what the prefill asks at its layers (pruning/hook.py)
PlanFn = Callable[[Mapping[str, Any], list[float], int], "LLMPlan"]
# (the method's options, R per sample, each sample's selection) -> the plan of a method's stage inside the LLM
# after its selection (its layers see the selection's tokens, in the selection's order)
AfterFn = Callable[[Mapping[str, Any], list[float], list[Selection]], "LLMPlan"]
# (the method's checked options, the LLM's depth or None) -> raise InputError for a combination out of range
CheckFn = Callable[[Mapping[str, Any], int | None], None]


@dataclass(frozen=True)
class Method:
    """A pruning method, as the rest of videoqa sees it.

    `positions`: the rule for tokens kept before the LLM (None for methods that do not prune before it);
    `positions_choosable`: the user may switch it (`--keep-positions`), declared as one more option.
    `select` (before the LLM) or `plan` (inside it) does the pruning; `layer` says where, for FLOPs. A method
    acting before the LLM may also have an `after`: it then acts in both places (PruneVid merges before the LLM
    and prunes inside it; DyCoke merges before it and prunes the KV cache while decoding), its plan made from
    what its selections left (`llm_plan`); `inside_option` may name the bool option that turns that stage on.
    `depth_defaults` names layer options whose default 0 means "the published layer, scaled to this model's
    depth" ((option, published layer, published depth)), resolved by `PruneConfig.validate` (`resolve_depth`) with
    the hook's `scaled_layers`, the rule the in-LLM methods' own layer schedules follow."""

    name: str
    help: str
    acts: Acts
    options: tuple[Option, ...] = ()
    positions: Positions | None = None
    positions_choosable: bool = False
    select: SelectFn | None = None
    plan: PlanFn | None = None
    check: CheckFn | None = None
    layer_option: str | None = None  # inside the LLM: the option that names its (first) layer K
    # Samples fewer frames instead of pruning tokens (the `frames` baseline): the planner plans
    # round(kept tokens / tokens per frame) frames and R=0 inside (pruning/planner.py, `fewer_frames`).
    reduces_frames: bool = False
    # Whether the visual tokens the LLM sees, and so the prompt's prefix up to them, are the same for every
    # question about a clip: then its KV cache is reused across questions (videoqa/llm/prefix_cache.py). Default:
    # every method that does not act inside the LLM (a method ranking there reads the question).
    question_independent: bool | None = None
    depth_defaults: tuple[tuple[str, int, int], ...] = ()
    after: AfterFn | None = None
    inside_option: str | None = None  # a method with an `after`: the bool option that turns that stage on

    def __post_init__(self):
        if (self.acts is Acts.BEFORE_LLM) != (self.select is not None):
            raise ValueError(f"{self.name}: a method acting before the LLM has a `select`, and only it")
        if self.acts is Acts.IN_LLM and (self.plan is None or self.layer_option is None):
            raise ValueError(f"{self.name}: a method acting inside the LLM has a `plan` and a `layer_option`")
        if self.acts is not Acts.IN_LLM and self.plan is not None:
            raise ValueError(f"{self.name}: only a method acting inside the LLM has a `plan` (`after`: after a select)")
        if self.after is not None and self.select is None:
            raise ValueError(f"{self.name}: an `after` stage follows a `select`")
        if self.acts is Acts.BEFORE_LLM and self.positions is None:
            raise ValueError(f"{self.name}: a method acting before the LLM declares its positions rule")
        if self.question_independent is None:
            object.__setattr__(self, "question_independent", self.acts is not Acts.IN_LLM)
        elif self.question_independent and self.acts is Acts.IN_LLM:
            raise ValueError(f"{self.name}: a method acting inside the LLM ranks with the question")
        if self.inside_option is not None and self.after is None:
            raise ValueError(f"{self.name}: `inside_option` switches an `after` stage, which it lacks")
        if self.positions_choosable and "keep_positions" not in self.option_names:
            object.__setattr__(self, "options", (*self.options, keep_positions_option(self.positions)))

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)

    def two_stage(self, params: Mapping[str, Any]) -> bool:
        """Whether, with these options, the method acts before the LLM and inside it (or in its KV cache)."""
        if self.after is None:
            return False
        return self.inside_option is None or bool(params.get(self.inside_option, self.defaults()[self.inside_option]))

    def llm_plan(self, params: Mapping[str, Any], rs: list[float], tokens_per_frame: int | None,
                 selections: list[Selection]) -> LLMPlan | None:
        """What the prefill asks at its layers for a batch (None: nothing acts inside the LLM)."""
        if self.plan is None and not self.two_stage(params):
            return None
        if any(params[name] == 0 for name, _, _ in self.depth_defaults):
            raise ValueError(f"{self.name}: its layers are resolved against the model: PruneConfig.validate(n_layers)")
        return self.plan(params, rs, tokens_per_frame) if self.plan is not None else self.after(params, rs, selections)

    def resolve_depth(self, params: dict[str, Any], n_layers: int) -> None:
        """Fill, in `params`, each depth-relative layer option left at 0 with the published layer scaled to a
        model of `n_layers` layers (at least 1, at most n_layers - 1)."""
        for name, layer, depth in self.depth_defaults:
            if params.get(name) == 0:  # none left (a 1-layer model): layer 1, which the check then refuses
                params[name] = (scaled_layers((layer,), n_layers, low=1, depth=depth) or (1,))[0]

    @property
    def uses_r(self) -> bool:
        return self.acts is not Acts.NEVER

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def layer(self, params: Mapping[str, Any]) -> int | None:
        """Where pruning happens: None (never), 0 (before the LLM) or K."""
        if self.acts is Acts.NEVER:
            return None
        return 0 if self.acts is Acts.BEFORE_LLM else params.get(self.layer_option, self.defaults()[self.layer_option])

    def original_positions(self, params: Mapping[str, Any]) -> bool:
        """Whether the tokens this method keeps before the LLM keep their unpruned RoPE positions."""
        if self.positions is None:
            return False
        rule = self.positions is Positions.ORIGINAL
        return bool(params.get("keep_positions", rule)) if self.positions_choosable else rule


def share_option(name: str, default: float, help: str) -> Option:
    """An option that is a share in [0, 1] (of a budget, of the kept tokens); `help` without its default."""
    return Option(name, float, default, f"{help} (default: {default:g})", low=0.0, high=1.0, metavar="SHARE")


def before_llm(name: str, help: str, positions: Positions, select: SelectFn, *options: Option) -> Method:
    """A method that chooses its tokens before the LLM, under a positions rule the user may switch."""
    return Method(name=name, help=help, acts=Acts.BEFORE_LLM, options=options, positions=positions,
                  positions_choosable=True, select=select)


def kept_features(enc: EncodedVideo, kept: list[int]) -> Tensor:
    """The LLM-space features of the kept visual-span indices, in their order."""
    import torch

    flat = enc.features.reshape(-1, enc.features.shape[-1])
    return flat[torch.as_tensor(kept, device=flat.device)]


@dataclass(frozen=True)
class LayerCheck:
    """The check of a layer option (0 before `resolve_depth`): inside the model's depth, from `low`. `label` names
    the layer in the message, "{}" where its value goes ("K={}"; else the value follows it). A dataclass, so that
    a method pickles."""

    option: str
    label: str
    low: int = 1

    def __call__(self, params: Mapping[str, Any], n_layers: int | None) -> None:
        layer = params[self.option]
        if n_layers is not None and layer >= n_layers:
            named = self.label.format(layer) if "{}" in self.label else f"{self.label} {layer}"
            raise InputError(f"{named} is out of range: the language model has {n_layers} layers, "
                             f"so it must be in [{self.low}, {n_layers - 1}]")


@dataclass(frozen=True)
class PlanClass:
    """The `plan` of a method whose plan class `name`, in the algorithm.py of `package` (beside its declaration),
    builds itself from the options (`from_options(params, rs, tokens_per_frame)`). Imported when first used, so
    that the declaration stays importable without torch; a dataclass, not a closure, so that a method pickles (the
    memory bench measures each in a fresh process)."""

    package: str
    name: str

    def __call__(self, params: Mapping[str, Any], rs: list[float], tokens_per_frame: int | None) -> LLMPlan:
        return getattr(import_module(f"{self.package}.algorithm"), self.name).from_options(params, rs,
                                                                                          tokens_per_frame)


def in_llm(name: str, help: str, plan: tuple[str, str], layer: Option, *options: Option,
           check: CheckFn | None = None) -> Method:
    """A method that prunes inside the LLM: `plan` = (its package, its plan class in the algorithm.py there; see
    `PlanClass`), `layer` the option naming its (first) layer, listed first."""
    return Method(name=name, help=help, acts=Acts.IN_LLM, options=(layer, *options), plan=PlanClass(*plan),
                  check=check, layer_option=layer.name)


def before_and_inside(name: str, help: str, positions: Positions, select: SelectFn, after: AfterFn,
                      layer: tuple[str, int, int, str], *options: Option, inside_option: str | None = None) -> Method:
    """A method that selects before the LLM and acts again inside it (`after`), under a positions rule the user may
    switch; `layer` = (its layer option, its published layer, the published model's depth, the option's label in
    errors)."""
    option, published, depth, label = layer
    return Method(name=name, help=help, acts=Acts.BEFORE_LLM, options=options, positions=positions,
                  positions_choosable=True, select=select, after=after, inside_option=inside_option,
                  check=LayerCheck(option, label), depth_defaults=((option, published, depth),))
