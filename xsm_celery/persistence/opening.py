"""One seam turns a store setting (a URL, ``"django"``, or an object) into a store.

Every place that accepts a store (the Celery ``xsm_*_store`` settings, a workflow's
``store=``, the CLI's ``--dlq``) calls ``open_store(value, kind)``. A URL goes to the opener
registered for its scheme and kind; an object is checked for the methods its kind needs and
returned as it is. Integrations register their schemes with ``register_scheme``.

The package's own schemes are registered lazily, the way SQLAlchemy loads a dialect by name:
the first URL with a built-in scheme imports the integration module that registers it
(``sqlite``, ``postgresql``, ``postgres``: ``xsm_celery.sqlalchemy.opening``; ``redis``,
``rediss``, ``unix``, ``sentinel``: ``xsm_celery.redis.opening``; ``django``:
``xsm_celery.django.stores.opening``; ``memory``: ``xsm_celery.persistence.memory_opening``,
and ``xsm_celery.eda.opening`` for dead letters). So the core imports no optional
package, a missing one is a ``MissingExtraError`` naming its extra, and checking a setting
(``schemes_for``, ``methods_for``) imports nothing at all.

Kinds: ``snapshots`` (``StateStore``), ``inbox`` (``Inbox``), ``timers`` (``TimerStore``),
``markers`` (``AttemptMarkers``), ``workflow`` (the ``WorkflowStores`` a workflow writes in
one transaction, which a store object yields through its own ``workflow_family()``), and
``outbox`` and ``dead_letters``, whose protocols belong to the layers above: ``open_store``
returns those as ``object``, and ``xsm_celery.eda.opening`` gives them their types
(``open_outbox``, ``open_dead_letters``).
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack, get_args, overload

from xsm_celery.errors import ConfigurationError, MissingExtraError
from xsm_celery.persistence.family import WorkflowFamilySource, WorkflowStores, memory_family
from xsm_celery.persistence.markers import DEFAULT_MARKER_TTL_S, AttemptMarkers
from xsm_celery.persistence.memory import MemoryStore
from xsm_celery.persistence.protocols import Inbox, StateStore, TimerStore

__all__ = [
    "KINDS",
    "OpenOptions",
    "Opener",
    "StoreKind",
    "StoreRequest",
    "methods_for",
    "open_store",
    "register_scheme",
    "scheme_of",
    "schemes_for",
]

StoreKind = Literal["snapshots", "inbox", "outbox", "timers", "dead_letters", "markers", "workflow"]

#: Every kind of store, in the order of ``StoreKind``.
KINDS: tuple[StoreKind, ...] = get_args(StoreKind)


@dataclass(frozen=True)
class StoreRequest:
    """What an opener is asked to open: a URL, for one kind of store, named by one setting."""

    #: The URL, stripped of surrounding blanks (``"django"`` stays as it is).
    url: str
    kind: StoreKind
    #: Who named the store (``xsm_timer_store``, ``--dlq``), for error messages.
    setting: str = "store"
    #: Seconds an attempt marker lives (kind ``markers``).
    marker_ttl_s: float = DEFAULT_MARKER_TTL_S
    #: Open only a store that exists: create no file and no table (a reader such as the CLI).
    existing_only: bool = False

    @property
    def scheme(self) -> str:
        """The URL's scheme, without a ``+driver`` suffix."""
        return scheme_of(self.url)


class OpenOptions(TypedDict, total=False):
    """The keyword arguments of ``open_store``, as ``StoreRequest`` fields."""

    setting: str
    marker_ttl_s: float
    existing_only: bool


#: Opens the store a ``StoreRequest`` names; returns an object of the request's kind.
Opener = Callable[[StoreRequest], object]

_ALL = frozenset(KINDS)
_SQL = "xsm_celery.sqlalchemy.opening"
_REDIS = "xsm_celery.redis.opening"

