"""examples/django_shop works as its README says, with a real worker on Redis.

The README's commands run in subprocesses against a temporary database and a queue of
their own: an order is dead-lettered while the gateway is down, then replayed with
``xsm_dlq`` once it is back, and the order ends up paid. (The admin half of the README is
what ``test_browser.py`` drives in Chromium.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.service, pytest.mark.slow]

SHOP = Path(__file__).resolve().parents[2] / "examples" / "django_shop"


@pytest.fixture
def shop_env(tmp_path: Path, redis_url: str) -> dict[str, str]:
    """Environment of the example: own database, queue, gateway flag, reliable gateway."""
    base = redis_url.rsplit("/", 1)[0]
    return {
        **os.environ,
        "SHOP_DB": str(tmp_path / "shop.db"),
        "SHOP_REDIS_URL": f"{base}/10",
        "SHOP_QUEUE": f"shop-test-{uuid.uuid4().hex[:8]}",
        "SHOP_FLAKY_RATE": "0",
        "SHOP_GATEWAY_DOWN_FILE": str(tmp_path / "gateway_down"),
    }


def manage(env: dict[str, str], *args: str) -> str:
    """Run ``manage.py`` in the example and return its output."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def shop_worker(shop_env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``celery -A shop_project worker`` process on the example's queue."""
    manage(shop_env, "migrate", "-v", "0")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "shop_project",
            "worker",
            "--pool",
            "solo",
            "-l",
            "warning",
        ],
        cwd=SHOP,
        env=shop_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def wait_for(check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    """Poll ``check()`` until it is true (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"condition not met within {timeout_s} s")


def test_the_readme_flow_dead_letters_then_replays_an_order(
    shop_env: dict[str, str], shop_worker: subprocess.Popen[bytes]
) -> None:
    """Gateway down: the order is dead-lettered after 4 attempts; replayed, it is paid."""
    Path(shop_env["SHOP_GATEWAY_DOWN_FILE"]).touch()
    manage(
        shop_env,
        "shell",
        "-c",
        "from shop.models import Order; "
        "from shop.tasks import charge_order; "
        "charge_order.delay(Order.objects.create(amount_cents=1999).pk)",
    )
    records: list[dict[str, object]] = []

    def dead_lettered() -> bool:
        records[:] = json.loads(manage(shop_env, "xsm_dlq", "list", "--json"))["dead_letters"]
        return bool(records)

    wait_for(dead_lettered)
    [record] = records
    assert record["attempts"] == 4
    assert record["task_name"] == "shop.charge_order"
    Path(shop_env["SHOP_GATEWAY_DOWN_FILE"]).unlink()
    out = manage(
        shop_env,
        "xsm_dlq",
        "replay",
        str(record["id"]),
        "--no-dry-run",
        "--yes",
        "--reason",
        "gateway back",
    )
    assert ": sent: sent shop.charge_order" in out
    wait_for(
        lambda: (
            "paid"
            in manage(
                shop_env,
                "shell",
                "-c",
                "from shop.models import Order; print(Order.objects.get().status)",
            )
        )
    )


def test_beat_has_the_two_xsm_entries(shop_env: dict[str, str]) -> None:
    """The example's Beat schedule holds the timer and relay entries."""
    out = manage(
        shop_env,
        "shell",
        "-c",
        "from shop_project.celery import app; print(sorted(app.conf.beat_schedule))",
    )
    assert "['xsm-fire-timers', 'xsm-relay-outbox']" in out
