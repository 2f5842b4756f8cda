"""The shipped migrations match the models, so ``migrate`` builds the tables the code uses."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command

import xsm_celery.django

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = Path(xsm_celery.django.__file__).parent / "migrations"


def test_models_have_no_missing_migration() -> None:
    """makemigrations --check finds nothing to write for the app."""
    call_command("makemigrations", "xsm_celery", "--check", "--dry-run", verbosity=0)


def test_migration_numbers_are_unique() -> None:
    """No two migration files share a number (a merge of parallel branches would)."""
    numbers = [
        match.group(1)
        for path in MIGRATIONS.glob("*.py")
        if (match := re.match(r"(\d{4})_", path.name))
    ]
    assert numbers
    duplicates = [n for n, count in Counter(numbers).items() if count > 1]
    assert not duplicates


@pytest.mark.slow
def test_the_check_fails_when_a_model_gains_a_field() -> None:
    """The check above is not vacuous: a field added without a migration makes it exit 1."""
    code = textwrap.dedent(
        """
        import django
        from django.conf import settings
        from tests.django.project import settings as proj
        settings.configure(**{k: getattr(proj, k) for k in dir(proj) if k.isupper()})
        django.setup()
        from django.core.management import call_command
        from django.db import models
        from xsm_celery.django.models import DeadLetterRecord
        models.CharField(max_length=5, default="").contribute_to_class(DeadLetterRecord, "extra")
        call_command("makemigrations", "xsm_celery", "--check", "--dry-run", verbosity=0)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr


def test_every_field_has_a_verbose_name_and_help_text() -> None:
    """Each column of the app explains itself in the admin, auto ids included."""
    from django.apps import apps

    missing = [
        f"{model.__name__}.{field.name}"
        for model in apps.get_app_config("xsm_celery").get_models()
        for field in model._meta.get_fields()
        if field.concrete and (not field.help_text or "verbose_name" not in field.deconstruct()[3])
    ]
    assert not missing


def test_the_system_checks_pass() -> None:
    """Django's checks (admin options, models, URLs) find nothing wrong with the app."""
    call_command("check", "xsm_celery", fail_level="WARNING", verbosity=0)
