"""Users, records and broker inspection shared by the admin tests."""

from __future__ import annotations

import queue
from typing import Any

from django.contrib.auth.models import Permission, User

from tests.contract_dead_letters import make_record
from xsm_celery.django.admin.celery_app import task_chart
from xsm_celery.django.stores import DjangoDeadLetterStore
from xsm_celery.engine.hashing import structure_hash
from xsm_celery.patterns.dead_letter import DeadLetter

PASSWORD = "correct horse battery"
MEMORY_APP = "tests.django.project.celery:memory_app"


def make_user(name: str, *perms: str, superuser: bool = False) -> User:
    """A staff user holding ``perms`` (codenames of the xsm_celery app)."""
    if superuser:
        return User.objects.create_superuser(name, f"{name}@example.com", PASSWORD)
    user = User.objects.create_user(name, f"{name}@example.com", PASSWORD, is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="xsm_celery", codename__in=perms)
    )
    return user


def current_hash(app: Any) -> str:
    """Structure hash of the ``shop.charge`` task's chart as the app builds it now."""
    chart = task_chart(app, "shop.charge")
    assert chart is not None
    return structure_hash(chart)


def task_record(app: Any, **overrides: Any) -> DeadLetter:
    """A stored dead letter of ``shop.charge`` taken from the app's current chart."""
    values: dict[str, Any] = {
        "machine_id": "task",
        "state_id": "task.deadLettered",
        "reason": "task_exhausted",
        "task_name": "shop.charge",
        "task_args": [7],
        "task_kwargs": {"amount": 20},
        "machine_hash": current_hash(app),
        "errors": [
            {
                "source": "service",
                "name": "work",
                "type": "TimeoutError",
                "message": "gateway slow",
            },
            {
                "source": "service",
                "name": "work",
                "type": "ConnectionError",
                "message": "payment gateway unreachable for order 7",
            },
        ],
    }
    values.update(overrides)
    record = make_record(**values)
    DjangoDeadLetterStore().put(record)
    return record


def sent_tasks(app: Any) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """Drain the in-memory broker: (task name, args, kwargs) of every message sent."""
    found = []
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue("celery")
        try:
            while True:
                try:
                    message = simple.get(block=False)
                except queue.Empty:
                    break
                args, kwargs, _embed = message.decode()
                found.append((message.headers["task"], list(args), dict(kwargs)))
                message.ack()
        finally:
            simple.close()
    return found
