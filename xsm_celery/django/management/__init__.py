"""Management commands: ``xsm_dlq``, ``xsm_relay`` and ``xsm_timers``."""
