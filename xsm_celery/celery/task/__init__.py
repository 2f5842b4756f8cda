"""The chart task's run: bind a chart to a task, carry out one run, report what it decided.

``chart_task`` is the ``ChartTask`` base class; ``execute`` reads a message and drives one
run; ``attempt`` steps the chart through one attempt; ``machine`` binds the chart to its logic
once per task; ``header`` reads and writes the signed ``xsm_chart`` header that carries the
chart between runs; ``markers`` remember which attempts started, so a redelivery after a dead
worker counts.

Import ``ChartTask`` from ``xsm_celery.celery``; this package's face stays empty so that
importing one of its modules does not import the whole run.
"""
