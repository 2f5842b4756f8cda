"""``ResiliencePipeline``: several patterns around one call, in an order you state.

The order of resilience patterns changes what they mean. A timeout outside the retry
bounds the whole loop; inside, each attempt. A breaker outside the retry sees one outcome
per call; inside, one per attempt. So the pipeline takes the order explicitly, outermost
first::

    pipeline = ResiliencePipeline(
        order=["timeout", "circuit_breaker", "retry"],
        timeout_s=2.0,
        circuit_breaker=CircuitBreaker.sensitive(name="geo"),
        retry=RetryPolicy.aggressive(),
    )
    pipeline.call(geocode, address)

Without ``order`` the stages given run in ``DEFAULT_ORDER`` (resilience4j's: fallback,
retry, circuit breaker, rate limiter, timeout, bulkhead, outermost first). The same
pipeline serves ``call`` and ``acall``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from xsm_celery.checks import POSITIVE_SECONDS
from xsm_celery.errors import ArgumentTypeError, ConfigurationError, RateLimitExceededError
from xsm_celery.patterns.breaker.circuit import CircuitBreaker
from xsm_celery.patterns.fallback import Fallback
from xsm_celery.patterns.limits.bulkhead import Bulkhead
from xsm_celery.patterns.limits.protocols import Admission
from xsm_celery.patterns.limits.rate_limit import BaseLimiter, check_timeout
from xsm_celery.patterns.retry import RetryPolicy
from xsm_celery.patterns.retry_call import arun_with_retry, run_with_retry
from xsm_celery.patterns.timeout import arun_with_timeout, run_with_timeout
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = ["DEFAULT_ORDER", "STAGES", "ResiliencePipeline"]

P = ParamSpec("P")
T = TypeVar("T")

#: Every stage a pipeline knows, with the type of policy it takes.
STAGES: dict[str, type | tuple[type, ...]] = {
    "fallback": Fallback,
    "retry": RetryPolicy,
    "circuit_breaker": CircuitBreaker,
    "rate_limiter": BaseLimiter,
    "timeout": (int, float),
    "bulkhead": Bulkhead,
}

#: The order used when none is given, outermost first.
DEFAULT_ORDER: tuple[str, ...] = tuple(STAGES)

_Sync = Callable[[], Any]
_Async = Callable[[], Awaitable[Any]]


class ResiliencePipeline:
    """Compose fallback, retry, breaker, rate limiter, timeout and bulkhead around calls.

    Args:
        order: Stage names, outermost first; each must have its policy given. Stages
            given but left out of ``order`` are an error, so nothing is silently unused.
        fallback, retry, circuit_breaker, rate_limiter, bulkhead: The policies.
        timeout_s: The timeout stage, in seconds.
        rate_limit_wait_s: How long the rate limiter stage waits for a token before it
            raises ``RateLimitExceededError`` (0: not at all; None: as long as needed).
        name: The pipeline's name; errors and facts name the called function.

    Raises:
        ValueError: An unknown, repeated, missing or unordered stage.
        TypeError: A policy of the wrong type for its stage.
    """

    def __init__(
        self,
        *,
        order: Sequence[str] | None = None,
        fallback: Fallback[Any] | None = None,
        retry: RetryPolicy | None = None,
        circuit_breaker: CircuitBreaker | None = None,
        rate_limiter: BaseLimiter | None = None,
        timeout_s: float | None = None,
        bulkhead: Bulkhead | None = None,
        rate_limit_wait_s: float | None = 0.0,
        name: str = "pipeline",
    ) -> None:
        given = {
            "fallback": fallback,
            "retry": retry,
            "circuit_breaker": circuit_breaker,
            "rate_limiter": rate_limiter,
            "timeout": timeout_s,
            "bulkhead": bulkhead,
        }
        self.policies: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        self.order: tuple[str, ...] = _check_order(order, self.policies)
        for stage, policy in self.policies.items():
            _check_policy(stage, policy)
        self.rate_limit_wait_s = check_timeout(rate_limit_wait_s)
        self.name = name

    def add(self, stage: str, policy: Any) -> ResiliencePipeline:
        """A new pipeline with ``stage`` added innermost (closest to the call)."""
        if stage in self.policies:
            raise ConfigurationError(f"the pipeline already has a {stage!r} stage")
        options = {_option(k): v for k, v in self.policies.items()}
        options[_option(stage)] = policy
        return ResiliencePipeline(
            order=[*self.order, stage],
            rate_limit_wait_s=self.rate_limit_wait_s,
            name=self.name,
            **options,
        )

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` through every stage, outermost first."""
        label = _label(fn)
        call: _Sync = functools.partial(fn, *args, **kwargs)
        for stage in reversed(self.order):
            call = functools.partial(self._sync_stage, stage, label, call)
        return call()  # type: ignore[no-any-return]

    async def acall(
        self, fn: Callable[P, Awaitable[T] | T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Like ``call`` for coroutines: every stage awaits instead of blocking."""

        async def innermost() -> Any:
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        label = _label(fn)
        call: _Async = innermost
        for stage in reversed(self.order):
            call = functools.partial(self._async_stage, stage, label, call)
        return await call()  # type: ignore[no-any-return]

    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]:
        """Use the pipeline as a decorator on a plain or ``async def`` function."""
        return wrap_calls(fn, self.call, self.acall)

    def _sync_stage(self, stage: str, label: str, call: _Sync) -> Any:
        policy = self.policies[stage]
        if stage == "fallback":
            return policy.call(call)
        if stage == "retry":
            return run_with_retry(policy, label, call)
        if stage == "circuit_breaker":
            return policy.call(call)
        if stage == "rate_limiter":
            self._admitted(policy.admit(timeout=self.rate_limit_wait_s), policy)
            return call()
        if stage == "timeout":
            return run_with_timeout(label, policy, call)
        return policy.call(call)  # bulkhead

    async def _async_stage(self, stage: str, label: str, call: _Async) -> Any:
        policy = self.policies[stage]
        if stage == "fallback":
            return await policy.acall(call)
        if stage == "retry":
            return await arun_with_retry(policy, label, call)
        if stage == "circuit_breaker":
            return await policy.acall(call)
        if stage == "rate_limiter":
            self._admitted(await policy.aadmit(timeout=self.rate_limit_wait_s), policy)
            return await call()
        if stage == "timeout":
            return await arun_with_timeout(label, policy, call())
        return await policy.acall(call)  # bulkhead

    @staticmethod
    def _admitted(admission: Admission, limiter: BaseLimiter) -> None:
        if not admission.allowed:
            raise RateLimitExceededError(limiter.name, retry_after_s=admission.retry_after_s)


def _label(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def _option(stage: str) -> str:
    return "timeout_s" if stage == "timeout" else stage


def _check_order(order: Sequence[str] | None, policies: dict[str, Any]) -> tuple[str, ...]:
    if order is None:
        return tuple(stage for stage in DEFAULT_ORDER if stage in policies)
    if isinstance(order, str):
        raise ArgumentTypeError(f"order must be a list of stage names, got the string {order!r}")
    stages = tuple(order)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ConfigurationError(f"unknown pipeline stage(s) {unknown}; choose from {list(STAGES)}")
    if len(set(stages)) != len(stages):
        raise ConfigurationError(f"order names a stage twice: {list(stages)}")
    missing = [s for s in stages if s not in policies]
    if missing:
        raise ConfigurationError(
            f"order names {missing} but no policy was given for them; pass "
            + ", ".join(f"{_option(s)}=..." for s in missing)
        )
    unused = [s for s in policies if s not in stages]
    if unused:
        raise ConfigurationError(
            f"policies for {unused} were given but left out of order={list(stages)}"
        )
    return stages


def _check_policy(stage: str, policy: Any) -> None:
    if stage == "timeout":
        POSITIVE_SECONDS.require("timeout_s", policy)
        return
    if not isinstance(policy, STAGES[stage]):
        expected = STAGES[stage]
        label = expected.__name__ if isinstance(expected, type) else "a number"
        raise ArgumentTypeError(f"the {stage!r} stage takes a {label}, got {type(policy).__name__}")
