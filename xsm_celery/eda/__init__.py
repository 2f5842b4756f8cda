"""Event-driven plumbing: CloudEvents envelopes, broker adapters, dispatcher, outbox.

Everything here is standard library only (AsyncAPI validation imports ``jsonschema``, the
``asyncapi`` extra, when it is called). ``eda`` stands on ``persistence`` (instances are
loaded and saved with ``persisted()``, deduplicated on an ``Inbox``) and on ``patterns``
(it re-exports the dead-letter record and plugin from there, so both sources of dead letters
share one record). It imports the modules of ``patterns``, never the package itself, whose
``ChoreographyRouter`` is the one name resolved from here (:mod:`.choreography`).
"""

from __future__ import annotations

from xsm_celery.eda.asyncapi import (
    ASYNCAPI_VERSION,
    asyncapi_document,
    load_asyncapi_schema,
    validate_asyncapi,
)
from xsm_celery.eda.broker import BatchPublisher, BrokerAdapter, Delivery, SyncBrokerAdapter
from xsm_celery.eda.dead_letter import (
    DEAD_LETTER_EVENT_TYPE,
    BrokerDeadLetterSink,
    SQLiteDeadLetterStore,
    dlq_topic,
    redact_record,
)
from xsm_celery.eda.dispatcher import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_IN_FLIGHT,
    DispatchResult,
    InboundDispatcher,
)
from xsm_celery.eda.envelope import (
    ATTEMPT_EXTENSION,
    MAX_DATA_DEPTH,
    SPECVERSION,
    Envelope,
    default_event_name,
    new_id,
)
from xsm_celery.eda.fake import FakeBrokerAdapter, SyncFakeBrokerAdapter
from xsm_celery.eda.outages import is_broker_outage
from xsm_celery.eda.outbox import (
    PUBLISH_TAG,
    OutboxPlugin,
    PublishSpec,
    attach_cause,
    cause_of,
    consumed_events,
    publish_specs,
)
from xsm_celery.eda.outbox_protocols import FailedOutboxRecord, OutboxRecord, OutboxStore
from xsm_celery.eda.outbox_store import MemoryOutboxStore, SQLiteOutboxStore
from xsm_celery.eda.relay import OutboxRelay
from xsm_celery.eda.replay import ReplayResult, replay_dead_letter
from xsm_celery.errors import (
    BrokerPublishError,
    BrokerUnavailableError,
    EnvelopeCorruptError,
    EnvelopeTooLargeError,
    ReplayRefusedError,
)
from xsm_celery.patterns.dead_letter import (
    DeadLetter,
    DeadLetterStore,
    MemoryDeadLetterStore,
)
from xsm_celery.patterns.dead_letter.plugin import DeadLetterPlugin
from xsm_celery.persistence.protocols import DEFAULT_CLAIM_LEASE_S

__all__ = [
    # Envelopes
    "ATTEMPT_EXTENSION",
    "MAX_DATA_DEPTH",
    "SPECVERSION",
    "Envelope",
    "default_event_name",
    "new_id",
    # Brokers
    "BatchPublisher",
    "BrokerAdapter",
    "Delivery",
    "FakeBrokerAdapter",
    "SyncBrokerAdapter",
    "SyncFakeBrokerAdapter",
    "is_broker_outage",
    # Dispatcher
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_IN_FLIGHT",
    "DispatchResult",
    "InboundDispatcher",
    "attach_cause",
    "cause_of",
    # Outbox
    "PUBLISH_TAG",
    "OutboxPlugin",
    "PublishSpec",
    "consumed_events",
    "publish_specs",
    "DEFAULT_CLAIM_LEASE_S",
    "FailedOutboxRecord",
    "MemoryOutboxStore",
    "OutboxRecord",
    "OutboxRelay",
    "OutboxStore",
    "SQLiteOutboxStore",
    # Dead letters
    "DEAD_LETTER_EVENT_TYPE",
    "BrokerDeadLetterSink",
    "DeadLetter",
    "DeadLetterPlugin",
    "DeadLetterStore",
    "MemoryDeadLetterStore",
    "SQLiteDeadLetterStore",
    "dlq_topic",
    "redact_record",
    # Replay
    "ReplayResult",
    "replay_dead_letter",
    # AsyncAPI
    "ASYNCAPI_VERSION",
    "asyncapi_document",
    "load_asyncapi_schema",
    "validate_asyncapi",
    # Errors
    "BrokerPublishError",
    "BrokerUnavailableError",
    "EnvelopeCorruptError",
    "EnvelopeTooLargeError",
    "ReplayRefusedError",
]
