"""What runs inside a worker beside the tasks: consumer step, relay, timers, status, exporters.

``consumer`` installs the inbound dispatcher as a consumer step; ``relay`` and ``timers`` are
the Beat tasks that publish the outbox and fire durable timers; ``status`` answers the
``xsm_states`` broadcast; ``observability`` switches exporters on from settings.
"""
