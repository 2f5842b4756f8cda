"""Jitter modes for exponential backoff, after the AWS Architecture Blog's formulas.

Without jitter every client that failed at the same instant retries at the same instants
too, and knocks the recovering dependency over again. Each mode here spreads the retries
differently; the functions are pure (the random draw is passed in), so their bounds can be
proved by property tests without touching a random number generator.
"""

from __future__ import annotations

import enum
import math

from xsm_celery.errors import ConfigurationError

__all__ = ["Jitter", "apply_jitter", "check_draw", "parse_jitter"]


class Jitter(enum.Enum):
    """How a backoff delay is randomised.

    ``NONE`` is the plain capped exponential; ``FULL`` draws uniformly in ``[0, exp]``;
    ``EQUAL`` keeps half and draws the other half; ``DECORRELATED`` draws in
    ``[base, 3 * previous]`` and so depends on the previous delay, not the attempt number.
    """

    NONE = "none"
    FULL = "full"
    EQUAL = "equal"
    DECORRELATED = "decorrelated"


def parse_jitter(value: str | Jitter) -> Jitter:
    """Turn the seed's jitter string into a ``Jitter``; refuse anything else.

    Raises:
        ValueError: ``value`` names no mode; the message lists the valid ones.
    """
    if isinstance(value, Jitter):
        return value
    if isinstance(value, str):
        try:
            return Jitter(value.lower())
        except ValueError:
            pass
    choices = ", ".join(repr(m.value) for m in Jitter)
    raise ConfigurationError(f"jitter must be one of {choices}, got {value!r}")


def check_draw(value: float) -> float:
    """Return ``value`` if it is a usable uniform draw in ``[0, 1]``.

    An injected ``rng`` that returns NaN, a negative number or more than 1 would otherwise
    turn into a NaN, negative or over-cap delay without anyone noticing.

    Raises:
        ValueError: ``value`` is outside ``[0, 1]`` or NaN.
    """
    draw = float(value)
    if not 0.0 <= draw <= 1.0:
        raise ConfigurationError(f"rng() must return a float in [0, 1], got {value!r}; fix the rng")
    return draw


def apply_jitter(
    mode: Jitter, exp_ms: float, draw: float, *, base_ms: float, cap_ms: float, previous_ms: float
) -> float:
    """The delay for one retry, given the capped exponential and one draw in ``[0, 1]``.

    Args:
        mode: The jitter mode.
        exp_ms: ``min(cap, base * factor ** (attempt - 1))``.
        draw: A checked uniform draw (see ``check_draw``); ignored by ``NONE``.
        base_ms: The policy's base delay (the floor of ``DECORRELATED``).
        cap_ms: The policy's cap (``inf`` for none).
        previous_ms: The previous delay, used by ``DECORRELATED`` only.
    """
    if mode is Jitter.NONE or (math.isinf(exp_ms) and mode is not Jitter.DECORRELATED):
        # With no cap the exponential can overflow to inf; 0 * inf would be NaN.
        return exp_ms
    if mode is Jitter.FULL:
        return draw * exp_ms
    if mode is Jitter.EQUAL:
        half = exp_ms / 2.0
        return half + draw * half
    return _decorrelated(draw, base_ms=base_ms, cap_ms=cap_ms, previous_ms=previous_ms)


def _decorrelated(draw: float, *, base_ms: float, cap_ms: float, previous_ms: float) -> float:
    """``min(cap, uniform(base, 3 * previous))``, with the range never inverted.

    A previous delay below ``base / 3`` would invert the range, so the range then collapses
    to ``base``; a previous delay that is not a finite non-negative number (a hand-edited
    context can hold anything) counts as ``base``.
    """
    if cap_ms <= base_ms:
        return cap_ms
    prev = previous_ms if math.isfinite(previous_ms) and previous_ms >= 0.0 else base_ms
    high = min(cap_ms, max(base_ms, 3.0 * prev))
    return min(cap_ms, base_ms + draw * (high - base_ms))
