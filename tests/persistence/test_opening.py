"""The store seam: schemes registered by integrations, objects checked, memory stores opened."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from xsm_celery.errors import ConfigurationError
from xsm_celery.persistence import MemoryInbox, MemoryStore, MemoryTimerStore, SQLiteStore, opening
from xsm_celery.persistence.family import MemoryJournal, WorkflowStores
from xsm_celery.persistence.markers import MemoryAttemptMarkers
from xsm_celery.persistence.opening import (
    KINDS,
    StoreRequest,
    methods_for,
    open_store,
    register_scheme,
    scheme_of,
    schemes_for,
)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by the test are forgotten after it."""
    monkeypatch.setattr(opening, "_openers", dict(opening._openers))
    monkeypatch.setattr(opening, "_registered", list(opening._registered))


def test_a_registered_scheme_opens_through_its_opener(registry: None) -> None:
    """register_scheme routes a URL of that scheme and kind to the opener, with the request."""
    seen: list[StoreRequest] = []
    markers = MemoryAttemptMarkers()

    def opener(request: StoreRequest) -> object:
        seen.append(request)
        return markers

    register_scheme("acme", opener, kinds=["markers"])
    opened = open_store(
        " acme+fast://h/1 ", "markers", setting="xsm_attempt_markers", marker_ttl_s=90
    )
    assert opened is markers
    assert seen == [StoreRequest("acme+fast://h/1", "markers", "xsm_attempt_markers", 90.0)]
    assert seen[0].scheme == "acme"
    assert schemes_for("markers")[-1] == "acme"
    assert "acme" not in schemes_for("timers")


def test_a_registered_scheme_serves_only_its_kinds(registry: None) -> None:
    """A scheme registered for markers is an unsupported URL for a timer store."""
    register_scheme("acme", lambda r: MemoryAttemptMarkers(), kinds=["markers"])
    with pytest.raises(ConfigurationError, match="unsupported timer store URL 'acme://h'"):
        open_store("acme://h", "timers", setting="xsm_timer_store")


def test_a_project_may_serve_a_builtin_scheme_its_own_way(registry: None) -> None:
    """A later registration of a built-in scheme and kind replaces the package's opener."""
    mine = MemoryStore()
    register_scheme("memory", lambda r: mine, kinds=["snapshots"])
    assert open_store("memory://", "snapshots") is mine


@pytest.mark.parametrize(
    ("scheme", "kinds", "message"),
    [
        ("acme://", ["markers"], "a scheme is letters"),
        ("acme+x", ["markers"], "a scheme is letters"),
        ("acme", ["bogus"], "give one or more of snapshots, inbox"),
        ("acme", [], "give one or more of"),
    ],
)
def test_a_bad_registration_is_refused(
    registry: None, scheme: str, kinds: list[Any], message: str
) -> None:
    """A scheme with '://' or '+driver', or an unknown or empty kind list, is refused."""
    with pytest.raises(ConfigurationError, match=message):
        register_scheme(scheme, lambda r: None, kinds=kinds)


def test_an_unknown_scheme_names_the_accepted_ones_and_an_example() -> None:
    """The refusal names the setting, the URL (password hidden), every scheme and an example."""
    with pytest.raises(ConfigurationError) as caught:
        open_store("mongodb://app:hunter2@db/x", "dead_letters", setting="xsm_dead_letter_store")
    message = str(caught.value)
    assert "unsupported dead-letter store URL 'mongodb://app:***@db/x'" in message
    assert "(xsm_dead_letter_store)" in message
    assert "memory://, sqlite://, postgresql://, postgres://, 'django'" in message
    assert "for example sqlite:///dead_letters.db" in message
    assert "hunter2" not in message


@pytest.mark.parametrize("value", ["dead_letters.db", "", "django-ish", "://x"])
def test_a_value_without_a_scheme_is_refused(value: str) -> None:
    """A bare path or an empty string is no URL at all."""
    with pytest.raises(ConfigurationError, match="unsupported timer store URL"):
        open_store(value, "timers")


def test_a_scheme_a_kind_does_not_take_is_refused_without_importing_anything() -> None:
    """Timers are never in memory, markers never in Django: refused before any import."""
    with pytest.raises(ConfigurationError, match="use sqlite://, postgresql://"):
        open_store("memory://", "timers", setting="xsm_timer_store")
    with pytest.raises(ConfigurationError, match="unsupported attempt-marker store URL"):
        open_store("django", "markers", setting="xsm_attempt_markers")


def test_an_object_with_the_kinds_methods_is_returned_as_is() -> None:
    """A store object is checked, not wrapped."""
    timers = MemoryTimerStore()
    assert open_store(timers, "timers") is timers
    inbox = MemoryInbox()
    assert open_store(inbox, "inbox") is inbox


def test_an_object_missing_methods_is_refused_naming_them() -> None:
    """The refusal lists every missing method and gives an example URL."""

    class HalfTimers:
        def schedule(self, key: str, due_at: float, payload: dict[str, Any]) -> str:
            return "t"

    with pytest.raises(ConfigurationError) as caught:
        open_store(HalfTimers(), "timers", setting="xsm_timer_store")
    message = str(caught.value)
    assert message.startswith("xsm_timer_store=<")
    assert "is not a timer store: it has no claim(), delete()" in message
    assert "postgresql://user@host/db" in message
    with pytest.raises(ConfigurationError, match="is not an attempt-marker store"):
        open_store(42, "markers", setting="xsm_attempt_markers")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_names_its_schemes_and_methods(kind: Any) -> None:
    """Each kind has schemes and object methods; SQL URLs serve every kind."""
    assert "sqlite" in schemes_for(kind)
    assert methods_for(kind)


