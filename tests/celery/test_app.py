"""Xsm(app): the task sugar, the Django variant, redaction of arguments in dead letters."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Iterator

import pytest
from celery import Celery

from xsm_celery.celery import ChartTask, Xsm
from xsm_celery.celery.deadletter.writer import redact_arguments
from xsm_celery.celery.task.django_task import DjangoChartTask
from xsm_celery.patterns import RetryPolicy
from xsm_celery.sqlalchemy.urls import open_dead_letter_store


@pytest.fixture
def app() -> Iterator[Celery]:
    """A fresh app with its own memory dead-letter store."""
    celery_app = Celery("xsm-app", set_as_current=False)
    celery_app.conf.xsm_dead_letter_store = f"memory://{uuid.uuid4().hex}"
    yield celery_app
    celery_app.close()


def test_xsm_task_registers_chart_tasks_bare_or_with_options(app: Celery) -> None:
    """@xsm.task and @xsm.task(...) both give ChartTasks; options reach the chart."""
    xsm = Xsm(app)

    @xsm.task
    def plain() -> int:
        return 1

    @xsm.task(shared=False, name="shop.refund", retry_policy=RetryPolicy(max_attempts=1))
    def refund() -> None:
        raise ConnectionError("no")

    assert isinstance(plain, ChartTask)
    assert plain.apply().result == 1
    assert refund.name == "shop.refund"
    refund.apply()
    assert open_dead_letter_store(app.conf.xsm_dead_letter_store).all()[0].attempts == 1


def test_settings_are_exposed_validated(app: Celery) -> None:
    """Xsm(app).settings is the app's validated XsmSettings."""
    app.conf.xsm_timer_countdown_max_s = 12
    assert Xsm(app).settings.timer_countdown_max_s == 12.0


def test_a_django_app_gets_the_django_variant() -> None:
    """When the app's task class is Celery's DjangoTask, Xsm picks DjangoChartTask."""
    from celery.contrib.django.task import DjangoTask

    app = Celery("django-like", task_cls=DjangoTask, set_as_current=False)
    assert Xsm(app).task_base is DjangoChartTask
    assert Xsm(Celery("plain", set_as_current=False)).task_base is ChartTask
    assert hasattr(DjangoChartTask, "delay_on_commit")


@pytest.fixture
def django_db(request: pytest.FixtureRequest) -> Iterator[None]:
    """Django set up (a memory database unless another area configured one), access allowed."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
            INSTALLED_APPS=[],
        )
        import django

        django.setup()
    blocker = None
    if request.config.pluginmanager.hasplugin("django"):
        blocker = request.getfixturevalue("django_db_blocker")
    if blocker is None:
        yield
        return
    with blocker.unblock():
        yield


@pytest.mark.usefixtures("django_db")
def test_delay_on_commit_waits_for_the_transaction() -> None:
    """DjangoChartTask.delay_on_commit runs the task only after the surrounding commit."""

    from django.db import transaction

    app = Celery("django-commit", set_as_current=False)
    app.conf.update(task_always_eager=True, xsm_dead_letter_store="memory://django-commit")
    ran: list[int] = []

    @app.task(shared=False, base=DjangoChartTask)
    def ship(order: int) -> None:
        ran.append(order)

    with transaction.atomic():
        ship.delay_on_commit(3)
        assert ran == []
    assert ran == [3]


def test_positional_secrets_are_redacted_by_parameter_name() -> None:
    """charge("o-1", "tok") masks the token because its parameter is card_token."""

    def charge(order_id: str, card_token: str, *rest: object, password: str = "") -> None: ...

    args, kwargs = redact_arguments(
        inspect.signature(charge), ["o-1", "tok_live", {"pin": "1234"}], {"password": "pw"}, None
    )
    assert args == ["o-1", "***", {"pin": "***"}]
    assert kwargs == {"password": "***"}


def test_extra_redact_keys_apply_to_arguments() -> None:
    """Keys from xsm_redact_keys are masked as well as the defaults."""

    def ship(order_id: str, postcode: str) -> None: ...

    args, _ = redact_arguments(inspect.signature(ship), ["o-1", "SW1"], {}, ("postcode",))
    assert args == ["o-1", "***"]
