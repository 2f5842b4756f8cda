"""Orchestrated sagas: declared step by step, generated as a plain chart and its logic.

``step`` holds the declared ``SagaStep`` record; ``chart`` turns steps into chart JSON and
``logic`` into the generic actions, guards and delays that chart names; ``builder`` is the
fluent ``SagaBuilder`` on top. The imports run one way, builder to chart and logic to step,
so none of them needs another's names at import time. See docs/sagas.md.
"""

from __future__ import annotations

from xsm_celery.patterns.saga.builder import SagaBuilder
from xsm_celery.patterns.saga.step import SagaStep

__all__ = ["SagaBuilder", "SagaStep"]
