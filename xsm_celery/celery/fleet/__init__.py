"""Fleet-wide task options: rate limits, concurrency leases and breakers shared by every worker.

``options`` holds the option values (``RateLimit``, ``Concurrency``, ``AIMD``); ``plan`` reads
them off a task class once; ``admission`` admits or defers a message before the body runs;
``headers`` reads the producer-written headers it may carry, as untrusted hints only;
``limit_names`` names a keyed limit without putting the key itself in metrics or logs;
``reading`` lists the fleet's state, as it is now, for a status or a scrape.
"""
