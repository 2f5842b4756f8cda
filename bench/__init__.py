"""Benchmarks: each ``bench_*.py`` module prints a table comparing xsm_celery with its peers."""
