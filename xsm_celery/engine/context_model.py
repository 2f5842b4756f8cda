"""A pydantic model as a machine's context validator (the ``pydantic`` extra).

``create_machine(chart, context_model=OrderContext)`` (or ``context_validator=
context_model(OrderContext)``, 0.11.0's spelling, also at ``xsm_celery.contrib.pydantic``)
validates the user's context keys after every step. Library-private keys (``_xsm_...``, the
dead-letter error chain) are filtered out before ``model_validate``, so a model with
``extra="forbid"`` is unaffected. With ``write_back`` (the default) coerced values and
defaults are written into the live context.

It sits in the engine because ``create_machine`` takes ``context_model=``. pydantic is
imported only when a model is given, so importing the engine still needs nothing outside the
standard library.

Whatever the model, a context may nest dicts, lists and tuples at most
:data:`MAX_CONTEXT_DEPTH` levels deep: each interpreter deep-copies its chart's context and
every snapshot encodes it, and past that depth either would end in ``RecursionError``.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.engine.events import MAX_EVENT_DEPTH, nested_deeper_than
from xsm_celery.errors import (
    ArgumentTypeError,
    ConfigurationError,
    ContextValidationError,
    MissingExtraError,
)

__all__ = ["MAX_CONTEXT_DEPTH", "check_context_depth", "context_model"]

#: Deepest nesting of dicts, lists and tuples a context may have (the context is level 1):
#: room for a payload of ``MAX_EVENT_DEPTH`` levels stored a few keys down.
MAX_CONTEXT_DEPTH = 2 * MAX_EVENT_DEPTH


def check_context_depth(machine_id: str, context: Any) -> None:
    """Refuse a context nested deeper than :data:`MAX_CONTEXT_DEPTH`.

    Checked where a context comes in (the chart, a ``context`` factory, a snapshot) and
    before one goes out (a snapshot), so no depth reaches ``copy.deepcopy`` or ``json``.

    Raises:
        ContextValidationError: the context is too deep (or contains itself).
    """
    if nested_deeper_than(context, MAX_CONTEXT_DEPTH):
        raise ContextValidationError(
            machine_id,
            f"the context is nested more than {MAX_CONTEXT_DEPTH} dicts/lists deep (or "
            "contains itself); flatten it, or keep large documents elsewhere and store their id",
        )


def context_model(model: Any, *, write_back: bool = True) -> Any:
    """A ``context_validator`` for :func:`create_machine` from a pydantic ``BaseModel`` class.

    Raises:
        MissingExtraError: pydantic is not installed.
        TypeError: ``model`` is not a pydantic model class.
    """
    try:
        from pydantic import BaseModel, ValidationError
    except ImportError as exc:
        raise MissingExtraError("pydantic", "pydantic", hint="context_model=") from exc
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ArgumentTypeError(
            f"context_model() needs a pydantic BaseModel subclass, got {model!r}"
        )

    def validate(public: dict[str, Any]) -> dict[str, Any] | None:
        try:
            instance = model.model_validate(public)
        except ValidationError as exc:
            raise ConfigurationError(
                "; ".join(
                    f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
                    for err in exc.errors()
                )
            ) from None
        return instance.model_dump() if write_back else None

    validate.__qualname__ = f"context_model({model.__name__})"
    return validate
