"""The demo's second part: two orders as durable workflow instances on the same worker.

One order is paid: ``PAY`` goes out as a Celery task message, the worker's step moves the
order to ``charging`` and, once that step has committed, sends the ``charge_card`` task,
whose receipt comes back to the instance as ``done.invoke.charge``. The other order is never
paid, and its payment timeout fires on the worker. This process only reads the store and
prints each state change as it appears.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["ORDERS", "follow_orders"]

#: (order id, the amount it pays, or None for an order nobody pays) and its expected end.
ORDERS: tuple[tuple[str, float | None, str], ...] = (
    ("O-2001", 42.5, "paid"),
    ("O-2002", None, "expired"),
)


def follow_orders(console: Console, orders: Any, timeout_s: float) -> bool:
    """Start the orders, pay one, print each state change; True when each ended as expected."""
    from xsm_celery.demo.orders import PAYMENT_TIMEOUT_MS

    console.rule("[bold]a durable order workflow: a Celery task as a step, a timer on the worker")
    last: dict[str, str] = {}
    for order_id, _total, _ in ORDERS:
        view = orders.start(order_id)
        last[order_id] = str(view.value)
        console.print(
            f"{order_id}  started in {view.value} (pays within {PAYMENT_TIMEOUT_MS / 1000:g} s)",
            markup=False,
        )
    for order_id, total, _ in ORDERS:
        if total is not None:
            orders.send(order_id, "PAY", total=total)
            console.print(f"{order_id}  PAY {total} sent as a Celery task", markup=False)
    deadline = time.monotonic() + timeout_s
    ended: dict[str, Any] = {}
    while len(ended) < len(ORDERS) and time.monotonic() < deadline:
        for order_id, _, _ in ORDERS:
            view = orders.get(order_id)
            if view is None or order_id in ended:
                continue
            if str(view.value) != last[order_id]:
                console.print(f"{order_id}  {last[order_id]} -> {view.value}", markup=False)
                last[order_id] = str(view.value)
            if view.status == "done":
                ended[order_id] = view
        time.sleep(0.05)
    console.print(_table(orders))
    expected = {order_id: end for order_id, _, end in ORDERS}
    ok = all(str(ended[k].value) == v for k, v in expected.items() if k in ended)
    if len(ended) < len(ORDERS) or not ok:
        console.print("[red]the orders did not end as expected[/]")
        return False
    return True


def _table(orders: Any) -> Table:
    table = Table(title="order instances (from the workflow store)")
    for column in ("Order", "State", "Status", "Total", "Receipt", "Pending timers"):
        table.add_column(column)
    for order_id, _, _ in ORDERS:
        view = orders.get(order_id)
        if view is None:
            table.add_row(order_id, "-", "missing", "", "", "")
            continue
        table.add_row(
            order_id,
            str(view.value),
            view.status,
            str(view.context.get("total")),
            str(view.context.get("receipt") or ""),
            str(len(view.timers)),
        )
    return table
