"""A minimal Django project for the app's tests, as django-celery-results' t/proj."""