#: The package's own openers: a scheme, the module that registers it when imported, and the
#: kinds it serves there. Messages list a kind's schemes in this order, then others'.
_BUILTIN: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("redis", _REDIS, frozenset({"markers", "inbox"})),
    ("rediss", _REDIS, frozenset({"markers", "inbox"})),
    ("unix", _REDIS, frozenset({"markers", "inbox"})),
    ("sentinel", _REDIS, frozenset({"markers", "inbox"})),
    (
        "memory",
        "xsm_celery.persistence.memory_opening",
        frozenset({"snapshots", "inbox", "markers", "workflow"}),
    ),
    # Dead letters and their memory store belong to the layers above (patterns, eda).
    ("memory", "xsm_celery.eda.opening", frozenset({"dead_letters"})),
    ("sqlite", _SQL, _ALL),
    ("postgresql", _SQL, _ALL),
    ("postgres", _SQL, _ALL),
    ("django", "xsm_celery.django.stores.opening", _ALL - {"markers"}),
)
_BUILTIN_SCHEMES = frozenset(scheme for scheme, _, _ in _BUILTIN)

#: The methods a store object given instead of a URL must have, per kind.
_METHODS: dict[StoreKind, tuple[str, ...]] = {
    "snapshots": ("load", "save", "lock"),
    "inbox": ("get", "claim", "mark", "release"),
    "outbox": ("add", "pending", "mark_sent"),
    "timers": ("schedule", "claim", "delete"),
    "dead_letters": ("put",),
    "markers": ("mark", "started"),
    "workflow": ("load", "save", "lock"),
}

_NOUNS: dict[StoreKind, str] = {
    "snapshots": "snapshot store",
    "inbox": "inbox",
    "outbox": "outbox store",
    "timers": "timer store",
    "dead_letters": "dead-letter store",
    "markers": "attempt-marker store",
    "workflow": "workflow store",
}

_EXAMPLES: dict[StoreKind, str] = {
    "snapshots": "sqlite:///xsm_celery.db",
    "inbox": "sqlite:///xsm_celery.db",
    "outbox": "postgresql://user@host/db",
    "timers": "postgresql://user@host/db",
    "dead_letters": "sqlite:///dead_letters.db",
    "markers": "redis://127.0.0.1:6379/0",
    "workflow": "sqlite:///orders.db",
}

_openers: dict[tuple[str, str], Opener] = {}
_registered: list[str] = []
_lock = threading.Lock()


def register_scheme(
    scheme: str, opener: Opener, *, kinds: Iterable[StoreKind], replace: bool = True
) -> None:
    """Make URLs with ``scheme`` open through ``opener`` for each of ``kinds``.

    A later registration of the same scheme and kind replaces the earlier one, so a project
    may serve a built-in scheme its own way. The package's own modules register with
    ``replace=False``, so a project's opener wins whether it was registered first or last.

    Raises:
        ConfigurationError: an unknown kind, or a scheme that is not a URL scheme.
    """
    name = scheme.lower()
    if not re.fullmatch(r"[a-z][a-z0-9.\-]*", name):
        raise ConfigurationError(
            f"register_scheme({scheme!r}): a scheme is letters, digits, '.' or '-', starting "
            "with a letter (no '://' and no '+driver')"
        )
    wanted = tuple(kinds)
    unknown = sorted(set(wanted) - _ALL)
    if unknown or not wanted:
        raise ConfigurationError(
            f"register_scheme({scheme!r}) got kinds {wanted!r}; give one or more of "
            f"{', '.join(KINDS)}"
        )
    with _lock:
        for kind in wanted:
            if replace or (name, kind) not in _openers:
                _openers[name, kind] = opener
        if name not in _BUILTIN_SCHEMES and name not in _registered:
            _registered.append(name)


def schemes_for(kind: StoreKind) -> tuple[str, ...]:
    """The URL schemes a store of ``kind`` may be named by, without importing anything."""
    builtin = [scheme for scheme, _, kinds in _BUILTIN if kind in kinds]
    others = [s for s in _registered if (s, kind) in _openers]
    overriding = [s for s in _BUILTIN_SCHEMES - set(builtin) if (s, kind) in _openers]
    return tuple(dict.fromkeys([*builtin, *sorted(overriding), *others]))


def methods_for(kind: StoreKind) -> tuple[str, ...]:
    """The methods a store object of ``kind`` must have when given instead of a URL."""
    return _METHODS[kind]


def scheme_of(value: str) -> str:
    """The scheme of a store URL, lower-case and without ``+driver``; ``""`` when it has none.

    The bare value ``"django"`` is the ``django`` scheme (the Django app's default database).
    """
    text = value.strip()
    if text == "django":
        return "django"
    if "://" not in text:
        return ""
    return text.split("://", 1)[0].split("+", 1)[0].lower()


