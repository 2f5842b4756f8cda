"""The shop example project; the Celery app loads with Django, as Celery's guide does it."""

from shop_project.celery import app as celery_app

__all__ = ["celery_app"]
