"""The adaptive policy's constants for one model: its card's "policy" section (videoqa.json beside the weights),
else Video-LLaVA-7B's defaults, each constant with where it came from.

The right frame rate and pruning depend on the model (what it was trained on, how deep it is), so they live
with the model, not in the code. The defaults are Video-LLaVA-7B's: 8 uniformly sampled frames (its training),
FastV's K=2 and R=0.5 (the paper's setting), and the constants of the first policy sweep for longer clips.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .model_card import ModelCard
from .pruning import REGISTRY
from .pruning.adaptive import AdaptivePolicy
from .video.samplers import SAMPLERS

_BASE = AdaptivePolicy()  # the values live there (and K in FastV's option declaration); here, why
# card field -> (default, why it is the default)
DEFAULTS: dict[str, tuple[object, str]] = {
    "frames": (_BASE.base_frames, f"trained on {_BASE.base_frames} uniformly sampled frames"),
    "k": (REGISTRY.option("k").default, f"FastV's K={REGISTRY.option('k').default}"),
    "r": (_BASE.base_r, f"FastV's R={_BASE.base_r}"),
    "seconds_per_frame": (_BASE.seconds_per_frame,
                          f"one frame per {_BASE.seconds_per_frame:g} s past the base frames (first sweep)"),
    "budget_exponent": (_BASE.budget_exponent,
                        f"kept tokens grow as frames^{_BASE.budget_exponent} (first sweep)"),
    "r_max": (_BASE.r_max, f"published video accuracy falls off past R={_BASE.r_max}"),
    "sampler": (SAMPLERS[0], f"{SAMPLERS[0]} frames, as trained"),
}
# card field -> AdaptivePolicy field
_POLICY_FIELDS = {"frames": "base_frames", "r": "base_r", "seconds_per_frame": "seconds_per_frame",
                  "budget_exponent": "budget_exponent", "r_max": "r_max"}


@dataclass(frozen=True)
class ModelPolicy:
    """What the model's card sets: the adaptive policy, FastV's default K, the default frame sampler, and for
    each constant its value and source ("<path of videoqa.json>" or "default (Video-LLaVA-7B: ...)")."""

    policy: AdaptivePolicy = field(default_factory=AdaptivePolicy)
    k: int = 2
    sampler: str = "uniform"
    constants: dict = field(default_factory=dict)  # name -> {"value": ..., "source": ...}


def model_policy(card: ModelCard) -> ModelPolicy:
    """The policy the card declares, with Video-LLaVA-7B's defaults for what it leaves out."""
    values, constants = {}, {}
    for name, (default, why) in DEFAULTS.items():
        if name in card.policy:
            values[name] = card.policy[name]
            source = card.path
        else:
            values[name], source = default, f"default (Video-LLaVA-7B: {why})"
        constants[name] = {"value": values[name], "source": source}
    if card.policy.get("note"):  # once, not in every constant's source (a long note was copied seven times)
        constants["note"] = {"value": card.policy["note"], "source": card.path}
    policy = replace(AdaptivePolicy(), **{attr: values[name] for name, attr in _POLICY_FIELDS.items()})
    return ModelPolicy(policy, values["k"], values["sampler"], constants)


def policy_of(name: str) -> ModelPolicy:
    """The policy of a model by name or folder (its videoqa.json; nothing is loaded or downloaded)."""
    from .model import resolve_model
    from .models.families import card_of

    return model_policy(card_of(resolve_model(name)))


def set_on_pipeline(policy: AdaptivePolicy, base: ModelPolicy) -> dict:
    """The constants of a policy set on a pipeline by hand (a sweep's variant): each names the card's source
    where it kept the card's value, "set on the pipeline" where it changed it."""
    out = {}
    for name, entry in base.constants.items():
        attr = _POLICY_FIELDS.get(name)
        if attr is None or getattr(policy, attr) == entry["value"]:
            out[name] = dict(entry)
        else:
            out[name] = {"value": getattr(policy, attr), "source": "set on the pipeline (VideoQA.policy)"}
    return out
