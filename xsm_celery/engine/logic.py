"""MachineLogic: the named actions, guards, services and delays a chart refers to.

A chart is JSON and names its behaviour; the logic maps those names to Python. Keeping the two
apart is what lets a chart be drawn, hashed and validated without importing any code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from xsm_celery.errors import ArgumentTypeError

__all__ = ["ChildMachine", "MachineLogic", "accepts_params"]


@runtime_checkable
class ChildMachine(Protocol):
    """A service that is a chart, run as a child machine: what a ``Machine`` provides.

    Declared here by shape so that ``MachineLogic`` can accept a machine as a service at
    construction without importing :mod:`~xsm_celery.engine.machine`, which builds machines
    from a ``MachineLogic`` and so imports this module.
    """

    root: Any
    nodes: tuple[Any, ...]
    structure_hash: str


class MachineLogic:
    """Named implementations: ``actions``, ``guards``, ``services`` and ``delays``.

    Args:
        actions: name -> ``fn(interp, ctx, event, action_def)``.
        guards: name -> ``fn(ctx, event)`` (or ``fn(ctx, event, params)`` for ``{type, params}``
            guards).
        services: name -> ``fn(interp, ctx, event)``, a :func:`from_callback` actor, or a
            ``Machine`` (run as a child machine).
        delays: name -> milliseconds, or ``fn(ctx, event) -> ms``.
    """

    __slots__ = ("actions", "delays", "guards", "services")

    def __init__(
        self,
        actions: Mapping[str, Callable[..., Any]] | None = None,
        guards: Mapping[str, Callable[..., Any]] | None = None,
        services: Mapping[str, Any] | None = None,
        delays: Mapping[str, Any] | None = None,
    ) -> None:
        self.actions: dict[str, Callable[..., Any]] = dict(actions or {})
        self.guards: dict[str, Callable[..., Any]] = dict(guards or {})
        self.services: dict[str, Any] = dict(services or {})
        self.delays: dict[str, Any] = dict(delays or {})
        for kind in ("actions", "guards", "services"):
            for name, impl in getattr(self, kind).items():
                if kind == "services" and isinstance(impl, ChildMachine):
                    continue
                if not callable(impl):
                    raise ArgumentTypeError(
                        f"MachineLogic({kind}=...): {name!r} is {type(impl).__name__}, "
                        "not a callable"
                    )
        for name, delay in self.delays.items():
            if not callable(delay) and (
                isinstance(delay, bool) or not isinstance(delay, (int, float))
            ):
                raise ArgumentTypeError(
                    f"MachineLogic(delays=...): {name!r} must be milliseconds or "
                    f"fn(ctx, event) -> ms, got {delay!r}"
                )

    def merge(self, *others: MachineLogic) -> MachineLogic:
        """A new logic with ``others`` layered on top; on a name clash the later one wins.

        ``policy.logic().merge(mine)`` therefore lets your names override a pattern's.
        Neither operand changes.
        """
        merged = MachineLogic(self.actions, self.guards, self.services, self.delays)
        for other in others:
            merged.actions.update(other.actions)
            merged.guards.update(other.guards)
            merged.services.update(other.services)
            merged.delays.update(other.delays)
        return merged

    def __repr__(self) -> str:
        return (
            f"MachineLogic(actions={sorted(self.actions)}, guards={sorted(self.guards)}, "
            f"services={sorted(self.services)}, delays={sorted(self.delays)})"
        )


def accepts_params(fn: Callable[..., Any]) -> bool:
    """Whether a guard takes a third positional argument (its ``params``).

    Checked once when the machine is built, so guards written as ``(ctx, event)`` keep
    working and parameterised ones get their params without a per-call signature probe.
    """
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    return len(positional) >= 3 or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
