"""A package whose ``tasks`` module only ``app.autodiscover_tasks`` imports."""
