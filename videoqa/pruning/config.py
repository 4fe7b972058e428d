"""The user's pruning choice: a method, R, and that method's own options (declared in the registry)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InputError
from .method import Method
from .registry import REGISTRY

AUTO: Literal["auto"] = "auto"
Ratio = float | Literal["auto"]  # R: the fraction of visual tokens dropped, or "auto" (the adaptive policy)


def parse_r(value: Any) -> Ratio:
    """R as the user wrote it (a number, "auto", a command-line or text-box string) -> a float in [0, 1) or
    AUTO. The one place R is read; everything after compares `PruneConfig.adaptive`."""
    if isinstance(value, str) and value.strip().lower() in ("auto", ""):
        return AUTO
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise InputError(f"R must be a number in [0, 1) or 'auto', got {value!r}") from None
    if not 0.0 <= r < 1.0:
        raise InputError(f"R must be in [0, 1) (the fraction of visual tokens dropped), got {r}")
    return r


def format_r(r: float) -> str:
    """R with two decimals, or as many more as it takes not to show 0.999 as 1.00 (or 0.001 as 0.00): the one way
    R is shown (CLI stats line, web chat)."""
    digits = 2
    while digits < 6 and 0 < r < 1 and round(r, digits) in (0.0, 1.0):
        digits += 1
    return f"{r:.{digits}f}"


@dataclass(frozen=True, init=False)
class PruneConfig:
    """What the user asked for; immutable (`dataclasses.replace` makes a changed copy, `validate` a checked one).

    `method` names a registered method; `r` is R (see `Ratio`); `params` holds that method's options as sorted
    (name, value) pairs, read as attributes (`cfg.k`, `cfg.keep_positions`). Construction takes the options
    as keywords: `PruneConfig(method="fastv", k=3, r=0.5)` (K may also come second, positionally, as before).
    An option of another method is dropped by `validate` when it holds its default, refused otherwise.
    Reading an option the method does not have gives None.

    `checked`: made by `validate`, so that a later `validate` (the pipeline's, once the model's depth is known)
    does not check the options again and only binds them to the depth; any changed copy is unchecked.
    """

    method: str
    r: Ratio
    params: tuple[tuple[str, Any], ...]
    checked: bool = field(default=False, init=False, compare=False, repr=False)

    def __init__(self, method: str = "fastv", k: int | None = None, r: Ratio | str = AUTO,
                 params: tuple[tuple[str, Any], ...] = (), **options: Any):
        given = dict(params)
        if k is not None:
            given["k"] = k
        # None means "not given" (a spec from before an option existed, an unset command-line flag).
        given.update({name: value for name, value in options.items() if value is not None})
        for name in given:
            if REGISTRY.option(name) is None:
                raise TypeError(f"PruneConfig got an unknown option {name!r}")
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "r", r)
        object.__setattr__(self, "params", tuple(sorted(given.items())))
        object.__setattr__(self, "checked", False)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("method", "r", "params", "checked"):
            raise AttributeError(name)
        given = dict(self.params)
        if name in given:
            return given[name]
        method = self.method_spec if self.method in REGISTRY else None
        if method is not None and method.option(name) is not None:
            return method.option(name).default
        if REGISTRY.option(name) is not None:
            return None
        raise AttributeError(f"PruneConfig has no option {name!r}")

    def __reduce__(self):  # __getattr__ above would confuse the default pickling; Ray ships these
        return _rebuild, (self.method, self.r, self.params, self.checked)

    @property
    def method_spec(self) -> Method:
        return REGISTRY.get(self.method)

    @property
    def options(self) -> dict[str, Any]:
        """The method's options (its defaults where not given) and any other given."""
        return {**self.method_spec.defaults(), **dict(self.params)}

    @property
    def adaptive(self) -> bool:
        """R is chosen per clip by the adaptive policy (and, without --frames, the frame count too)."""
        return self.r == AUTO and self.method_spec.uses_r

    def validate(self, n_layers: int | None = None, keep_others: bool = False) -> PruneConfig:
        """A checked copy: a numeric R (or AUTO), every option of the method (defaults filled in), none of
        another method's; raises InputError naming the first bad field. `n_layers` (the language model's
        depth) also bounds options such as FastV's K. `keep_others`: another method's options are checked and
        kept instead of refused (the web page's first settings: used once that method is picked).

        A configuration already checked (the command line checks before the model loads) is not checked again:
        with `n_layers` only its depth-relative layers are resolved and the method's depth check runs."""
        if self.checked:
            return self if n_layers is None else self._bound(REGISTRY.get(self.method), dict(self.params), self.r,
                                                             n_layers)
        method = REGISTRY.get(self.method)
        r = parse_r(self.r)
        params = method.defaults()
        for name, value in self.params:
            option = method.option(name)
            if option is None:
                other = REGISTRY.option(name)
                if keep_others:
                    params[name] = other.check(value)
                    continue
                if value == other.default:
                    continue
                label = other.label or name
                raise InputError(f"{label} is an option of {'/'.join(REGISTRY.users(name))}; "
                                 f"{self.method} does not use it")
            params[name] = option.check(value)
        return self._bound(method, params, r, n_layers)

    def _bound(self, method, params: dict, r, n_layers: int | None) -> PruneConfig:
        """The checked copy of these `params`: depth-relative layers resolved (with `n_layers`), the method's own
        check run."""
        if n_layers is not None:
            method.resolve_depth(params, n_layers)
        if method.check is not None:
            method.check(params, n_layers)
        return PruneConfig(self.method, r=r, params=tuple(params.items()))._marked(True)

    def _marked(self, checked: bool) -> PruneConfig:
        object.__setattr__(self, "checked", checked)
        return self

    def for_method(self, method: str) -> PruneConfig:
        """This configuration with another method (e.g. picked in the web chat): R and the options both share
        carry over; `keep_positions` only where it was chosen against this method's own rule (a renumbering
        chosen for vispruner carries to random, VisPruner's own default must not renumber a fastvid)."""
        new = REGISTRY.get(method)
        old = REGISTRY.get(self.method)
        carried = {}
        for name, value in self.params:
            if new.option(name) is None:
                continue
            if name == "keep_positions" and value == old.original_positions({}):
                continue
            carried[name] = value
        return PruneConfig(method, r=self.r, params=tuple(carried.items()))

    @property
    def original_positions(self) -> bool:
        """Whether tokens kept before the LLM keep their unpruned RoPE positions."""
        return self.method_spec.original_positions(self.options)

    @property
    def layer(self) -> int | None:
        """Where pruning happens: None (never), 0 (before the LLM) or K."""
        return self.method_spec.layer(self.options)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (`PruneConfig(**d)` rebuilds it): what command-line specs, Ray actors and records hold."""
        return {"method": self.method, "r": self.r, **dict(self.params)}


def _rebuild(method: str, r: Ratio, params: tuple, checked: bool = False) -> PruneConfig:
    return PruneConfig(method, r=r, params=params)._marked(checked)
