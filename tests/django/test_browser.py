"""The dead-letter admin in headless Chromium, against a real Celery worker on Redis.

A payment task is dead-lettered by a real worker while its gateway is down; an operator
logs in, filters the list down to it, reads the error chain and the diagram, fixes the
gateway and replays it with a reason, sees the audit row, and the replayed task succeeds
on the same worker. A read-only operator sees no replay button and gets 403 posting one.
Screenshots go to ``artifacts/django-admin/``. The browser is Debian's ``chromium``; the test
installs nothing; it skips when it is absent, and fails under CI (``.ci/run`` installs it).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import services
from tests.contract_dead_letters import make_record
from tests.django.admin_support import MEMORY_APP, PASSWORD, make_user, sent_tasks, task_record
from xsm_celery.django.models import DeadLetterRecord
from xsm_celery.django.stores import DjangoDeadLetterStore

pytestmark = [pytest.mark.browser, pytest.mark.service, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "django-admin"


@pytest.fixture
def admin_server(sqlite_db: str) -> Iterator[str]:
    """The test project served on a free port from a thread, static files included."""
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.test.testcases import LiveServerThread

    thread = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait(10)
    if thread.error:
        raise thread.error
    yield f"http://127.0.0.1:{thread.port}"
    thread.terminate()
    thread.join(10)


@pytest.fixture
def shop_worker(redis_url: str, sqlite_db: str) -> Iterator[Any]:
    """A real Celery worker (solo pool, in a thread) consuming the project's Redis queue."""
    from celery.contrib.testing.worker import start_worker

    from tests.django.project.celery import app

    app.control.purge()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield app


@pytest.fixture
def gateway(redis_url: str) -> Iterator[Any]:
    """The payment gateway's broken flag in Redis, cleared afterwards."""
    import redis

    from tests.django.project.tasks import BROKEN_KEY

    client = redis.Redis.from_url(redis_url)
    yield lambda broken: client.set(BROKEN_KEY, 1) if broken else client.delete(BROKEN_KEY)
    client.delete(BROKEN_KEY)


@pytest.fixture
def chromium_browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Headless Debian Chromium driven by Playwright."""
    if not Path(CHROMIUM).exists():
        message = "Debian's chromium is not installed (apt-get install -y chromium)"
        if services.in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread, and Django refuses
    # database calls under a running loop unless told the caller is synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


def dead_letter_of(task_id: str, timeout_s: float = 30.0) -> DeadLetterRecord:
    """Wait (bounded) for the worker to write the dead letter of ``task_id``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = DeadLetterRecord.objects.filter(task_id=task_id).first()
        if row is not None:
            return row
        time.sleep(0.1)
    raise AssertionError(f"no dead letter for task {task_id} after {timeout_s} s")


