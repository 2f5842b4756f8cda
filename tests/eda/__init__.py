"""Tests of xsm_celery.eda."""
