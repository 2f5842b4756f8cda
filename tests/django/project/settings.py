"""Settings of the test project: SQLite by default, PostgreSQL under the alias ``postgres``.

The conftest passes these values to ``settings.configure()`` instead of exporting
``DJANGO_SETTINGS_MODULE``, so Celery apps created by other test areas in the same run do
not pick up Celery's Django fix-up.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from tests.services import POSTGRES_URL, REDIS_URL

_pg = urlsplit(POSTGRES_URL)
_DATA = Path(tempfile.mkdtemp(prefix="xsm-django-tests-"))

DEBUG = False
SECRET_KEY = "xsm-celery-tests-only"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.django.project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"
STATIC_ROOT = str(_DATA / "static")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "xsm_celery.django",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_DATA / "default.sqlite3"),
        "OPTIONS": {"timeout": 20},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.path.lstrip("/") or "test",
        "USER": _pg.username or "postgres",
        "PASSWORD": _pg.password or "",
        "HOST": _pg.hostname or "127.0.0.1",
        "PORT": str(_pg.port or 5432),
        "TEST": {"NAME": f"xsm_django_test_{os.getpid()}"},
    },
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Database 11 and an own queue keep these workers apart from the other areas' tests.
CELERY_BROKER_URL = REDIS_URL.rsplit("/", 1)[0] + "/11"
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "xsm-django-tests"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

XSM_CELERY = {
    "DATABASE": "default",
    "CELERY_APP": "tests.django.project.celery:app",
}
