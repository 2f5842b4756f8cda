"""Thin modules at the import paths the specification names.

``xsm_celery.contrib.cloudevents`` converts envelopes to the CloudEvents SDK and HTTP modes;
``xsm_celery.contrib.testing`` gathers the test doubles and replay helpers. Neither needs a
third-party package except where its docstring says so.
"""
