"""The example's order workflow walks through its README with a real worker on Redis.

The saga reserve -> charge -> ship completes; with the couriers away it compensates in
reverse; with the card processor hanging its payment timeout fires and it compensates; an
order started idle waits for the manual START event.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from tests.django.test_example_shop import manage, shop_worker, wait_for

pytestmark = [pytest.mark.service, pytest.mark.slow]

__all__ = ["shop_worker"]


@pytest.fixture
def shop_env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    """The example's environment with its flag files in a temporary folder, a 1.5 s timeout."""
    base = redis_url.rsplit("/", 1)[0]
    return {
        **os.environ,
        "SHOP_DB": str(tmp_path / "shop.db"),
        "SHOP_REDIS_URL": f"{base}/10",
        "SHOP_QUEUE": f"shop-test-{uuid.uuid4().hex[:8]}",
        "SHOP_FLAKY_RATE": "0",
        "SHOP_GATEWAY_DOWN_FILE": str(tmp_path / "gateway_down"),
        "SHOP_FLAGS_DIR": str(tmp_path),
        "SHOP_PAYMENT_TIMEOUT_MS": "1500",
    }


def _order(env: dict[str, str], key: str) -> dict[str, object]:
    out = manage(
        env,
        "shell",
        "-c",
        "import json; from shop.workflows import fulfilment; "
        f"v = fulfilment.get({key!r}); "
        "print(json.dumps(None if v is None else {'value': v.value, 'context': v.context}))",
    )
    return json.loads(out.strip().splitlines()[-1]) or {}


def _send(env: dict[str, str], key: str) -> None:
    manage(
        env,
        "shell",
        "-c",
        "from shop.workflows import fulfilment; "
        f"fulfilment.send({key!r}, 'START', order_id={key!r}, amount_cents=100)",
    )


def test_the_order_workflow_readme(
    shop_env: dict[str, str], shop_worker: object, tmp_path: Path
) -> None:
    """A happy order, a compensation, a payment timeout and a manual START."""
    _send(shop_env, "o-1")
    wait_for(lambda: _order(shop_env, "o-1").get("value") == "completed")

    (tmp_path / "courier_down").touch()
    _send(shop_env, "o-3")
    wait_for(lambda: _order(shop_env, "o-3").get("value") == "failed")
    assert _order(shop_env, "o-3")["context"]["compensated"] == ["charge", "reserve"]  # type: ignore[index]
    (tmp_path / "courier_down").unlink()

    (tmp_path / "payment_slow").touch()
    _send(shop_env, "o-2")
    wait_for(lambda: _order(shop_env, "o-2").get("value") == "failed")
    error = _order(shop_env, "o-2")["context"]["error"]  # type: ignore[index]
    assert error["type"] == "TimeoutError"  # type: ignore[index]
    (tmp_path / "payment_slow").unlink()

    manage(
        shop_env, "shell", "-c", "from shop.workflows import fulfilment; fulfilment.start('o-4')"
    )
    assert _order(shop_env, "o-4")["value"] == "idle"
    manage(
        shop_env,
        "shell",
        "-c",
        "from shop.workflows import fulfilment; "
        "fulfilment.send_now('o-4', 'START', order_id='o-4')",
    )
    wait_for(lambda: _order(shop_env, "o-4").get("value") == "completed")
