"""The workflow layer's door: what ``xsm.workflow()``, ``start()`` and ``send()`` refuse.

Every value checked here is later a Celery task name, a database column or a JSON task
message, and each of those fails late and far from the caller: a Celery name with a space
routes nowhere, a key over the column's size fails inside the worker's transaction, a
payload nested a thousand levels deep raises ``RecursionError`` in ``json.dumps`` (or in the
worker's ``json.loads``). So they are refused here, before anything is sent or stored, with
a message that says what to pass instead.

The bounds:

* a payload or start context: JSON types only, nested at most ``MAX_PAYLOAD_DEPTH`` dicts
  and lists deep (checked without recursion, so no depth can raise ``RecursionError``);
* an instance key: the store key ``<workflow>:<key>`` must fit ``MAX_KEY_LENGTH``, so the
  room a key has is that limit less the workflow's name and the colon;
* an ``event_id``: a non-empty str of at most ``MAX_EVENT_ID_LENGTH`` characters (the
  inbox's key column), without NUL, and not in the ledgers' key space;
* a workflow name: a str of at most ``MAX_WORKFLOW_NAME_LENGTH`` characters, without
  whitespace, ``':'`` or control characters.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from xsm_celery.celery.workflow.messages import LEDGER_KEY_PREFIX
from xsm_celery.engine.events import nested_deeper_than
from xsm_celery.errors import (
    ArgumentTypeError,
    ConfigurationError,
    InvalidEventError,
    StoreError,
)
from xsm_celery.persistence.memory import MAX_KEY_LENGTH

__all__ = [
    "MAX_EVENT_ID_LENGTH",
    "MAX_PAYLOAD_DEPTH",
    "MAX_WORKFLOW_NAME_LENGTH",
    "InstanceKeyError",
    "check_event_id",
    "check_instance_key",
    "check_json",
    "check_workflow_name",
    "step_function_name",
]

#: Deepest nesting of dicts and lists a payload or start context may have (the payload
#: itself is level 1). Deep enough for any document a chart reads; shallow enough that
#: every JSON codec on the way (kombu's, the store's) stays far from Python's recursion limit.
MAX_PAYLOAD_DEPTH = 32

#: Longest ``event_id``: the inbox's key column (``xsm_inbox.key``, ``InboxRecord.key``).
MAX_EVENT_ID_LENGTH = 255

#: Longest workflow name. The Django journal's ``workflow`` column holds 120 characters, and
#: a name this long still leaves ``MAX_KEY_LENGTH - 101`` characters for instance keys.
MAX_WORKFLOW_NAME_LENGTH = 100

_GOOD_NAME = "name='orders' or name='billing.invoices_v2'"


class InstanceKeyError(ConfigurationError, StoreError):
    """Raised when an instance key cannot be stored under its workflow's prefix.

    A ``ConfigurationError`` for callers (the key is an argument that cannot work), and a
    ``StoreError`` because the store refuses it: that is what ``check_key`` raised before
    the prefix was counted, and a worker handed such a key dead-letters the message rather
    than failing without a trace.
    """


def check_json(value: Any, what: str) -> None:
    """Refuse ``value`` unless it can travel in a JSON task message.

    Raises:
        InvalidEventError: nested deeper than ``MAX_PAYLOAD_DEPTH`` (or containing itself),
            or holding a value JSON cannot carry (sets, objects, NaN, non-str keys).
    """
    _check_depth(value, what)
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidEventError(
            f"the {what} cannot travel in a JSON task message: {exc}; send str, numbers, bool, "
            "None, lists and dicts with str keys"
        ) from exc


def _check_depth(value: Any, what: str) -> None:
    """Refuse a value nested past ``MAX_PAYLOAD_DEPTH`` (the walk itself cannot recurse)."""
    if nested_deeper_than(value, MAX_PAYLOAD_DEPTH):
        raise InvalidEventError(
            f"the {what} is nested more than {MAX_PAYLOAD_DEPTH} dicts/lists deep (or "
            "contains itself); flatten it, or store the document elsewhere and send its id"
        )


def check_instance_key(workflow: str, key: object) -> str:
    """Return the store key ``<workflow>:<key>``, refusing a key that cannot be stored.

    Raises:
        InstanceKeyError: ``key`` is not a non-empty str, holds NUL, or is longer than the
            room ``MAX_KEY_LENGTH`` leaves after the workflow's name and ``':'``.
    """
    if not isinstance(key, str) or not key:
        raise InstanceKeyError(
            f"workflow {workflow!r}: the instance key must be a non-empty str, got {key!r:.80}; "
            "pass the business id as a str, e.g. 'o-42'"
        )
    room = MAX_KEY_LENGTH - len(workflow) - 1
    if len(key) > room:
        raise InstanceKeyError(
            f"workflow {workflow!r}: instance key of {len(key)} characters is too long; keys "
            f"of this workflow have room for {room} (the store key '{workflow}:<key>' holds at "
            f"most {MAX_KEY_LENGTH}): shorten the key, e.g. hash it, or the workflow's name "
            f"({key[:40]!r}...)"
        )
    if "\x00" in key:
        raise InstanceKeyError(
            f"workflow {workflow!r}: the instance key must not contain NUL: {key!r:.80}"
        )
    return f"{workflow}:{key}"


def check_event_id(event_id: object) -> str:
    """Return ``event_id`` if the inbox can keep it as a deduplication key.

    Raises:
        InvalidEventError: not a str, empty, over ``MAX_EVENT_ID_LENGTH`` characters, holding
            NUL, or starting with the prefix of the inbox's ledger rows.
    """
    if not isinstance(event_id, str) or not event_id:
        raise InvalidEventError(
            f"event_id must be a non-empty str, got {event_id!r:.80}; pass the id your "
            "producer gives the event (e.g. a UUID), or leave it out for a fresh one"
        )
    if len(event_id) > MAX_EVENT_ID_LENGTH:
        raise InvalidEventError(
            f"event_id is {len(event_id)} characters, over the inbox's {MAX_EVENT_ID_LENGTH}; "
            f"pass a shorter id, e.g. a hash of this one ({event_id[:40]!r}...)"
        )
    if "\x00" in event_id:
        raise InvalidEventError(f"event_id must not contain NUL: {event_id!r:.80}")
    if event_id.startswith(LEDGER_KEY_PREFIX):
        raise InvalidEventError(
            f"event_id {event_id[:40]!r} starts with {LEDGER_KEY_PREFIX!r}, which the inbox "
            "keeps for its failure ledgers; pass an id with another prefix"
        )
    return event_id


def check_workflow_name(name: object) -> str:
    """Return ``name`` if Celery and the stores can use it as a workflow's name.

    The name becomes the task name ``xsm.workflow.<name>``, the prefix of every store key
    (``<name>:<key>``) and a column of the Django journal.

    Raises:
        ArgumentTypeError: ``name`` is not a str.
        ConfigurationError: empty, longer than ``MAX_WORKFLOW_NAME_LENGTH``, or holding
            whitespace, ``':'`` or control characters.
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(
            f"a workflow name must be a str, got {type(name).__name__} {name!r:.80}; "
            f"pass {_GOOD_NAME}"
        )
    if not name:
        raise ConfigurationError(f"a workflow name must not be empty; pass {_GOOD_NAME}")
    if len(name) > MAX_WORKFLOW_NAME_LENGTH:
        raise ConfigurationError(
            f"workflow name of {len(name)} characters is over {MAX_WORKFLOW_NAME_LENGTH}: its "
            "task name and store keys would not fit the stores' columns; pass a shorter "
            f"name, e.g. {_GOOD_NAME} ({name[:40]!r}...)"
        )
    bad = next((c for c in name if c == ":" or c.isspace() or _is_control(c)), None)
    if bad is not None:
        raise ConfigurationError(
            f"workflow name {name[:80]!r} contains {bad!r}: a name is the Celery task "
            f"'xsm.workflow.<name>' and the store key prefix '<name>:', so it must be free of "
            f"whitespace, ':' and control characters; pass {_GOOD_NAME}"
        )
    return name


def step_function_name(workflow: str) -> str:
    """The ``__name__`` of a workflow's step function: ``workflow_<name>`` as an identifier.

    Celery compiles ``def <__name__>(...)`` to read a task's signature, so a name with a dot
    or a dash (``billing.invoices``, ``kyc-checks``: good task names) would raise
    ``SyntaxError`` there; every character that cannot be in an identifier becomes ``_``.
    """
    return "workflow_" + "".join(c if f"_{c}".isidentifier() else "_" for c in workflow)


def _is_control(char: str) -> bool:
    """Control, format, surrogate, private-use or unassigned (Unicode category ``C*``)."""
    return unicodedata.category(char).startswith("C")
