"""The ``xsm_chart`` message header: the retry chart's snapshot, checked before it is trusted.

Anyone who can publish to the broker can write a message header, so the snapshot a chart task
carries between runs is untrusted input. A header says how many attempts were spent
(``attempt: -1000000`` would buy a million runs, ``attempt: 99`` would skip the policy), which
errors happened (they end up in the dead letter) and what else the context holds. Before a
run uses it, the header must be:

* a string of at most :data:`MAX_HEADER_CHARS` characters;
* written for this very task id (:data:`TASK_HEADER`): a header copied from another task,
  and the error chain in it, is never used;
* signed when a key is known (HMAC-SHA256 of the task id and the header in the
  :data:`SIGNATURE_HEADER` header): ``xsm_signing_key``, or in a configured Django project a
  key derived from ``SECRET_KEY`` (see :func:`signing_key` and docs/celery.md);
* a running snapshot of this task's chart, waiting on a retry timer;
* a context with an attempt counter in ``[0, max_attempts - 1]`` and a well-formed error
  chain, whose keys the chart owns (its initial ``context`` plus the retry policy's keys): in
  an unsigned header any other key is dropped (and reported), never carried into the dead
  letter.

No header, signed or not, can make a task give up without running its function: a waiting
chart whose counter reached ``max_attempts`` was never written by a run (the last failure gives
up in its own run), and ``attempt.run_chart`` refuses any header whose pending timer would
lead straight to a dead-letter state.

Anything else is rejected: the run starts the chart afresh, logs a warning and emits
``FactKind.HEADER_REJECTED`` with the task name and one of the fixed reasons below, so a
metrics exporter can count rejections. A header of an older structure of the same chart (a
deploy while retries were in flight) passes these checks and restarts the chart keeping its
context, so its budget and error chain survive the deploy.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xsm_celery import hooks
from xsm_celery.engine import Machine
from xsm_celery.errors import ConfigurationError
from xsm_celery.patterns import ERRORS_CONTEXT_KEY, RetryPolicy
from xsm_celery.patterns.error_chain import MAX_ERROR_MESSAGE

__all__ = [
    "DJANGO_KEY_PURPOSE",
    "HEADER",
    "MAX_ERRORS",
    "MAX_HEADER_CHARS",
    "SIGNATURE_HEADER",
    "TASK_HEADER",
    "UNSIGNED_WARNING",
    "ChartHeader",
    "HeaderCodec",
    "django_secret_key",
    "django_signing_key",
    "signing_key",
]

logger = logging.getLogger(__name__)

#: The message header that carries the chart snapshot between runs.
HEADER = "xsm_chart"

#: The message header with the hex HMAC-SHA256 of the task id and :data:`HEADER`, when a
#: key is known.
SIGNATURE_HEADER = "xsm_chart_sig"

#: The message header naming the task id :data:`HEADER` was written for. A run uses the
#: header only under that id: Celery's retries and the durable timers keep the task id, a
#: replay sends no header at all, so only a copy onto another task is refused.
TASK_HEADER = "xsm_chart_task"

#: What a key derived from Django's ``SECRET_KEY`` is for: the HMAC-SHA256 message under
#: ``SECRET_KEY``. A fixed purpose keeps the derived key apart from every other use of the
#: secret (sessions, password resets), so neither can stand in for the other. The string
#: names the module's first home and stays as it is: changing it would change every worker's
#: key and refuse every signed header already in flight.
DJANGO_KEY_PURPOSE = b"xsm_celery.celery.header: xsm_chart signing key v1"

#: What the signature covers before the task id and the header: a version, so that a MAC
#: made for another format (the header alone, before task ids were signed) never verifies.
_SIGNED_PREFIX = b"xsm_chart v2\n"

#: Logged once at worker start when no key is known (see ``task._warn_unsigned_headers``).
UNSIGNED_WARNING = (
    "xsm_celery: the xsm_chart retry headers of this worker's chart tasks are not signed (no "
    "xsm_signing_key, no Django SECRET_KEY). Anyone who can publish to the broker can write "
    "one. An unsigned header can restart a task's retry budget (an attempt counter from 0 to "
    "max_attempts - 1) and set the context keys its chart declares; it cannot skip the "
    "task's function, make the task give up without running it, or carry the error chain of "
    "another task id. To sign them, set app.conf.xsm_signing_key to the same random secret "
    "on every worker (python -c 'import secrets; print(secrets.token_hex(32))'); see "
    "docs/celery.md, 'The retry header is untrusted input'"
)

#: Longest header accepted, in characters: twenty full error entries and a custom context
#: fit in a tenth of it, and anything larger is refused before it is parsed.
MAX_HEADER_CHARS = 256 * 1024

#: Shortest signing key accepted, in bytes (HMAC-SHA256 wants at least its output size).
MIN_KEY_BYTES = 32

#: Error-chain entries a snapshot keeps, the newest winning (as ``DeadLetterPlugin`` keeps).
MAX_ERRORS = 20

#: The fields of one error-chain entry (see ``patterns.error_chain.error_entry``).
_ERROR_FIELDS = frozenset({"source", "name", "type", "message"})


def signing_key(conf: Any) -> bytes | None:
    """The key that signs chart headers, or None when headers go unsigned.

    ``xsm_signing_key`` when it is set; otherwise, in a configured Django project, a key
    derived from ``SECRET_KEY`` (:func:`django_signing_key`), so a Django project signs
    without a setting of its own: every worker of it already shares that secret.

    Raises:
        ConfigurationError: the key is not a string or bytes, or shorter than 32 bytes.
    """
    raw = conf.get("xsm_signing_key")
    if raw is None or raw == "":
        return django_signing_key()
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if not isinstance(raw, bytes):
        raise ConfigurationError(
            f"setting xsm_signing_key must be a string, got {type(raw).__name__}; use a random "
            "secret shared by every worker, e.g. python -c 'import secrets; "
            "print(secrets.token_hex(32))'"
        )
    if len(raw) < MIN_KEY_BYTES:
        raise ConfigurationError(
            f"setting xsm_signing_key is {len(raw)} bytes long; use at least {MIN_KEY_BYTES} "
            "random bytes, e.g. python -c 'import secrets; print(secrets.token_hex(32))'"
        )
    return raw


def django_signing_key() -> bytes | None:
    """HMAC-SHA256(``SECRET_KEY``, :data:`DJANGO_KEY_PURPOSE`): 32 bytes, or None without Django.

    The secret itself is never the key: the fixed purpose string keeps a header signature
    from ever being a valid MAC for another of Django's uses of the secret, or the reverse.
    """
    secret = django_secret_key()
    if secret is None:
        return None
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    return hmac.new(secret, DJANGO_KEY_PURPOSE, hashlib.sha256).digest()


def django_secret_key() -> str | bytes | None:
    """``SECRET_KEY`` of a configured Django project, or None.

    Django is looked at only in a process that has imported it already (a project calling
    ``settings.configure()``, Celery's Django fix-up) or that names a settings module in
    ``DJANGO_SETTINGS_MODULE``: any other process never imports it. A settings module that
    cannot be loaded, or an empty secret, counts as no secret: the worker then says at start
    that its headers are unsigned.
    """
    named = bool(os.environ.get("DJANGO_SETTINGS_MODULE"))
    if "django.conf" not in sys.modules and not named:
        return None
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
    except ImportError:
        return None
    if not (settings.configured or named):
        return None
    try:
        secret = settings.SECRET_KEY
    except (ImportError, ImproperlyConfigured):
        return None
    return secret if isinstance(secret, str | bytes) and secret else None


@dataclass(frozen=True, slots=True)
class ChartHeader:
    """A header that passed every check: the parsed snapshot and its attempt counter."""

    #: The snapshot as a dict, ready for ``from_snapshot``.
    snapshot: dict[str, Any]
    #: Attempts already spent, within ``[0, max_attempts - 1]``.
    attempt: int
    #: Whether the snapshot was taken from the chart's current structure.
    same_structure: bool


class _Rejected(Exception):
    """A check failed; ``reason`` is one short fixed phrase (bounded cardinality)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class HeaderCodec:
    """Writes and checks one chart task's header; built once when the task is bound."""

    task_name: str
    machine: Machine
    #: Context keys the chart may carry between runs.
    owned_keys: frozenset[str]
    max_attempts: int
    attempt_key: str
    delay_key: str
    #: Set only when a failure is final, which gives up in the same run: never in a header.
    give_up_key: str
    key: bytes | None

    @classmethod
    def for_task(
        cls, task_name: str, machine: Machine, policy: RetryPolicy, key: bytes | None
    ) -> HeaderCodec:
        """The codec of a task: its chart, its policy's counter and the app's signing key."""
        attempt_key, delay_key, give_up_key = policy.context_keys("attempt")
        owned = {*machine.initial_context, attempt_key, delay_key, give_up_key, ERRORS_CONTEXT_KEY}
        return cls(
            task_name=task_name,
            machine=machine,
            owned_keys=frozenset(owned),
            max_attempts=policy.max_attempts,
            attempt_key=attempt_key,
            delay_key=delay_key,
            give_up_key=give_up_key,
            key=key,
        )

    def encode(self, snapshot: str, task_id: str) -> dict[str, str]:
        """The headers that carry ``snapshot`` to the next run of ``task_id``, signed with a key."""
        headers = {HEADER: snapshot, TASK_HEADER: task_id}
        if self.key is not None:
            headers[SIGNATURE_HEADER] = self._sign(snapshot, task_id)
        return headers

    def decode(self, headers: Mapping[str, Any] | None, task_id: str) -> ChartHeader | None:
        """The checked header of a message of ``task_id``, or None to start the chart afresh.

        A message without the header is a first run and passes silently; a header that
        fails a check is logged, reported as ``HEADER_REJECTED`` and ignored.
        """
        if not headers:
            return None
        value = headers.get(HEADER)
        if value is None:
            return None
        try:
            self._check_origin(value, headers, task_id)
            return self._check(value)
        except _Rejected as rejected:
            self.reject(rejected.reason, rejected.detail)
            return None

    def verified_snapshot(self, headers: Mapping[str, Any] | None, task_id: str) -> dict[str, Any]:
        """The snapshot of ``task_id``'s header if it passes every check, else ``{}``.

        For a record written without running the chart (a dead letter of a deferred task):
        it must not carry a counter or an error chain that was not written for this task.
        """
        header = self.decode(headers, task_id)
        return {} if header is None else header.snapshot

    def reject(self, reason: str, detail: str = "", *, dropped: bool = False) -> None:
        """Log and report a header that cannot be used (also for one that fails to restore).

        With ``dropped`` only part of the header was refused (keys the chart does not own) and
        the run goes on with the rest.
        """
        if dropped:
            logger.warning(
                "task %s: dropping context keys its retry chart does not own from the %s "
                "header (%s); declare them in the chart's context to keep them between runs",
                self.task_name,
                HEADER,
                detail,
            )
        else:
            logger.warning(
                "task %s: ignoring the %s message header (%s%s); starting its retry chart afresh",
                self.task_name,
                HEADER,
                reason,
                f": {detail}" if detail else "",
            )
        hooks.emit(hooks.FactKind.HEADER_REJECTED, task=self.task_name, reason=reason)

    def _sign(self, value: str, task_id: str) -> str:
        """HMAC-SHA256 of the task id (length-prefixed, so no split is ambiguous) and header."""
        assert self.key is not None
        tid = task_id.encode("utf-8")
        mac = hmac.new(self.key, _SIGNED_PREFIX, hashlib.sha256)
        mac.update(b"%d:" % len(tid))
        mac.update(tid)
        mac.update(value.encode("utf-8"))
        return mac.hexdigest()

    def _check_origin(self, value: Any, headers: Mapping[str, Any], task_id: str) -> None:
        """Refuse what is too large, written for another task id, or wrongly signed."""
        if not isinstance(value, str):
            raise _Rejected("not a string", type(value).__name__)
        if len(value) > MAX_HEADER_CHARS:
            raise _Rejected("too large", f"{len(value)} characters")
        written_for = headers.get(TASK_HEADER)
        if not isinstance(written_for, str) or written_for != task_id:
            raise _Rejected("another task's header", repr(written_for)[:80])
        if self.key is None:
            return
        signature = headers.get(SIGNATURE_HEADER)
        if not isinstance(signature, str):
            raise _Rejected("unsigned")
        if not hmac.compare_digest(self._sign(value, task_id), signature):
            raise _Rejected("bad signature")

    def _check(self, value: str) -> ChartHeader:
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise _Rejected("not JSON", str(exc)[:80]) from None
        if not isinstance(data, dict):
            raise _Rejected("not an object")
        if data.get("machine_id") != self.machine.id:
            raise _Rejected("another chart", repr(data.get("machine_id"))[:80])
        if data.get("status") != "running":
            raise _Rejected("not running", repr(data.get("status"))[:40])
        context = data.get("context")
        if not isinstance(context, dict):
            raise _Rejected("no context")
        unknown = sorted(str(key) for key in context if key not in self.owned_keys)
        if unknown and self.key is None:
            # Unsigned: nothing proves this worker's chart wrote them, so they are dropped.
            # Dropping (not restarting) keeps the budget of a custom chart whose actions
            # write keys its context does not declare, so such a task cannot loop for ever.
            self.reject("unknown context key", repr(unknown[:5])[:120], dropped=True)
            context = data["context"] = {k: v for k, v in context.items() if k in self.owned_keys}
        attempt = self._check_context(context)
        same = data.get("machine_hash") == self.machine.structure_hash
        return ChartHeader(snapshot=data, attempt=attempt, same_structure=same)

    def _check_context(self, context: dict[str, Any]) -> int:
        attempt = context.get(self.attempt_key, 0)
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise _Rejected("attempt not an integer", repr(attempt)[:40])
        if not 0 <= attempt < self.max_attempts:
            # A run that spends the last attempt gives up in that run: a chart waiting with
            # the budget spent was never written, and restoring it would give up unrun.
            raise _Rejected(
                "attempt out of range", f"{attempt} not in [0, {self.max_attempts - 1}]"
            )
        if self.give_up_key in context:
            raise _Rejected("give-up mark in a waiting chart")
        delay = context.get(self.delay_key)
        if delay is not None and not _is_delay(delay):
            raise _Rejected("bad delay", repr(delay)[:40])
        errors = context.get(ERRORS_CONTEXT_KEY)
        if errors is not None:
            _check_errors(errors, attempt)
        return attempt


def _is_delay(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value >= 0


def _check_errors(errors: Any, attempt: int) -> None:
    """An error chain is at most one entry per spent attempt, each the four bounded strings."""
    if not isinstance(errors, list) or len(errors) > min(attempt, MAX_ERRORS):
        raise _Rejected("bad error chain", f"{len(errors) if isinstance(errors, list) else 0}")
    for entry in errors:
        if not isinstance(entry, dict) or entry.keys() != _ERROR_FIELDS:
            raise _Rejected("bad error chain", "entry shape")
        for text in entry.values():
            if not isinstance(text, str) or len(text) > MAX_ERROR_MESSAGE:
                raise _Rejected("bad error chain", "entry value")