def test_the_builtin_schemes_each_kind_accepts() -> None:
    """The tables setting checks print, in the order they print them."""
    assert schemes_for("dead_letters") == ("memory", "sqlite", "postgresql", "postgres", "django")
    assert schemes_for("timers") == ("sqlite", "postgresql", "postgres", "django")
    assert schemes_for("outbox") == ("sqlite", "postgresql", "postgres", "django")
    assert schemes_for("markers") == (
        "redis",
        "rediss",
        "unix",
        "sentinel",
        "memory",
        "sqlite",
        "postgresql",
        "postgres",
    )
    assert methods_for("dead_letters") == ("put",)
    assert methods_for("markers") == ("mark", "started")


@pytest.mark.parametrize(
    ("value", "scheme"),
    [
        ("django", "django"),
        (" django ", "django"),
        ("django://replica", "django"),
        ("postgresql+psycopg://u@h/db", "postgresql"),
        ("SQLite:///x.db", "sqlite"),
        ("rediss://cache:6380/2", "rediss"),
        ("dead_letters.db", ""),
        ("djangox", ""),
    ],
)
def test_scheme_of(value: str, scheme: str) -> None:
    """The scheme, lower-case, without a driver; bare "django" is the django scheme."""
    assert scheme_of(value) == scheme


class TestMemoryScheme:
    """memory:// opens the in-process store of each kind this layer serves (dead letters:
    tests/eda/test_opening.py)."""

    def test_each_kind_opens_its_memory_class(self) -> None:
        """Snapshots, inbox and markers are the memory implementations."""
        assert isinstance(open_store("memory://", "snapshots"), MemoryStore)
        assert isinstance(open_store("memory://", "inbox"), MemoryInbox)
        assert isinstance(open_store("memory://", "markers"), MemoryAttemptMarkers)

    def test_other_kinds_are_fresh_per_opening(self) -> None:
        """Two workflows (or two tests) on memory:// never share instances."""
        first = open_store("memory://", "workflow")
        second = open_store("memory://", "workflow")
        assert first.snapshots is not second.snapshots
        assert isinstance(first.snapshots, MemoryStore)
        assert isinstance(first.inbox, MemoryInbox)
        assert isinstance(first.timers, MemoryTimerStore)
        assert isinstance(first.journal, MemoryJournal)
        assert first.outbox is None
        assert open_store("memory://", "markers") is not open_store("memory://", "markers")


class TestWorkflowObjects:
    """A store object yields its workflow family by its own method, never by its module."""

    def test_workflow_stores_are_used_whole(self) -> None:
        """WorkflowStores(...) given by the user is taken as it is."""
        given = WorkflowStores(MemoryStore(), MemoryInbox(), MemoryTimerStore())
        assert open_store(given, "workflow") is given

    def test_a_memory_store_gets_in_process_siblings(self) -> None:
        """A MemoryStore object becomes the snapshot store of a memory family."""
        store = MemoryStore()
        family = open_store(store, "workflow")
        assert family.snapshots is store
        assert isinstance(family.journal, MemoryJournal)

    def test_a_store_offering_workflow_family_builds_its_own(self) -> None:
        """Any object with workflow_family() is asked for its family, whatever its module."""
        family = WorkflowStores(MemoryStore(), MemoryInbox(), MemoryTimerStore())

        class Offering(MemoryStore):
            def workflow_family(self) -> WorkflowStores:
                return family

        assert open_store(Offering(), "workflow") is family

    def test_a_state_store_without_a_family_is_refused(self, tmp_path: Any) -> None:
        """Its inbox and timers could not share its transaction, so WorkflowStores is asked."""
        store = SQLiteStore(tmp_path / "s.db")
        with pytest.raises(ConfigurationError, match=r"offers no workflow_family\(\)"):
            open_store(store, "workflow", setting="the workflow's store")

    def test_something_else_is_refused_with_the_accepted_forms(self) -> None:
        """Not a store at all: the message lists what a workflow's store may be."""
        with pytest.raises(ConfigurationError, match="is not a StateStore or a store URL"):
            open_store(42, "workflow", setting="the workflow's store")


def _run_blocked(blocked: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing ``blocked`` packages fails."""
    script = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {blocked!r}:
                    raise ImportError("blocked: " + name)
                return None
        sys.meta_path.insert(0, Block())
        """
    ) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )


def test_checking_schemes_imports_no_integration() -> None:
    """schemes_for and a refusal need neither SQLAlchemy, Redis nor Django."""
    result = _run_blocked(
        ("sqlalchemy", "redis", "django", "celery"),
        """
        from xsm_celery.persistence.opening import open_store, schemes_for
        assert "django" in schemes_for("timers")
        try:
            open_store("ftp://x", "timers")
        except Exception as exc:
            assert type(exc).__name__ == "ConfigurationError", exc
        assert not any(m.startswith(("xsm_celery.sqlalchemy", "xsm_celery.redis",
                                     "xsm_celery.django")) for m in sys.modules)
        """,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("url", "extra"),
    [("sqlite:///x.db", "sqlalchemy"), ("redis://h/0", "redis"), ("django", "django")],
)
def test_a_missing_extra_names_it_and_the_setting(url: str, extra: str) -> None:
    """Without the integration's package, the error says which extra to install and why."""
    result = _run_blocked(
        (extra,),
        f"""
        from xsm_celery.errors import MissingExtraError
        from xsm_celery.persistence.opening import open_store
        try:
            open_store({url!r}, "markers" if {extra!r} == "redis" else "timers",
                       setting="xsm_some_store")
        except MissingExtraError as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    assert f'pip install "xsm-celery[{extra}]"' in result.stdout
    assert f"xsm_some_store={url!r} needs it" in result.stdout
