"""What runs inside a worker beside the tasks: consumer step, relay, timers, status.

``consumer`` installs the inbound dispatcher as a consumer step; ``relay`` and ``timers`` are
the Beat tasks that publish the outbox and fire durable timers; ``status`` answers the
``xsm_states`` broadcast. The exporters are switched on from settings by
``xsm_celery.metrics.worker``.
"""