def log_in(browser: Any, base: str, username: str) -> Any:
    """A new browser page logged in to the admin as ``username``."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")
    return page


def test_an_operator_triages_and_replays_a_dead_letter(
    admin_server: str, shop_worker: Any, gateway: Any, chromium_browser: Any
) -> None:
    """Log in, filter, open, read chain and diagram, replay with a reason, see it succeed."""
    from tests.django.project.tasks import charge

    gateway(True)
    failed = charge.apply_async(args=[7], kwargs={"amount": 20})
    failed.get(timeout=30, propagate=False)
    row = dead_letter_of(failed.id)
    assert row.attempts == 2
    store = DjangoDeadLetterStore()
    store.put(make_record(task_name="shop.email", reason="non_retryable"))
    make_user("ana", superuser=True)

    page = log_in(chromium_browser, admin_server, "ana")
    page.goto(f"{admin_server}/admin/xsm_celery/deadletterrecord/")
    assert page.locator("#result_list tbody tr").count() == 2
    page.locator("#changelist-filter a", has_text="shop.charge").first.click()
    page.wait_for_url(re.compile(r"task_name=shop\.charge"))
    assert page.locator("#result_list tbody tr").count() == 1
    page.screenshot(path=str(SHOTS / "1-filtered-list.png"), full_page=True)

    page.locator("#result_list tbody tr a").first.click()
    page.wait_for_selector("#xsm-error-chain")
    chain = page.locator("#xsm-error-chain tr.xsm-error")
    assert chain.count() == 2
    assert "ConnectionError" in chain.last.inner_text()
    assert "payment gateway unreachable for order 7" in chain.last.inner_text()
    assert page.locator("#xsm-diagram svg .xsm-marked").get_attribute("data-state") == (
        "task.deadLettered"
    )
    assert page.locator("#xsm-diagram svg").is_visible()
    page.screenshot(path=str(SHOTS / "2-detail.png"), full_page=True)

    page.click("#xsm-replay")
    page.wait_for_selector("#xsm-replay-form")
    assert "would send shop.charge with args=[7]" in page.locator("#xsm-preview").inner_text()
    page.screenshot(path=str(SHOTS / "3-dry-run.png"), full_page=True)
    gateway(False)
    page.fill("#id_reason", "gateway is back (INC-42)")
    page.click("input[name=confirm]")
    page.wait_for_selector(".messagelist .success")
    audit = page.locator("#xsm-audit tr.xsm-audit-row")
    assert audit.count() == 1
    text = audit.first.inner_text()
    assert "ana" in text
    assert "gateway is back (INC-42)" in text
    page.screenshot(path=str(SHOTS / "4-replayed.png"), full_page=True)

    task_id = re.search(r"as task ([0-9a-f-]{36})", text)
    assert task_id is not None
    assert shop_worker.AsyncResult(task_id.group(1)).get(timeout=30) == "charged order 7: 20"
    assert DjangoDeadLetterStore().get(row.id).resolved_at is not None  # type: ignore[union-attr]


def test_a_read_only_operator_sees_no_replay_and_gets_403(
    admin_server: str, chromium_browser: Any
) -> None:
    """View permission alone: no replay button; posting the replay or the action is a 403."""
    record = make_record(task_name="shop.charge", task_args=[1], task_kwargs={})
    DjangoDeadLetterStore().put(record)
    make_user("viewer", "view_deadletterrecord")
    page = log_in(chromium_browser, admin_server, "viewer")
    detail = f"{admin_server}/admin/xsm_celery/deadletterrecord/{record.id}/change/"
    page.goto(detail)
    assert page.locator("#xsm-error-chain").is_visible()
    assert page.locator("#xsm-replay").count() == 0
    page.screenshot(path=str(SHOTS / "5-read-only.png"), full_page=True)

    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    replay = page.request.post(
        f"{admin_server}/admin/xsm_celery/deadletterrecord/{record.id}/replay/",
        form={"csrfmiddlewaretoken": token, "reason": "let me in"},
        headers={"Referer": detail},
    )
    assert replay.status == 403
    assert "CSRF" not in replay.text()
    action = page.request.post(
        f"{admin_server}/admin/xsm_celery/deadletterrecord/",
        form={
            "csrfmiddlewaretoken": token,
            "action": "replay_selected",
            "_selected_action": record.id,
        },
        headers={"Referer": detail},
    )
    assert action.status == 403
    assert "CSRF" not in action.text()
    assert DjangoDeadLetterStore().get(record.id).resolved_at is None  # type: ignore[union-attr]


def test_bulk_replay_shows_progress_and_a_summary(admin_server: str, chromium_browser: Any) -> None:
    """Replaying a filtered selection runs record by record, then summarises the outcomes."""
    from django.test import override_settings

    from tests.django.project.celery import memory_app

    with override_settings(XSM_CELERY={"CELERY_APP": MEMORY_APP}):
        sent_tasks(memory_app)
        for _ in range(3):
            task_record(memory_app)
        task_record(memory_app, task_args=["***"])
        make_user("ana", superuser=True)
        page = log_in(chromium_browser, admin_server, "ana")
        page.goto(f"{admin_server}/admin/xsm_celery/deadletterrecord/?task_name=shop.charge")
        page.check("#action-toggle")
        page.select_option("select[name=action]", "replay_selected")
        page.click("button[name=index]")
        page.wait_for_selector("#xsm-bulk-form")
        assert page.locator("#xsm-plans tbody tr").count() == 4
        page.fill("#id_reason", "gateway is back (INC-42)")
        page.click("#xsm-bulk-form input[type=submit]")
        page.wait_for_selector("#xsm-progress[data-done=true]", timeout=30_000)
        assert page.locator("#xsm-progress-bar").get_attribute("value") == "4"
        summary = page.locator("#xsm-live-summary").inner_text()
        assert "sent: 3" in summary
        assert "refused: 1" in summary
        page.screenshot(path=str(SHOTS / "6-bulk-replay.png"), full_page=True)
        assert len(sent_tasks(memory_app)) == 3
