"""The app's ``manage.py`` commands, mirroring the ``xsm-celery`` CLI."""
