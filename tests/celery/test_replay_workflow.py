"""Replay of a chain or chord member keeps its chain and callbacks, or refuses with the loss."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery

from tests.celery.queues import drain_queue
from tests.celery.test_replay import app, dead_letter, store  # noqa: F401 (fixture)
from xsm_celery.celery import replay_task
from xsm_celery.celery.deadletter.canvas import canvas_of, replay_options
from xsm_celery.errors import ReplayRefusedError


def test_a_linked_callback_is_kept_in_the_record_and_sent_again(app: Celery) -> None:  # noqa: F811
    """A task run with ``link=`` keeps the callback; the replayed message carries it."""
    callback = app.signature("shop.notify", args=("o-1",))
    result = app.tasks["billing.charge"].apply(("o-1", 5), link=callback)
    record = next(r for r in store(app).all() if r.task_id == result.id)
    assert record.event["payload"]["canvas"]["callbacks"][0]["task"] == "shop.notify"
    replay_task(store(app), record.id, app, reason="fixed", dry_run=False)
    (message,) = drain_queue(app, timeout=0.05)
    embed = message.decode()[2]
    assert [c["task"] for c in embed["callbacks"]] == ["shop.notify"]


def test_the_rest_of_a_chain_is_kept_on_replay(app: Celery) -> None:  # noqa: F811
    """A chain member's record keeps the chain; the replay sends it, so the chain continues."""
    rest = [
        dict(app.signature("shop.ship", args=("o-1",))),
        dict(app.signature("shop.email", args=("o-1",))),
    ]
    request = SimpleNamespace(chain=rest, callbacks=None, errbacks=None, chord=None, group=None)
    options = replay_options("r-1", {"canvas": canvas_of(request)})
    assert [s["task"] for s in options["chain"]] == ["shop.ship", "shop.email"]
    record = dead_letter(app, "o-1", 5)
    app.send_task("billing.charge", args=["o-1", 5], **options)
    (message,) = drain_queue(app, timeout=0.05)
    assert [s["task"] for s in message.decode()[2]["chain"]] == ["shop.ship", "shop.email"]
    assert record.event["payload"] == {}


def test_a_chord_member_is_refused_with_what_would_be_lost() -> None:
    """A chord member cannot rejoin its chord: the refusal names the callback and the group."""
    chord: dict[str, Any] = {"task": "shop.summarise", "args": [], "kwargs": {}}
    request = SimpleNamespace(chain=None, callbacks=None, errbacks=None, chord=chord, group="g-7")
    with pytest.raises(ReplayRefusedError, match=r"'shop\.summarise' did not run") as caught:
        replay_options("r-2", {"canvas": canvas_of(request)})
    assert "g-7" in str(caught.value)
    assert "run the whole chord again" in str(caught.value)
