"""The logic of ``order.json``, for ``--logic tests.cli.order_logic``.

``recordPayment`` fails for a payload with ``"fail": true``, so a replay can fail again.
"""

from __future__ import annotations

from typing import Any

from xsm_celery.engine import MachineLogic


def record_payment(_interp: Any, ctx: dict[str, Any], event: Any, _action: Any) -> None:
    """Add the payment to the context, or fail as the payload asks."""
    if event.payload.get("fail"):
        raise RuntimeError("card processor still down")
    ctx["paid"] += event.payload.get("amount", 0)


logic = MachineLogic(actions={"recordPayment": record_payment})
