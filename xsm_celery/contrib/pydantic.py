"""``context_model(Model)``, at the path 0.11.0 users import it from (the ``pydantic`` extra).

The implementation is :mod:`xsm_celery.engine.context_model`, because ``create_machine``
takes ``context_model=`` itself.
"""

from __future__ import annotations

from xsm_celery.engine.context_model import context_model

__all__ = ["context_model"]
