"""Charts shipped with xsm_celery, loadable by resource name (for example ``task_retry.json``)."""
