"""Tests of xsm_celery.persistence."""
