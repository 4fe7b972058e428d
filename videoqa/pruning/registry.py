"""The pruning methods videoqa knows, by name.

`REGISTRY` is the one default instance: the built-in methods (none, fastv, vispruner, random, fastvid) and
whatever a plugin or a test registers. Everything that lists methods or their options — `PruneConfig`'s
validation, the command line, the web chat, batch record keys, the benchmarks — asks it, so registering a
method is the only edit that adds one.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..errors import InputError
from .method import Method, Option


class Registry:
    """Methods by name, in registration order (the order the command line and the web chat show them)."""

    def __init__(self, methods: tuple[Method, ...] = ()):
        self._methods: dict[str, Method] = {}
        for method in methods:
            self.register(method)

    def register(self, method: Method) -> Method:
        """Add `method`. An option another method also declares must have the same type (it is one flag)."""
        if method.name in self._methods:
            raise ValueError(f"a pruning method named {method.name!r} is already registered")
        for option in method.options:
            other = self.option(option.name)
            if other is not None and other.type is not option.type:
                raise ValueError(f"{method.name}: option {option.name!r} is a {option.type.__name__} here but a "
                                 f"{other.type.__name__} in another method")
        self._methods[method.name] = method
        return method

    def unregister(self, name: str) -> None:
        del self._methods[name]

    def get(self, name: str) -> Method:
        try:
            return self._methods[name]
        except KeyError:
            raise InputError(f"unknown pruning method {name!r}; choose one of {', '.join(self.names())}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._methods)

    def __iter__(self) -> Iterator[Method]:
        return iter(tuple(self._methods.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def option(self, name: str) -> Option | None:
        """The first registered declaration of an option (shared options agree on their type)."""
        return next((o for m in self for o in m.options if o.name == name), None)

    def options(self) -> dict[str, Option]:
        """Every option name any method declares -> its first declaration, in registration order."""
        out: dict[str, Option] = {}
        for method in self:
            for option in method.options:
                out.setdefault(option.name, option)
        return out

    def users(self, option: str) -> list[str]:
        """The methods that declare `option`."""
        return [m.name for m in self if option in m.option_names]


def _builtins() -> tuple[Method, ...]:
    from .methods import (
        divprune,
        dycoke,
        fastv,
        fastvid,
        flashvid,
        framefusion,
        frames,
        holitom,
        none,
        pool,
        prunevid,
        pyramiddrop,
        random,
        sparsevlm,
        vidcom2,
        visionzip,
        vispruner,
    )

    return (none.METHOD, fastv.METHOD, vispruner.METHOD, random.METHOD, fastvid.METHOD, visionzip.METHOD,
            divprune.METHOD, holitom.METHOD, vidcom2.METHOD, flashvid.METHOD, pool.METHOD, frames.METHOD,
            pyramiddrop.METHOD, sparsevlm.METHOD, framefusion.METHOD, prunevid.METHOD, dycoke.METHOD)


REGISTRY = Registry(_builtins())