@overload
def open_store(
    value: object, kind: Literal["snapshots"], **options: Unpack[OpenOptions]
) -> StateStore: ...
@overload
def open_store(value: object, kind: Literal["inbox"], **options: Unpack[OpenOptions]) -> Inbox: ...
@overload
def open_store(
    value: object, kind: Literal["timers"], **options: Unpack[OpenOptions]
) -> TimerStore: ...
@overload
def open_store(
    value: object, kind: Literal["outbox", "dead_letters"], **options: Unpack[OpenOptions]
) -> object: ...
@overload
def open_store(
    value: object, kind: Literal["markers"], **options: Unpack[OpenOptions]
) -> AttemptMarkers: ...
@overload
def open_store(
    value: object, kind: Literal["workflow"], **options: Unpack[OpenOptions]
) -> WorkflowStores: ...
def open_store(value: object, kind: StoreKind, **options: Unpack[OpenOptions]) -> object:
    """The store of ``kind`` that ``value`` names (see the module docstring).

    Args:
        value: A URL (``sqlite:///x.db``, ``postgresql://...``, ``redis://...``,
            ``memory://``, ``"django"`` or ``django://<alias>``) or a store object.
        kind: Which kind of store is wanted.
        setting: Who named it (a setting key, a CLI option), for error messages.
        marker_ttl_s: Seconds an attempt marker lives (kind ``markers``).
        existing_only: Open an existing store only; never create its file or tables.

    Raises:
        ConfigurationError: a scheme no opener serves for ``kind`` (the message lists the
            accepted ones), or an object without the methods of ``kind``.
        MissingExtraError: the integration serving the scheme needs an extra not installed.
    """
    if not isinstance(value, str):
        return _from_object(value, kind, options.get("setting", "store"))
    request = StoreRequest(url=value.strip(), kind=kind, **options)
    return _opener(request)(request)


def _opener(request: StoreRequest) -> Opener:
    scheme, kind = request.scheme, request.kind
    opener = _openers.get((scheme, kind))
    if opener is None:
        for module in [m for s, m, kinds in _BUILTIN if s == scheme and kind in kinds]:
            _load(module, request)
            opener = _openers.get((scheme, kind))
    if opener is None:
        raise ConfigurationError(
            f"unsupported {_NOUNS[kind]} URL {_masked(request.url)!r} ({request.setting}); "
            f"use {_accepted(kind)} (for example {_EXAMPLES[kind]}) or a store object"
        )
    return opener


def _load(module: str, request: StoreRequest) -> None:
    """Import the integration module that registers a built-in scheme."""
    try:
        importlib.import_module(module)
    except MissingExtraError as exc:
        raise MissingExtraError(
            extra=exc.extra,
            module=exc.module,
            hint=f"{request.setting}={_masked(request.url)!r} needs it",
        ) from exc


def _accepted(kind: StoreKind) -> str:
    return ", ".join("'django'" if s == "django" else f"{s}://" for s in schemes_for(kind))


def _masked(url: str) -> str:
    """``url`` with its password hidden, for messages."""
    return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", url)


def _from_object(value: object, kind: StoreKind, setting: str) -> object:
    if kind == "workflow":
        return _family(value, setting)
    missing = [m for m in _METHODS[kind] if not callable(getattr(value, m, None))]
    if missing:
        noun = _NOUNS[kind]
        article = "an" if noun[0] in "aeiou" else "a"
        raise ConfigurationError(
            f"{setting}={value!r} is not {article} {noun}: it has no "
            f"{', '.join(m + '()' for m in missing)}; give one, or a URL such as "
            f"{_EXAMPLES[kind]}"
        )
    return value


def _family(value: object, setting: str) -> WorkflowStores:
    """The ``WorkflowStores`` of a store object: its own family, or the memory one."""
    if isinstance(value, WorkflowStores):
        return value
    if isinstance(value, WorkflowFamilySource):
        return value.workflow_family()
    if isinstance(value, MemoryStore):
        return memory_family(value, repr(value))
    if all(callable(getattr(value, m, None)) for m in _METHODS["workflow"]):
        raise ConfigurationError(
            f"{setting} {value!r} is a StateStore that offers no workflow_family(), so its "
            "inbox and timers cannot share its transaction; pass WorkflowStores(snapshots=..., "
            "inbox=..., timers=...) instead"
        )
    raise ConfigurationError(
        f"{setting} {value!r} is not a StateStore or a store URL; give 'django', "
        "'postgresql://user@host/db', 'sqlite:///orders.db', 'memory://' or a StateStore"
    )
