"""``xsm_dead_letter_store = "django"`` means the Django table in the CLI as in the worker."""

from __future__ import annotations

import json

from celery import Celery
from click.testing import CliRunner

from tests.contract_dead_letters import make_record
from xsm_celery.cli.group import cli
from xsm_celery.cli.target import DlqTarget
from xsm_celery.django.stores import DjangoDeadLetterStore


def test_the_cli_reads_the_django_store_the_app_names(sqlite_db: str) -> None:
    """An app whose setting is "django://<alias>" gives the CLI the Django table."""
    DjangoDeadLetterStore(using=sqlite_db).put(record := make_record(task_name="shop.charge"))
    app = Celery("cli-django", set_as_current=False)
    app.conf.xsm_dead_letter_store = f"django://{sqlite_db}"
    store = DlqTarget(celery_app=app).store()
    assert isinstance(store, DjangoDeadLetterStore)
    assert [r.id for r in store.list()] == [record.id]


def test_dlq_flag_accepts_django(sqlite_db: str) -> None:
    """``xsm-celery dlq --dlq django://<alias> list`` lists the Django table's records."""
    DjangoDeadLetterStore(using=sqlite_db).put(record := make_record(task_name="shop.charge"))
    result = CliRunner().invoke(cli, ["dlq", "--dlq", f"django://{sqlite_db}", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(result.stdout)["dead_letters"]] == [record.id]
