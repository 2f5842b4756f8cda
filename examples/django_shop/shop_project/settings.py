"""Settings of the shop example: SQLite, Redis for Celery, dead letters in the admin."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("SHOP_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "xsm_celery.django",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop_project.urls"
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
        "NAME": os.environ.get("SHOP_DB", str(BASE_DIR / "shop.db")),
        "OPTIONS": {"timeout": 20},
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

REDIS_URL = os.environ.get("SHOP_REDIS_URL", "redis://127.0.0.1:6379/0")

# Celery reads every CELERY_* setting (app.config_from_object(..., namespace="CELERY")).
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("SHOP_QUEUE", "celery")

# The xsm_celery Django app: one dict, read when needed.
XSM_CELERY = {
    "CELERY_APP": "shop_project.celery:app",
}

#: Chance that a charge fails for no reason (a flaky payment gateway), 0..1.
SHOP_FLAKY_RATE = float(os.environ.get("SHOP_FLAKY_RATE", "0.3"))
#: Milliseconds the order workflow's charge step may take before the saga compensates.
SHOP_PAYMENT_TIMEOUT_MS = int(os.environ.get("SHOP_PAYMENT_TIMEOUT_MS", "10000"))
#: Folder of the order workflow's flag files (``payment_slow``, ``courier_down``).
SHOP_FLAGS_DIR = Path(os.environ.get("SHOP_FLAGS_DIR", BASE_DIR))
#: While this file exists the gateway is down and every charge fails.
SHOP_GATEWAY_DOWN_FILE = Path(os.environ.get("SHOP_GATEWAY_DOWN_FILE", BASE_DIR / "gateway_down"))
