"""A real prefork worker running ``tests.celery.dead_letter_kill_app``, for the kill and replay tests.

The worker uses a Redis broker (and Redis attempt markers), a Redis result backend, and a
dead-letter store in a SQLite file of the test's own directory or in a private PostgreSQL
schema that is dropped afterwards.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from celery.result import AsyncResult

from tests import services
from tests.celery.workers import BACKEND_DB, BROKER_DB, Cluster, wait_for
from tests.celery.workflow_support import private_schema
from xsm_celery.sqlalchemy import open_dead_letter_store

APP = "tests.celery.dead_letter_kill_app"


def _with_db(url: str, db: int) -> str:
    return f"{url.rstrip('/').rsplit('/', 1)[0]}/{db}"


@contextlib.contextmanager
def dead_letter_cluster(store_kind: str, workdir: Path) -> Iterator[tuple[Cluster, str]]:
    """One running worker and the URL of its dead-letter store (``sqlite`` or ``postgres``)."""
    services.require("redis")
    with contextlib.ExitStack() as stack:
        if store_kind == "postgres":
            services.require("postgres")
            url = stack.enter_context(private_schema(services.POSTGRES_URL))
        else:
            url = f"sqlite:///{workdir / 'dead_letters.db'}"
        env = {"XSM_TEST_DLQ": url, "XSM_TEST_SPOOL": str(workdir / "spool")}
        group = Cluster(
            broker=_with_db(services.REDIS_URL, BROKER_DB),
            backend=_with_db(services.REDIS_URL, BACKEND_DB),
            workdir=workdir,
            app=APP,
            extra_env=env,
        )
        stack.callback(group.close)
        group.start_worker("dlk")
        yield group, url


def send(cluster: Cluster, name: str, *args: Any, **options: Any) -> AsyncResult:
    """Send ``dl_kill.<name>`` by name, as a producer that never imports the task."""
    return cluster.producer().send_task(f"dl_kill.{name}", args=args, **options)


def records_of(store_url: str, task_id: str) -> list[Any]:
    """Every dead letter of ``task_id``, resolved or not."""
    store = open_dead_letter_store(store_url, create_table=False)
    return list(store.list(limit=1000, include_resolved=True, task_id=task_id))


def finished(result: AsyncResult, timeout: float = 30) -> str:
    """Wait until the task is in a ready state; return the state."""
    return str(
        wait_for(
            lambda: result.state if result.ready() else None,
            timeout,
            f"task {result.id} to finish",
            every=0.1,
        )
    )


def dlq_cli(cluster: Cluster, store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``xsm-celery dlq --app <the worker's app> --dlq <its store> ...`` as an operator."""
    script = Path(sys.executable).parent / "xsm-celery"
    command = [str(script), "dlq", "--app", f"{APP}:app", "--dlq", store_url, *args]
    env = {k: v for k, v in cluster.env().items() if k != "XSM_DLQ"}
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        cwd=cluster.workdir,
        timeout=60,
        check=False,
    )
