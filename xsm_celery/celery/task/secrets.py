"""Keep a task's secret arguments out of the messages it produces, not only out of its fields.

Arguments are masked by parameter name in a dead letter, but their values travel on in free
text: ``raise ValueError(f"bad key {api_key}")`` copies the key into the exception message,
which becomes the error chain in the ``xsm_chart`` retry header (in the broker), the dead
letter's errors (in the store, ``dlq list --json`` and the admin), and the message Celery
logs and stores as the task's result. This module finds the values of the redacted
arguments and masks them, with every well-known token shape, in each of those places.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xsm_celery.engine.redact import DEFAULT_REDACT_KEYS, mask_text, secret_values
from xsm_celery.patterns import ERRORS_CONTEXT_KEY
from xsm_celery.patterns.dead_letter.redaction import mask_errors

__all__ = ["mask_context_errors", "mask_exception", "named_arguments", "task_secrets"]


def named_arguments(
    signature: inspect.Signature | None, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's arguments by parameter name (positional ones named by the signature)."""
    names: list[str] = []
    if signature is not None:
        names = [
            p.name
            for p in signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    named = {names[i]: value for i, value in enumerate(args) if i < len(names)}
    unnamed = [value for i, value in enumerate(args) if i >= len(names)]
    return {**named, "*args": unnamed, **kwargs}


def task_secrets(
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    keys: Iterable[str] | None,
) -> tuple[str, ...]:
    """The values of the call's arguments that redaction masks by name."""
    chosen = DEFAULT_REDACT_KEYS if keys is None else tuple(keys)
    return tuple(secret_values(named_arguments(signature, args, kwargs), chosen))


def mask_context_errors(context: dict[str, Any], secrets: Iterable[str]) -> None:
    """Mask the error chain's messages in a chart's live context, before its snapshot is taken.

    Done on the context rather than on the snapshot's JSON, so a retry dumps its snapshot once
    and parses nothing; the chain is replaced only when masking changed it.
    """
    chain = context.get(ERRORS_CONTEXT_KEY)
    if not isinstance(chain, list) or not chain:
        return
    masked = mask_errors(chain, secrets)
    if masked != chain:
        context[ERRORS_CONTEXT_KEY] = masked


def mask_exception(error: BaseException | None, secrets: Iterable[str]) -> None:
    """Mask secrets in ``error``'s string arguments, so Celery logs and stores it masked.

    The exception keeps its type and every other argument; only text that held a secret or a
    token changes.
    """
    if error is None:
        return
    known = tuple(secrets)
    masked = tuple(mask_text(a, known) if isinstance(a, str) else a for a in error.args)
    if masked != error.args:
        error.args = masked
