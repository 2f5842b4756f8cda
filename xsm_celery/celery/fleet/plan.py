"""The fleet task options: ``fleet_rate_limit``, ``fleet_concurrency`` and ``breaker``.

::

    @xsm.task(fleet_rate_limit=RateLimit("20/s", burst=5, key=lambda customer_id, **_: customer_id),
              fleet_concurrency=Concurrency(3),          # or AIMD(initial=4, max_limit=16)
              breaker="payments")                        # app.conf.xsm_breakers["payments"]
    def charge(customer_id, amount): ...

They hold across every worker: the state is in Redis (``app.conf.xsm_redis_url``, by default
the broker's Redis when it is one). Celery's own ``rate_limit`` keeps its per-worker meaning.
This module parses and checks the options once per task class; ``admission`` applies them.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from xsm_celery.celery.fleet.limit_names import limit_name
from xsm_celery.celery.fleet.options import (
    AIMD,
    Concurrency,
    RateLimit,
    RedisDown,
    check_down,
    parse_rate,
)
from xsm_celery.celery.settings import (
    DECLARED_KEYS,
    REDIS_URL_SCHEMES,
    broker_redis_url,
)
from xsm_celery.celery.settings import (
    DEFAULT_FLEET_MAX_DEFERRAL_S as DEFAULT_MAX_DEFERRAL_S,
)
from xsm_celery.celery.settings import (
    DEFAULT_FLEET_MAX_WAIT_MS as DEFAULT_MAX_WAIT_MS,
)
from xsm_celery.celery.settings import (
    DEFAULT_FLEET_PREFIX as DEFAULT_PREFIX,
)
from xsm_celery.checks import unknown_name_message
from xsm_celery.errors import ConfigurationError

__all__ = [
    "AIMD",
    "DEFAULT_MAX_DEFERRAL_S",
    "DEFAULT_MAX_WAIT_MS",
    "Concurrency",
    "FleetPlan",
    "RateLimit",
    "RedisDown",
    "fleet_plan",
    "fleet_settings",
    "parse_rate",
]

#: The bounded fleet settings with their defaults, checked when the app's settings are read
#: (a worker with a bad value refuses to start) and again by ``fleet_settings``.
_BOUNDED: dict[str, object] = {
    "xsm_fleet_prefix": DEFAULT_PREFIX,
    "xsm_fleet_max_deferral_s": DEFAULT_MAX_DEFERRAL_S,
    "xsm_fleet_max_wait_ms": DEFAULT_MAX_WAIT_MS,
}


@dataclass(frozen=True)
class FleetSettings:
    """The app's fleet settings (``xsm_redis_url``, ``xsm_breakers`` and the bounds)."""

    redis_url: str | None
    breakers: dict[str, dict[str, Any]]
    prefix: str
    max_deferral_s: float
    max_wait_ms: float


def fleet_settings(app: Any) -> FleetSettings:
    """Read and check the fleet settings of ``app``.

    Raises:
        ConfigurationError: A setting has the wrong type or range.
    """
    from xsm_celery.celery.settings import read_settings

    read_settings(app)  # refuses unknown xsm_ keys first, with the closest name
    conf = app.conf
    url = conf.get("xsm_redis_url")
    if url is None:
        url = broker_redis_url(conf.broker_url, conf.get("broker_transport_options"))
    elif not isinstance(url, str) or not url.lower().startswith(REDIS_URL_SCHEMES):
        raise ConfigurationError(
            f"xsm_redis_url={url!r} must be a Redis URL, for example redis://127.0.0.1:6379/0, "
            "rediss://host:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/ca.pem or "
            "sentinel://h1:26379;sentinel://h2:26379/0?master_name=mymaster"
        )
    breakers = conf.get("xsm_breakers") or {}
    if not isinstance(breakers, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in breakers.items()
    ):
        raise ConfigurationError(
            f"xsm_breakers={breakers!r} must map breaker names to option dicts, for example "
            "{'payments': {'failure_threshold': 5, 'cooldown_ms': 30000}}"
        )
    return FleetSettings(
        redis_url=url,
        breakers=breakers,
        prefix=_setting(conf, "xsm_fleet_prefix"),
        max_deferral_s=_setting(conf, "xsm_fleet_max_deferral_s"),
        max_wait_ms=_setting(conf, "xsm_fleet_max_wait_ms"),
    )


