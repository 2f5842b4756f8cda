"""The chart task's run: bind a chart to a task, carry out one run, report what it decided.

``chart_task`` is the ``ChartTask`` base class; ``machine`` binds the chart to its logic once
per task. A run goes one way, each step handing the next a value: ``execute`` reads the
message into a ``Run``; ``attempt.run_chart`` carries the attempt out, directly or through the
engine (which reaches the run only through the context it hands the ``work`` service), and
returns where it ``Settled``; ``execute`` acts on that verdict. ``header`` reads and writes the
signed ``xsm_chart`` header that carries the chart between runs; ``markers`` remember which
attempts started, so a redelivery after a dead worker counts.

Import ``ChartTask`` from ``xsm_celery.celery``; this package's face stays empty so that
importing one of its modules does not import the whole run.
"""
