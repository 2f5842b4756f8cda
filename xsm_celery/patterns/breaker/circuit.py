"""``CircuitBreaker``: the breaker chart on a ``SyncInterpreter`` behind one re-entrant lock.

Because the chart owns the state, the half-open race (two callers both believing they are
the probe) is settled by a guarded transition taken inside the lock, so exactly the
configured number of probes runs however many threads arrive at once. The target itself
always runs outside the lock.

Every admission carries a window token, bumped whenever the chart changes state or an
operator resets it; an outcome that reports under an older token is dropped, so a slow
call admitted while closed can neither close a half-open circuit nor re-open it later.

Two costs are kept off the common path. While the circuit is closed, admitting a call and
recording a success that changes nothing (no failures counted, no rate window) read two
fields and take no lock and no chart step: under eight threads a lock taken twice per call
convoys behind the GIL and costs several microseconds. Every decision that changes
something (a failure, a probe, a trip) still happens under the lock, as a chart step; the
token makes the lock-free reads safe (see ``_admit``). And the cooldown needs no timer
thread: the chart's ``after`` timer fires when the breaker is asked for its state or for a
call, so an idle open breaker half-opens on the next request.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, ParamSpec, TypeVar, overload

from xsm_celery.checks import BREAKER_COUNT, BREAKER_FAILURE_RATE
from xsm_celery.engine import Clock, SyncInterpreter, WallClock, create_machine
from xsm_celery.errors import (
    ArgumentTypeError,
    CircuitOpenError,
    ConfigurationError,
    InterpreterStoppedError,
)
from xsm_celery.hooks import FactKind, emit
from xsm_celery.patterns.breaker.chart import (
    CIRCUIT_BREAKER_CONFIG,
    check_cooldown,
    circuit_breaker_logic,
    record_outcome,
)
from xsm_celery.patterns.wrapping import wrap_calls

__all__ = ["CircuitBreaker", "CircuitState", "circuit_breaker"]

P = ParamSpec("P")
T = TypeVar("T")

CircuitState = Literal["closed", "open", "half_open"]

#: Exceptions that mean "stop", not "the dependency failed": never counted, always re-raised.
_NEVER_COUNTED = (KeyboardInterrupt, SystemExit, GeneratorExit, asyncio.CancelledError)


def _rate(value: object) -> float | None:
    if value is None:
        return None
    return BREAKER_FAILURE_RATE.check("failure_rate_threshold", value)


def _exception_classes(value: object) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, tuple) else (value,)
    if not items or not all(isinstance(i, type) and issubclass(i, BaseException) for i in items):
        raise ArgumentTypeError(f"exceptions must be exception classes, got {value!r}")
    return items


class CircuitBreaker:
    """Fail fast while a dependency is down, and probe it before trusting it again.

    Args:
        failure_threshold: Consecutive failures that open the circuit.
        cooldown_ms: Time open before probes are admitted (``checks.BREAKER_COOLDOWN_MS``:
            0 to a day).
        half_open_max_calls: Probes in flight at once while half-open.
        clock: The engine clock; a ``SimulatedClock`` in tests, wall time by default.
        plugins: Attached to the internal interpreter (a ``LoggingInspector`` logs trips).
        name: Shown in ``CircuitOpenError``; the chart's id, ``circuitBreaker`` by default.
        exceptions: What counts as a failure; anything else propagates untouched.
        success_threshold: Probe successes in a row that close the circuit (default:
            ``half_open_max_calls``, so every admitted probe must succeed).
        failure_rate_threshold: Also open when the failure rate over the last
            ``window_size`` closed-state calls reaches this rate (None: off).
        window_size: Outcomes the rate is computed over; the rate is judged once the
            window is full.

    Raises:
        ValueError: A number is outside its range in ``xsm_celery.checks``
            (``BREAKER_COUNT`` for the counts, 1 to 10000); the message names the argument
            and the range.
        TypeError: ``exceptions`` holds something that is not an exception class.
    """

    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown_ms: float = 30_000,
        half_open_max_calls: int = 1,
        *,
        clock: Clock | None = None,
        plugins: Iterable[Any] = (),
        name: str | None = None,
        exceptions: type[BaseException] | tuple[type[BaseException], ...] = (Exception,),
        success_threshold: int | None = None,
        failure_rate_threshold: float | None = None,
        window_size: int = 20,
    ) -> None:
        max_calls = BREAKER_COUNT.check_int("half_open_max_calls", half_open_max_calls)
        config = copy.deepcopy(CIRCUIT_BREAKER_CONFIG)
        config["context"].update(
            failure_threshold=BREAKER_COUNT.check_int("failure_threshold", failure_threshold),
            half_open_max_calls=max_calls,
            success_threshold=max_calls
            if success_threshold is None
            else BREAKER_COUNT.check_int("success_threshold", success_threshold),
            failure_rate_threshold=_rate(failure_rate_threshold),
            window_size=BREAKER_COUNT.check_int("window_size", window_size),
        )
        if name is not None:
            if not isinstance(name, str) or not name:
                raise ConfigurationError(f"name must be a non-empty string, got {name!r}")
            config["id"] = name
        self.name: str = config["id"]
        self.cooldown_ms = check_cooldown(cooldown_ms)
        self.exceptions = _exception_classes(exceptions)
        self._clock: Clock = WallClock() if clock is None else clock
        machine = create_machine(config, logic=circuit_breaker_logic(self.cooldown_ms))
        self._interp: SyncInterpreter = SyncInterpreter(machine, clock=self._clock)
        for plugin in plugins:
            self._interp.use(plugin)
        self._lock = threading.RLock()
        self._stepping = False
        self._stopped = False
        self._token = 0
        self._leaf: CircuitState = "closed"
        self._quiet = failure_rate_threshold is None
        self._opened_at = 0.0
        self._interp.start()

    @classmethod
    def sensitive(cls, **overrides: Any) -> CircuitBreaker:
        """Trip early for a dependency whose failures hurt: 3 failures, 30 s before probing."""
        options: dict[str, Any] = {"failure_threshold": 3, "cooldown_ms": 30_000}
        return cls(**{**options, **overrides})

    @classmethod
    def tolerant(cls, **overrides: Any) -> CircuitBreaker:
        """Ride out a flaky dependency: 10 failures to trip, 120 s before probing."""
        options: dict[str, Any] = {"failure_threshold": 10, "cooldown_ms": 120_000}
        return cls(**{**options, **overrides})

    @property
    def state(self) -> CircuitState:
        """``"closed"``, ``"open"`` or ``"half_open"``; an elapsed cooldown is applied first."""
        with self._lock:
            if not self._stopped and not self._stepping and self._leaf == "open":
                self._step(None)
            return self._leaf

    @property
    def failures(self) -> int:
        """Consecutive failures counted since the circuit last closed or succeeded."""
        with self._lock:
            return int(self._interp.context["failures"])

    @property
    def opened_count(self) -> int:
        """How many times the circuit has opened, over the breaker's whole life."""
        with self._lock:
            return int(self._interp.context["opened_count"])

    @property
    def generation(self) -> int:
        """The window token: bumped on every change of state and every reset."""
        return self._token

    @property
    def retry_after_ms(self) -> float | None:
        """Time left in the cooldown while open, else None."""
        with self._lock:
            return self._retry_after()

    @property
    def interpreter(self) -> SyncInterpreter:
        """The internal interpreter, for snapshots and inspection (do not send to it)."""
        return self._interp

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` if the circuit admits it, record the outcome, re-raise its error.

        Raises:
            CircuitOpenError: The circuit refused the call; ``fn`` did not run.
            InterpreterStoppedError: The breaker was closed with ``close()``.
        """
        token = self._admit()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self._record_error(token, exc)
            raise
        self._record_success(token)
        return result

    async def acall(
        self, fn: Callable[P, Awaitable[T] | T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Like ``call``, awaiting ``fn``'s result when it is awaitable.

        The bookkeeping is the same synchronous, lock-guarded code as ``call``, so one
        breaker can be shared by asyncio tasks and threads at once.
        """
        token = self._admit()
        try:
            result = fn(*args, **kwargs)
            if isinstance(result, Awaitable):
                result = await result
        except BaseException as exc:
            self._record_error(token, exc)
            raise
        self._record_success(token)
        return result

    def admit(self) -> int:
        """Admit one call whose outcome the caller reports; returns its window token.

        For code that cannot hand the breaker a callable (a task whose body runs later,
        a backend): pass the token to ``record`` when the call ends, or to ``release``
        when it ended without an outcome worth counting.

        Raises:
            CircuitOpenError: The circuit refused the call.
            InterpreterStoppedError: The breaker was closed with ``close()``.
        """
        return self._admit()

    def record(self, token: int, error: BaseException | None = None) -> None:
        """Report the outcome of a call admitted under ``token``: success when ``error`` is None.

        An error that is not one of ``exceptions`` is not counted (a probe's slot is
        freed); a stale token is ignored, as for ``call``.
        """
        if error is None:
            self._record_success(token)
        else:
            self._record_error(token, error)

    def release(self, token: int) -> None:
        """Free the probe slot of a call admitted under ``token`` without counting anything."""
        with self._lock:
            if token == self._token and self._leaf == "half_open":
                self._step("RELEASE")

    def reset(self) -> None:
        """Operator override: close the circuit now; outcomes still in flight are ignored."""
        with self._lock:
            self._check_running()
            self._token += 1
            self._step("RESET")

    def close(self) -> None:
        """Stop the internal interpreter; later calls raise ``InterpreterStoppedError``."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._token += 1
                self._interp.stop()

    def _admit(self) -> int:
        """Decide whether one call may run; return the token of the window admitting it.

        While closed this reads the token, then the state, without the lock. ``_step``
        writes them in the other order, so a racing trip can only hand this call an old
        token, whose outcome is then dropped: the call counts as admitted just before it.
        """
        token = self._token
        if self._leaf == "closed" and not self._stopped:
            return token
        with self._lock:
            self._check_running()
            self._step(None)
            if self._leaf == "closed":
                return self._token
            if self._leaf == "half_open" and self._take_probe():
                return self._token
            raise CircuitOpenError(self.name, self._leaf, retry_after_ms=self._retry_after())

    def _take_probe(self) -> bool:
        before = self._interp.context["probes_in_flight"]
        self._step("PROBE")
        return bool(self._leaf == "half_open" and self._interp.context["probes_in_flight"] > before)

    def _record_success(self, token: int) -> None:
        if token == self._token and self._quiet:
            return  # closed, nothing counted: a success changes nothing
        with self._lock:
            if token != self._token:
                return
            ctx = self._interp.context
            if self._leaf == "closed" and ctx["failures"] == 0:
                record_outcome(ctx, failed=False)
            else:
                self._step("SUCCESS")

    def _record_error(self, token: int, exc: BaseException) -> None:
        counted = isinstance(exc, self.exceptions) and not isinstance(exc, _NEVER_COUNTED)
        if not counted and self._leaf == "closed":
            return
        with self._lock:
            if token != self._token:
                return
            if counted:
                self._step("FAILURE")
            elif self._leaf == "half_open":
                self._step("RELEASE")

    def _step(self, event: str | None) -> None:
        """Send ``event`` (or only tick when None) and note any change of state.

        Runs under the lock. A plugin reading ``state`` from inside the step re-enters
        the lock; ``_stepping`` makes that read return without stepping again.
        """
        self._stepping = True
        try:
            if event is None:
                self._interp.tick()
            else:
                self._interp.send(event)
        finally:
            self._stepping = False
        leaf = self._read_leaf()
        if leaf != self._leaf:
            previous = self._leaf
            # State before token: see _admit for why readers rely on this order.
            self._leaf = leaf
            self._token += 1
            if leaf == "open":
                self._opened_at = float(self._clock.now())
            emit(
                FactKind.BREAKER_TRANSITION,
                breaker=self.name,
                from_state=previous,
                to_state=leaf,
                reason=event.lower() if event else "cooldown",
                scope="process",
            )
        ctx = self._interp.context
        self._quiet = (
            leaf == "closed" and ctx["failures"] == 0 and ctx["failure_rate_threshold"] is None
        )

    def _read_leaf(self) -> CircuitState:
        for state_id in self._interp.current_state_ids:
            leaf = state_id.rsplit(".", 1)[-1]
            if leaf in ("closed", "open", "half_open"):
                return leaf  # type: ignore[return-value]
        return self._leaf

    def _retry_after(self) -> float | None:
        if self._leaf != "open":
            return None
        return max(0.0, self._opened_at + self.cooldown_ms - float(self._clock.now()))

    def _check_running(self) -> None:
        if self._stopped:
            raise InterpreterStoppedError(
                f"circuit breaker '{self.name}' was closed with close(); the call was "
                "rejected without running the target; create a new breaker"
            )


@overload
def circuit_breaker(fn: Callable[P, T], /) -> Callable[P, T]: ...


@overload
def circuit_breaker(
    fn: None = None, /, **options: Any
) -> Callable[[Callable[P, T]], Callable[P, T]]: ...


def circuit_breaker(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Give a function its own ``CircuitBreaker``, exposed as ``fn.breaker``.

    ``@circuit_breaker(failure_threshold=3, cooldown_ms=5_000)`` (or bare
    ``@circuit_breaker``) works on plain and ``async def`` functions. The breaker is named
    after the function unless ``name=`` is given; one decorator object applied to two
    functions gives two breakers with two names.

    On a method the breaker belongs to the function, so every instance of the class
    shares it; build a ``CircuitBreaker`` per instance when that is not what you want.

    Raises:
        TypeError: ``fn`` is a generator or async generator function, whose body runs
            after the call returns, too late for the breaker to see its outcome.
    """
    if fn is not None:
        return _decorate(fn, options)
    return functools.partial(_decorate, options=options)


def _decorate(fn: Callable[P, T], options: dict[str, Any]) -> Callable[P, T]:
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ArgumentTypeError(
            f"circuit_breaker cannot wrap the generator function {fn.__qualname__!r}: its "
            "body runs after the call returns, so the outcome is unknown; wrap the code "
            "that consumes it instead"
        )
    breaker = CircuitBreaker(**{"name": fn.__qualname__, **options})
    return wrap_calls(fn, breaker.call, breaker.acall, breaker=breaker)