def _setting(conf: Any, key: str) -> Any:
    """The checked value of a bounded fleet setting, or its default when it is unset (None).

    ``''`` and ``5`` are refused for the prefix, never read as the default or as ``"5"``.
    """
    check = DECLARED_KEYS[key]
    raw = conf.get(key)
    return _BOUNDED[key] if raw is None or check is None else check(key, raw)


class FleetPlan:
    """One task's fleet options, with the Redis objects of this process (built lazily)."""

    def __init__(
        self,
        task_name: str,
        settings: FleetSettings,
        rate: RateLimit | None,
        concurrency: Concurrency | AIMD | None,
        breaker: str | None,
    ) -> None:
        self.task_name = task_name
        self.settings = settings
        self.rate = rate
        self.concurrency = concurrency
        self.breaker_name = breaker
        #: Only ``breaker=`` is set: admission takes the allocation-free path.
        self.breaker_only = breaker is not None and rate is None and concurrency is None
        self.breaker_options: dict[str, Any] = {}
        self.breaker_down: RedisDown = "open"
        if breaker is not None:
            self.breaker_options = dict(settings.breakers.get(breaker, {}))
            self.breaker_down = check_down(
                self.breaker_options.pop("on_redis_down", "open"), f"breaker {breaker!r}"
            )
        self._lock = threading.Lock()
        self._store: Any = None
        self._limiters: OrderedDict[str, Any] = OrderedDict()
        self._breaker: Any = None
        self._records: Any = None

    def store(self) -> Any:
        """This process's ``FleetRedis`` (a fresh connection after a fork)."""
        store = self._store
        if store is None:
            with self._lock:
                if self._store is None:
                    from xsm_celery.redis.fleet_store import FleetRedis

                    assert self.settings.redis_url is not None
                    self._store = FleetRedis(self.settings.redis_url, prefix=self.settings.prefix)
                store = self._store
        return store

    def forget_connections(self) -> None:
        """Drop this process's Redis objects (in a forked child: they belong to the parent)."""
        self._store = None
        self._limiters.clear()
        self._breaker = None
        self._records = None

    def name_for(
        self, option: RateLimit | Concurrency | AIMD, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> str:
        """The limiter's name for one call: the task, a shared name, or ``task[#digest]``.

        A key computed from the arguments is shown as its digest (``limit_names``), or as
        itself when the option has ``display=True`` and the value is safe to show.
        """
        key = option.key
        if key is None:
            return self.task_name
        if isinstance(key, str):
            return key
        return limit_name(self.task_name, key(*args, **kwargs), display=option.display)

    def records(self) -> Any:
        """This process's ``AdmissionRecords``: reservations and deferral histories."""
        records = self._records
        if records is None:
            from xsm_celery.redis.admission_records import AdmissionRecords

            records = self._records = AdmissionRecords(self.store())
        return records

    def limiter(self, kind: str, name: str) -> Any:
        """The rate limiter or slot pool named ``name`` (at most 1024 kept per process)."""
        store = self.store()
        cache_key = f"{kind}\x00{name}"
        found = self._limiters.get(cache_key)
        if found is not None:
            self._limiters.move_to_end(cache_key)
            return found
        found = self._build(kind, name, store)
        with self._lock:
            self._limiters[cache_key] = found
            while len(self._limiters) > 1024:
                self._limiters.popitem(last=False)
        return found

    def _build(self, kind: str, name: str, store: Any) -> Any:
        from xsm_celery.redis.concurrency import RedisSlots
        from xsm_celery.redis.rate_limit import RedisSlidingWindow, RedisTokenBucket

        if kind == "rate":
            rate = self.rate
            assert rate is not None
            if rate.sliding:
                return RedisSlidingWindow(store, name, int(rate.count), rate.per_s)
            return RedisTokenBucket(store, name, rate.count, rate.per_s, rate.burst)
        conc = self.concurrency
        if isinstance(conc, AIMD):
            return RedisSlots(store, name, lease_s=conc.lease_s, aimd=conc.params())
        assert conc is not None
        return RedisSlots(store, name, conc.limit, lease_s=conc.lease_s)

    def breaker(self) -> Any:
        """The task's ``FleetBreaker`` in this process."""
        found = self._breaker
        if found is None:
            from xsm_celery.redis.breaker_state import FleetBreaker

            assert self.breaker_name is not None
            found = FleetBreaker(self.store(), self.breaker_name, **self.breaker_options)
            self._breaker = found
        return found


_plans: weakref.WeakKeyDictionary[Any, dict[str, FleetPlan | None]] = weakref.WeakKeyDictionary()
_plans_lock = threading.Lock()


def _after_fork() -> None:
    """A prefork child must not share its parent's Redis sockets: open its own on first use."""
    for per_app in list(_plans.values()):
        for plan in per_app.values():
            if plan is not None:
                plan.forget_connections()


os.register_at_fork(after_in_child=_after_fork)


def fleet_plan(task_cls: Any, app: Any) -> FleetPlan | None:
    """The checked fleet options of a task class, or None when it sets none (cached).

    Raises:
        ConfigurationError: An option or a fleet setting cannot work; the message says how
            to fix it.
    """
    name = str(task_cls.name)
    per_app = _plans.get(app)
    if per_app is not None and name in per_app:
        return per_app[name]
    with _plans_lock:
        plan = _build_plan(task_cls, app, name)
        _plans.setdefault(app, {})[name] = plan
    return plan


def _build_plan(task_cls: Any, app: Any, name: str) -> FleetPlan | None:
    rate = _rate_option(getattr(task_cls, "fleet_rate_limit", None), name)
    conc = _concurrency_option(getattr(task_cls, "fleet_concurrency", None), name)
    breaker = getattr(task_cls, "breaker", None)
    if rate is None and conc is None and breaker is None:
        return None
    settings = fleet_settings(app)
    if settings.redis_url is None:
        raise ConfigurationError(
            f"task {name!r} sets fleet options but there is no Redis for them: the broker is "
            f"{app.conf.broker_url!r}; set app.conf.xsm_redis_url = 'redis://host:6379/0'"
        )
    if breaker is not None:
        _check_breaker(breaker, settings, name)
    return FleetPlan(name, settings, rate, conc, breaker)


def _rate_option(value: Any, name: str) -> RateLimit | None:
    if value is None or isinstance(value, RateLimit):
        return value
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return RateLimit(value)
    raise ConfigurationError(
        f"task {name!r}: fleet_rate_limit={value!r} must be a rate such as '20/s' or "
        "RateLimit('20/s', burst=5)"
    )


def _concurrency_option(value: Any, name: str) -> Concurrency | AIMD | None:
    if value is None or isinstance(value, Concurrency | AIMD):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Concurrency(value)
    raise ConfigurationError(
        f"task {name!r}: fleet_concurrency={value!r} must be an integer, Concurrency(3) or "
        "AIMD(...)"
    )


def _check_breaker(breaker: Any, settings: FleetSettings, task: str) -> None:
    if not isinstance(breaker, str) or not breaker:
        raise ConfigurationError(
            f"task {task!r}: breaker={breaker!r} must be the name of a fleet breaker, "
            "configured in app.conf.xsm_breakers"
        )
    if settings.breakers and breaker not in settings.breakers:
        known = unknown_name_message("breaker", breaker, settings.breakers)
        raise ConfigurationError(
            f"task {task!r}: {known} (the breakers configured in app.conf.xsm_breakers)"
        )
    options = dict(settings.breakers.get(breaker, {}))
    options.pop("on_redis_down", None)
    from xsm_celery.redis.breaker_state import BREAKER_OPTIONS, check_breaker_options

    unknown = sorted(set(options) - set(BREAKER_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"xsm_breakers[{breaker!r}] has unknown options {unknown}; use "
            f"{', '.join(BREAKER_OPTIONS)} or on_redis_down"
        )
    try:
        check_breaker_options(breaker, options)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"xsm_breakers[{breaker!r}]: {exc}") from None
