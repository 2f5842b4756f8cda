"""Tests of xsm_celery.contrib."""
