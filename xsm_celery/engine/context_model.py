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
"""

from __future__ import annotations

from typing import Any

from xsm_celery.errors import ArgumentTypeError, ConfigurationError, MissingExtraError

__all__ = ["context_model"]


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
