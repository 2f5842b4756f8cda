"""A chart task that gives up: its dead letter, the local spool behind it, and its replay.

``writer`` builds the record from the run that gave up and writes it (through ``spool``, so
a store outage or a killed worker loses nothing); ``canvas`` keeps the chain and callbacks the
message carried; ``replay`` sends a dead-lettered task again.
"""
