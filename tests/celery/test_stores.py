"""An app's stores are opened once per process: reused within it, never across a fork."""

from __future__ import annotations

import json
import os

from celery import Celery

from xsm_celery.celery.stores import stores_for


def _app() -> Celery:
    app = Celery("xsm_stores_test", broker="memory://")
    app.conf.update(xsm_dead_letter_store="memory://stores-test", xsm_attempt_markers="memory://")
    return app


def test_the_stores_of_an_app_are_opened_once_per_process() -> None:
    app, other = _app(), _app()
    assert stores_for(app) is stores_for(app)
    assert stores_for(app).markers() is stores_for(app).markers()
    assert stores_for(other) is not stores_for(app)


def test_a_forked_child_opens_its_own_stores() -> None:
    """The child gets a fresh ``AppStores`` (and markers); the parent keeps its own."""
    app = _app()
    parent, parent_markers = stores_for(app), stores_for(app).markers()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            child = stores_for(app)
            found = {
                "fresh": child is not parent,
                "fresh_markers": child.markers() is not parent_markers,
                "reused": stores_for(app) is child,
            }
            os.write(write, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        found = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert found == {"fresh": True, "fresh_markers": True, "reused": True}
    assert stores_for(app) is parent
    assert stores_for(app).markers() is parent_markers
